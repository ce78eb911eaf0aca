package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// providersCmd lists the sandbox providers the daemon is configured with.
func (a *app) providersCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "providers",
		Short: "List the sandbox providers the daemon can run sessions on",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			list, err := c.Providers(cmd.Context())
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(cmd.OutOrStdout(), list)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tHEALTHY\tCAPABILITIES\tDEFAULT")
			for _, p := range list.Providers {
				healthy := "yes"
				if !p.Healthy {
					healthy = "no: " + termSafe(p.Reason)
				}
				var caps []string
				for _, c := range []struct {
					on   bool
					name string
				}{{p.Capabilities.PauseResume, "pause"}, {p.Capabilities.Snapshot, "snapshot"}, {p.Capabilities.EgressRules, "egress"},
					{p.Capabilities.PreviewURLs, "preview"}, {p.Capabilities.FileTransfer, "files"}, {p.Capabilities.CarriedEgress, "carried-egress"}} {
					if c.on {
						caps = append(caps, c.name)
					}
				}
				caps = append(caps, p.Capabilities.Runtimes...)
				def := ""
				if p.Default {
					def = "yes"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", termSafe(p.Name), healthy, dash(termSafe(strings.Join(caps, ","))), def)
			}
			if len(list.Providers) == 0 {
				fmt.Fprintln(w, "(none: sessions run on the daemon's host; serve --provider-config adds providers)\t\t\t")
			}
			return w.Flush()
		},
	}
}

package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func (a *app) agentsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "agents",
		Short: "List the agents the daemon can run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			list, err := c.Agents(cmd.Context())
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(cmd.OutOrStdout(), list)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tAVAILABLE\tVERSION\tTITLE")
			for _, ag := range list.Agents {
				avail := "yes"
				if !ag.Available {
					avail = "no"
					if ag.Reason != "" {
						avail += ": " + ag.Reason
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ag.Name, avail, dash(ag.Version), ag.Title)
			}
			return tw.Flush()
		},
	}
}

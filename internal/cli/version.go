package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/version"
)

// versionProbeTimeout bounds the daemon health check of the version command.
const versionProbeTimeout = 3 * time.Second

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the CLI's version and build, and the daemon's version when it answers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			url, _ := a.endpoint(cmd)
			var daemon *client.Health
			c, probeErr := a.client(cmd)
			if probeErr == nil {
				ctx, cancel := context.WithTimeout(cmd.Context(), versionProbeTimeout)
				var h client.Health
				h, probeErr = c.Health(ctx)
				cancel()
				if probeErr == nil {
					daemon = &h
				}
			}
			out := cmd.OutOrStdout()
			build := version.Build()
			if a.json {
				v := struct {
					Version     string         `json:"version"`
					Build       version.Info   `json:"build"`
					URL         string         `json:"url"`
					Daemon      *client.Health `json:"daemon"`
					DaemonError string         `json:"daemon_error,omitempty"`
				}{Version: a.version, Build: build, URL: url, Daemon: daemon}
				if probeErr != nil {
					v.DaemonError = probeErr.Error()
				}
				return printJSON(out, v)
			}
			fmt.Fprintf(out, "agentbox %s\n", a.version)
			fmt.Fprintf(out, "build    %s\n", build.Details())
			if daemon != nil {
				fmt.Fprintf(out, "daemon   %s (event schema v%d) at %s\n", daemon.Version, daemon.SchemaVersion, url)
			} else {
				fmt.Fprintf(cmd.ErrOrStderr(), "daemon not reachable at %s: %s\n", url, errText(probeErr))
			}
			return nil
		},
	}
}

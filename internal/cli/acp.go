package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/acpserver"
)

// acpCmd is `agentbox acp`: agentbox speaks ACP as an agent on stdio, so
// that an editor can run any agentbox agent through the daemon (--url,
// --server is the same), with its sessions, policy and approvals.
func (a *app) acpCmd() *cobra.Command {
	var (
		agentName, server, model, mode string
	)
	cmd := &cobra.Command{
		Use:   "acp --agent NAME",
		Short: "Speak the Agent Client Protocol on stdio, driving an agentbox agent",
		Long: `Speak the Agent Client Protocol (ACP) as an agent on stdin and stdout, so that
an ACP client (an editor) drives the agent NAME through the agentbox daemon:
session/new creates an agentbox session in the editor's directory, prompts
become turns, permission requests go to the editor, session/cancel
interrupts, and session/load replays and resumes an agentbox session.

It talks to the daemon at --url (or --server; see AGENTBOX_URL and
AGENTBOX_TOKEN), which must be running ("agentbox serve"). Nothing but ACP
is written to stdout; diagnostics go to stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if agentName == "" {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--agent is required (see agentbox agents)")}
			}
			if server != "" {
				a.url = server
				_ = cmd.Flags().Set("url", server)
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			if _, err := c.Health(cmd.Context()); err != nil {
				return fmt.Errorf("the agentbox daemon at %s does not answer (start it with `agentbox serve`): %w", a.url, err)
			}
			in := cmd.InOrStdin()
			if in == nil {
				in = os.Stdin
			}
			return acpserver.Serve(cmd.Context(), c, acpserver.Config{Agent: agentName, Model: model, PermissionMode: mode}, in, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&agentName, "agent", "", "agentbox agent new sessions run (required)")
	f.StringVar(&server, "server", "", "daemon URL (the same as --url)")
	f.StringVar(&model, "model", "", "model of new sessions (agent-specific)")
	f.StringVar(&mode, "permission-mode", "", "permission mode of new sessions: default, accept_edits, bypass or plan")
	return cmd
}

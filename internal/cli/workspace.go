package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

// plainOrInert returns how text goes to w: byte for byte to a pipe or a
// file (a diff piped to git apply must stay exact), inert to a terminal
// (see termSafe): paths and contents are the agent's.
func (a *app) plainOrInert(w io.Writer) func(string) string {
	if a.env.isTerminal(w) {
		return termSafe
	}
	return func(s string) string { return s }
}

func (a *app) sessionsDiffCmd() *cobra.Command {
	var o struct {
		turn       string
		nameStatus bool
	}
	cmd := &cobra.Command{
		Use:   "diff ID",
		Short: "Show what a session changed in its workspace (since it started, or in one turn)",
		Long: `Print the unified diff of what a session changed in its workspace since it
started, or during one turn (--turn). Binary files and files over 1 MiB are
named, not diffed. --name-status prints a line per changed file instead;
--json the daemon's answer. To a terminal, paths and contents are shown
inert; to a pipe byte for byte (agentbox sessions diff ID | git apply).`,
		Example: `  agentbox sessions diff ses_…
  agentbox sessions diff ses_… --turn turn_… --name-status
  agentbox sessions diff ses_… | git apply`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			d, err := c.Diff(cmd.Context(), args[0], client.DiffOptions{Turn: o.turn})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if a.json {
				return printJSON(a.jsonTerminal(out), d)
			}
			text := a.plainOrInert(out)
			if o.nameStatus {
				for _, f := range d.Files {
					fmt.Fprintf(out, "%s\t%s\n", map[string]string{client.DiffAdded: "A", client.DiffModified: "M", client.DiffDeleted: "D"}[f.Status], text(f.Path))
				}
			} else if _, err := io.WriteString(out, text(d.Diff)); err != nil {
				return err
			}
			if d.Truncated {
				fmt.Fprintln(cmd.ErrOrStderr(), "agentbox: the answer was cut at a bound (files, bytes or the workspace's size): changes may be missing")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.turn, "turn", "", "only this turn's changes")
	cmd.Flags().BoolVar(&o.nameStatus, "name-status", false, "print STATUS<TAB>PATH per changed file (A, M, D) instead of the diff")
	return cmd
}

func (a *app) sessionsExecCmd() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "exec ID [flags] -- COMMAND [ARGS...]",
		Short: "Run a command in a session's sandbox, beside its agent",
		Long: `Run a command in the sandbox of a live sandboxed session, under the
session's policy, in the workspace as the agent sees it, and print its output.
Its writes reach the host workspace at the session's next commit (the end of
its running or next turn), like the agent's. Stdin is passed to the command
unless it is a terminal.

The exit code is the command's; 124 when it ran past its timeout, 128+N when
signal N ended it.`,
		Example: `  agentbox sessions exec ses_… -- go test ./...
  agentbox sessions exec ses_… --timeout 2m -- make check`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--timeout must not be negative (see %s --help)", cmd.CommandPath())}
			}
			req := client.SessionExecRequest{Argv: args[1:], TimeoutMS: timeout.Milliseconds()}
			if timeout > 0 && req.TimeoutMS == 0 {
				req.TimeoutMS = 1
			}
			if f, ok := cmd.InOrStdin().(*os.File); !ok || !a.env.isTerminal(f) {
				b, err := readLimited(cmd.InOrStdin(), "stdin")
				if err != nil {
					return err
				}
				req.Stdin = string(b)
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			res, err := c.SessionExec(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			if a.json {
				if err := printJSON(a.jsonTerminal(cmd.OutOrStdout()), res); err != nil {
					return err
				}
			} else {
				stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
				_, _ = io.WriteString(stdout, a.plainOrInert(stdout)(res.Stdout))
				_, _ = io.WriteString(stderr, a.plainOrInert(stderr)(res.Stderr))
				reportExec(stderr, res)
			}
			if code := execExitCode(res); code != 0 {
				return &ExitError{Code: code}
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "wall-clock limit, when shorter than the policy's (e.g. 2m)")
	return cmd
}

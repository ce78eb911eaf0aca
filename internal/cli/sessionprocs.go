package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

// sessionsProcessesCmd is `agentbox sessions processes`: the processes of
// a session's sandbox (the API's /v1/sessions/{id}/processes…).
func (a *app) sessionsProcessesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "processes ID",
		Short: "List the processes started in a session's sandbox",
		Long: `List the processes started in a session's sandbox (agentbox sessions
processes start), running and recently ended, oldest first. --json prints the
daemon's answer.`,
		Example: `  agentbox sessions processes ses_…
  agentbox sessions processes start ses_… --tag server -- npm run dev
  agentbox sessions processes logs ses_… server
  agentbox sessions processes kill ses_… server`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			l, err := c.SessionProcesses(args[0]).List(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if a.json {
				return printJSON(a.jsonTerminal(out), l)
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTAG\tSTATUS\tEXIT\tSTARTED\tCOMMAND")
			for _, p := range l.Processes {
				exit := ""
				if p.ExitCode != nil {
					exit = fmt.Sprint(*p.ExitCode)
					if p.Error != nil {
						exit += " (" + p.Error.Code + ")"
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, termSafe(p.Tag), p.Status, exit,
					p.StartedAt.Local().Format(time.DateTime), fit(termSafe(fmt.Sprint(p.Argv)), 60))
			}
			return tw.Flush()
		},
	}
	cmd.AddCommand(a.sessionsProcessStartCmd(), a.sessionsProcessLogsCmd(), a.sessionsProcessKillCmd(), a.sessionsProcessRmCmd())
	return cmd
}

func (a *app) sessionsProcessStartCmd() *cobra.Command {
	var (
		tag     string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "start ID [flags] -- COMMAND [ARGS...]",
		Short: "Start a process in a session's sandbox and print its id",
		Long: `Start a command in the sandbox of a live sandboxed session, beside its agent,
under the session's policy, and print the process's id at once. It runs until
it exits, is killed, or the session's sandbox closes (the session ends, stops
or is deleted). Follow it with logs, end it with kill.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--timeout must not be negative (see %s --help)", cmd.CommandPath())}
			}
			req := client.SessionStartProcess{Argv: args[1:], Tag: tag, TimeoutMS: timeout.Milliseconds()}
			if timeout > 0 && req.TimeoutMS == 0 {
				req.TimeoutMS = 1
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			p, err := c.SessionProcesses(args[0]).Start(cmd.Context(), req)
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(a.jsonTerminal(cmd.OutOrStdout()), p)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), p.ID)
			return err
		},
	}
	cmd.Flags().StringVar(&tag, "tag", "", "a name to find the process by instead of its id")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "wall-clock limit, when shorter than the policy's (e.g. 10m)")
	return cmd
}

func (a *app) sessionsProcessLogsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "logs ID PROCESS",
		Short: "Print a session's process's output until it exits",
		Long: `Print the output the daemon still holds of a process of the session (by id
or tag), then follow it to the process's exit. The exit code is the process's
(128+N when signal N ended it).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
			for ev, err := range c.SessionProcesses(args[0]).Stream(cmd.Context(), args[1], 0) {
				if err != nil {
					return err
				}
				switch {
				case ev.Output != nil:
					w := stdout
					if ev.Output.Stream == "stderr" {
						w = stderr
					}
					_, _ = io.WriteString(w, a.plainOrInert(w)(ev.Output.Data))
				case ev.Gap != nil:
					fmt.Fprintf(stderr, "agentbox: output %d to %d is no longer held by the daemon\n", ev.Gap.FromSeq, ev.Gap.ToSeq)
				case ev.Exit != nil:
					return processExit(stderr, *ev.Exit)
				}
			}
			return nil
		},
	}
}

// portableSignals are the signals the API names (a process in a session's
// sandbox is said to end by "SIGKILL") whose numbers are the same on every
// Unix.
var portableSignals = map[string]int{"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGKILL": 9, "SIGTERM": 15}

// processExit reports how a process ended and turns it into an exit code.
func processExit(stderr io.Writer, p client.Process) error {
	if p.Error != nil {
		fmt.Fprintf(stderr, "agentbox: %s: %s\n", p.Error.Code, termSafe(p.Error.Message))
	}
	if n, ok := portableSignals[p.Signal]; ok && (p.Error == nil || p.Error.Code != client.ExecTimeout) {
		return &ExitError{Code: 128 + n}
	}
	res := client.ExecResult{Signal: p.Signal, Error: p.Error}
	if p.ExitCode != nil {
		res.ExitCode = *p.ExitCode
	}
	if code := execExitCode(res); code != 0 {
		return &ExitError{Code: code}
	}
	return nil
}

func (a *app) sessionsProcessKillCmd() *cobra.Command {
	var signal string
	cmd := &cobra.Command{
		Use:   "kill ID PROCESS",
		Short: "Signal a session's process (SIGTERM by default)",
		Long: `Send a signal to a process of the session (by id or tag): to the command's
process group; SIGKILL ends that group, never the session's sandbox.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			return c.SessionProcesses(args[0]).Signal(cmd.Context(), args[1], signal)
		},
	}
	cmd.Flags().StringVarP(&signal, "signal", "s", "SIGTERM", "the signal: TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT or WINCH")
	return cmd
}

func (a *app) sessionsProcessRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm ID PROCESS",
		Short: "Kill a session's process if it runs and forget it",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			return c.SessionProcesses(args[0]).Delete(cmd.Context(), args[1])
		},
	}
}

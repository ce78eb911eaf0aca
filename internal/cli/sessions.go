package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
)

var sessionStates = []string{client.StatusStarting, client.StatusIdle, client.StatusRunning, client.StatusEnded, client.StatusFailed, client.StatusInterrupted, client.StatusStopped, client.StatusPaused}

func (a *app) sessionsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "sessions",
		Aliases: []string{"session", "s"},
		Short:   "List, inspect, follow and remove sessions; show and change their network rules, their changes, run commands in their sandboxes",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.sessionsListCmd(), a.sessionsShowCmd(), a.sessionsEventsCmd(), a.sessionsTailCmd(), a.sessionsResumeCmd(), a.sessionsPauseCmd(), a.sessionsSetCmd(), a.sessionsRmCmd(), a.sessionsNetworkCmd(),
		a.sessionsDiffCmd(), a.sessionsExecCmd(), a.sessionsProcessesCmd())
	return cmd
}

func (a *app) sessionsListCmd() *cobra.Command {
	var o client.ListOptions
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List sessions, newest first",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Status != "" && !slices.Contains(sessionStates, o.Status) {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--status %q: want one of %s", o.Status, strings.Join(sessionStates, ", "))}
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			list, err := c.ListSessions(cmd.Context(), o)
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(a.jsonTerminal(cmd.OutOrStdout()), list)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tAGENT\tMODEL\tSTATUS\tCREATED")
			for _, s := range list.Sessions {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.ID, termSafe(s.Agent), termSafe(dash(s.Model)), s.Status, formatTime(s.CreatedAt))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if list.NextBefore != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "more: agentbox sessions list --before %s\n", list.NextBefore)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Status, "status", "", "only sessions in this state: "+strings.Join(sessionStates, "|"))
	cmd.Flags().IntVar(&o.Limit, "limit", 0, "at most this many sessions (default: the daemon's page size)")
	cmd.Flags().StringVar(&o.Before, "before", "", "continue a listing: sessions created before this one")
	return cmd
}

func (a *app) sessionsShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show one session",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			s, err := c.GetSession(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(a.jsonTerminal(cmd.OutOrStdout()), s)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			row := func(k, v string) {
				if v != "" {
					fmt.Fprintf(tw, "%s:\t%s\n", termSafe(k), termSafe(v))
				}
			}
			row("ID", s.ID)
			row("Agent", s.Agent)
			row("Model", s.Model)
			row("Mode", s.Mode)
			row("Permission mode", s.PermissionMode)
			row("Status", s.Status)
			row("Current turn", s.CurrentTurnID)
			row("Cwd", s.Cwd)
			row("Native session", s.NativeSessionID)
			if sb := s.Sandbox; s.Sandboxed && sb != nil {
				row("Sandboxed", "yes")
				row("Sandbox runtime", sb.Runtime)
				row("Sandbox mechanisms", strings.Join(sb.Mechanisms, ", "))
				if len(sb.Degraded) > 0 {
					row("Sandbox degraded", strings.Join(sb.Degraded, ", "))
				}
				row("Policy hash", sb.PolicyHash)
			} else {
				row("Sandboxed", "no (the agent runs on the host)")
			}
			row("Created", formatTime(s.CreatedAt))
			row("Updated", formatTime(s.UpdatedAt))
			if s.EndedAt != nil {
				row("Ended", formatTime(*s.EndedAt))
			}
			keys := make([]string, 0, len(s.Metadata))
			for k := range s.Metadata {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				row("Metadata."+k, s.Metadata[k])
			}
			return tw.Flush()
		},
	}
}

func (a *app) sessionsEventsCmd() *cobra.Command {
	var after int64
	var limit int
	cmd := &cobra.Command{
		Use:   "events ID",
		Short: "Print a session's recorded events",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if after < 0 || limit < 0 {
				return &ExitError{Code: ExitUsage, Err: errors.New("--after and --limit must not be negative")}
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			show := a.eventWriter(cmd.OutOrStdout())
			n := 0
			errLimit := errors.New("limit reached")
			err = c.EventsAll(cmd.Context(), args[0], after, func(ev event.Event) error {
				if err := show(ev); err != nil {
					return err
				}
				if n++; limit > 0 && n >= limit {
					return errLimit
				}
				return nil
			})
			if errors.Is(err, errLimit) {
				err = nil
			}
			return errors.Join(err, show(event.Event{}))
		},
	}
	cmd.Flags().Int64Var(&after, "after", 0, "only events with a greater seq")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many events (default: all)")
	return cmd
}

// eventWriter returns a function that prints events as --json asks; a zero
// event flushes.
func (a *app) eventWriter(w io.Writer) func(event.Event) error {
	if a.json {
		jl := newJSONLines(a.jsonTerminal(w))
		return func(ev event.Event) error {
			if ev.Seq == 0 {
				return nil
			}
			return jl.write(ev)
		}
	}
	r := NewRenderer(w, a.colorFor(w))
	return func(ev event.Event) error {
		if ev.Seq == 0 {
			r.Flush()
		} else {
			r.Render(ev)
		}
		return r.Err()
	}
}

func (a *app) sessionsTailCmd() *cobra.Command {
	var after int64
	cmd := &cobra.Command{
		Use:   "tail ID",
		Short: "Follow a session's events as they happen",
		Long: `Follow a session's events as they happen, from the start or from --after.
It stops when the session ends (at once for a session that has ended) or on
Ctrl-C. Requests are shown, not answered; use run to answer them.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if after < 0 {
				return &ExitError{Code: ExitUsage, Err: errors.New("--after must not be negative")}
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			id := args[0]
			s, err := c.GetSession(cmd.Context(), id)
			if err != nil {
				return err
			}
			if !isLive(s.Status) {
				// Nothing more will come: print the log instead of waiting.
				show := a.eventWriter(cmd.OutOrStdout())
				err := c.EventsAll(cmd.Context(), id, after, show)
				return errors.Join(err, show(event.Event{}))
			}
			f := a.newFollower(cmd, c, id)
			f.stop = func(ctx context.Context, ev event.Event, _ event.Payload) (bool, error) {
				if ev.Type != event.TypeSessionEnded {
					return false, nil
				}
				// A session.ended may be an old one, before a resume: stop
				// only if the session is over now.
				s, err := c.GetSession(ctx, id)
				if client.IsNotFound(err) {
					return true, nil // purged
				}
				return err != nil || !isLive(s.Status), err
			}
			return f.follow(cmd.Context(), after)
		},
	}
	cmd.Flags().Int64Var(&after, "after", 0, "start after this seq")
	return cmd
}

func (a *app) sessionsResumeCmd() *cobra.Command {
	var env []string
	cmd := &cobra.Command{
		Use:   "resume ID",
		Short: "Start a new agent process for a session that is not live, continuing its conversation",
		Long: `Resume a session that was interrupted by a daemon restart, ended, failed or
stopped: the daemon starts the agent again on its own session id (for agents
that can resume). A session whose idle agent the daemon stopped (status
stopped) or whose sandbox is paused (status paused) needs no resume: its next
message resumes it.
Continue it with: agentbox run --session ID "..."`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := parseEnv(env)
			if err != nil {
				return err
			}
			req := client.ResumeSession{Env: e}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			s, err := c.Resume(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			if a.json {
				return newJSONLines(cmd.OutOrStdout()).write(s)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "resumed %s (%s, %s)\n", s.ID, termSafe(s.Agent), s.Status)
			return err
		},
	}
	cmd.Flags().StringArrayVar(&env, "env", nil, "NAME=VALUE for the agent's environment (repeatable; never stored)")
	return cmd
}

// sessionsPauseCmd pauses a session on a provider.
func (a *app) sessionsPauseCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pause ID",
		Short: "Pause the sandbox of a live session on a provider; its next message resumes it",
		Long: `Pause a live session on a provider whose sandboxes pause (see
"agentbox providers": pause_resume): its agent is frozen with its memory and
files, and its status becomes paused. Its next message resumes it (or
"agentbox sessions resume ID"). Not while a turn runs: wait for it, or
interrupt it first.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			s, err := c.Pause(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json {
				return newJSONLines(cmd.OutOrStdout()).write(s)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "paused %s (%s, %s)\n", s.ID, termSafe(s.Agent), s.Status)
			return err
		},
	}
}

// sessionsSetCmd changes a session's model or mode between turns.
func (a *app) sessionsSetCmd() *cobra.Command {
	var model, mode string
	cmd := &cobra.Command{
		Use:   "set ID [--model MODEL] [--mode MODE]",
		Short: "Change a session's model or mode for its next turns",
		Long: `Change the model and/or mode of a session between turns (not while a turn
runs: wait for it, or interrupt it first). The agent takes the change at once
where it can (see "agentbox agents show NAME"); a session that is not live
starts with it when resumed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if model == "" && mode == "" {
				return errors.New("give --model, --mode or both")
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			s, err := c.UpdateSession(cmd.Context(), args[0], client.UpdateSession{Model: model, Mode: mode})
			if err != nil {
				return err
			}
			if a.json {
				return newJSONLines(cmd.OutOrStdout()).write(s)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "session %s: model %s, mode %s\n", s.ID, dash(termSafe(s.Model)), dash(termSafe(s.Mode)))
			return err
		},
	}
	cmd.Flags().StringVar(&model, "model", "", "the model from the next turn on")
	cmd.Flags().StringVar(&mode, "mode", "", "the agent-specific mode from the next turn on")
	return cmd
}

func (a *app) sessionsRmCmd() *cobra.Command {
	var purge bool
	cmd := &cobra.Command{
		Use:     "rm ID...",
		Aliases: []string{"delete"},
		Short:   "End sessions; with --purge also delete their logs",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			var errs []error
			for _, id := range args {
				if err := c.DeleteSession(cmd.Context(), id, purge); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", id, err))
					continue
				}
				verb := "ended"
				if purge {
					verb = "purged"
				}
				if a.json {
					_ = newJSONLines(cmd.OutOrStdout()).write(map[string]any{"id": id, "deleted": true, "purged": purge})
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", verb, id)
				}
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().BoolVar(&purge, "purge", false, "also delete the session's event log")
	return cmd
}

func isLive(status string) bool {
	return status == client.StatusStarting || status == client.StatusIdle || status == client.StatusRunning
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// formatTime prints a time in the local zone to the second.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// parseEnv reads repeated --env NAME=VALUE flags.
func parseEnv(kvs []string) (map[string]string, error) {
	var env map[string]string
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--env %q: want NAME=VALUE", kv)}
		}
		if env == nil {
			env = map[string]string{}
		}
		env[k] = v
	}
	return env, nil
}

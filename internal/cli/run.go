package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
)

var permissionModes = []string{client.PermissionDefault, client.PermissionAcceptEdits, client.PermissionBypass, client.PermissionPlan}

func (a *app) runCmd() *cobra.Command {
	var o struct {
		agent, model, permissionMode, cwd, session, policy, provider string
		env                                                          []string
		yes, rm                                                      bool
	}
	cmd := &cobra.Command{
		Use:   "run [flags] PROMPT...",
		Short: "Send a prompt to an agent and follow the turn to its end",
		Long: `Send a prompt to an agent and follow the turn to its end.

A new session is created unless --session names one to continue. The turn is
shown as it happens; permission requests are asked at the terminal (or denied,
unless --yes, when stdin is not a terminal) and questions are answered from a
typed line. Ctrl-C once interrupts the turn, twice quits.

The session is kept after the turn (run prints how to continue, resume or
remove it) unless --rm, which ends and removes it, log included, once the turn
is over however it ended.

The exit code is 0 when the turn ends normally, 1 when it ends with an error
and 130 when it was interrupted.`,
		Example: `  agentbox run --agent claude "fix the failing test"
  agentbox run --session ses_0190... "now add a changelog entry"
  agentbox run --rm --agent mock "a one-off question"
  agentbox run --agent codex --json "explain main.go" | jq .type`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			prompt := strings.Join(args, " ")
			if strings.TrimSpace(prompt) == "" {
				return errors.New("the prompt is empty")
			}
			if o.session == "" && o.agent == "" {
				return &ExitError{Code: ExitUsage, Err: errors.New("--agent is required to start a session (or --session to continue one)")}
			}
			if o.session != "" && (o.agent != "" || o.model != "" || o.permissionMode != "" || o.cwd != "" || o.policy != "" || o.provider != "") {
				return &ExitError{Code: ExitUsage, Err: errors.New("--agent, --model, --permission-mode and --cwd apply to new sessions; they cannot be combined with --session")}
			}
			if o.permissionMode != "" && !slices.Contains(permissionModes, o.permissionMode) {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--permission-mode %q: want one of %s", o.permissionMode, strings.Join(permissionModes, ", "))}
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			id, after := o.session, int64(0)
			if id == "" {
				cwd := o.cwd
				if cwd != "" && !filepath.IsAbs(cwd) {
					if cwd, err = filepath.Abs(cwd); err != nil {
						return err
					}
				}
				env, err := parseEnv(o.env)
				if err != nil {
					return err
				}
				create := client.CreateSession{Agent: o.agent, Model: o.model, PermissionMode: o.permissionMode, Cwd: cwd, Env: env, Provider: o.provider}
				if o.policy != "" {
					if create.Policy, create.PolicySource, err = policyFlag(o.policy); err != nil {
						return err
					}
				}
				s, err := c.CreateSession(ctx, create)
				if err != nil {
					return fmt.Errorf("create session: %w", err)
				}
				id = s.ID
				if s.Sandbox != nil {
					// Limits lowered on the way are said, even with --json
					// (stderr): none is lowered silently.
					reportAdjusted(cmd.ErrOrStderr(), s.Sandbox.Adjusted)
				}
				if !a.json {
					fmt.Fprintf(cmd.ErrOrStderr(), "session %s (continue with --session %s)\n", id, id)
				}
			} else if after, err = c.LastSeq(ctx, id); err != nil {
				return err
			}
			// From here on the session exists: --rm removes it however
			// the run ends, otherwise run says what to do with it.
			defer func() {
				if o.rm {
					if rerr := removeSession(ctx, c, id); rerr != nil {
						err = errors.Join(err, rerr)
					}
				} else if !a.json {
					printKept(cmd.ErrOrStderr(), id)
				}
			}()
			turn, err := c.Send(ctx, id, prompt)
			if err != nil {
				return fmt.Errorf("send: %w", err)
			}
			f := a.newFollower(cmd, c, id)
			f.prompt, f.interruptTurn, f.yes = true, true, o.yes
			var tc event.TurnCompleted
			f.stop = func(_ context.Context, ev event.Event, p event.Payload) (bool, error) {
				switch ev.Type {
				case event.TypeSessionEnded:
					return true, &ExitError{Code: 1, Err: fmt.Errorf("session %s ended before the turn completed", id)}
				case event.TypeTurnCompleted:
					done, ok := p.(*event.TurnCompleted)
					switch {
					case ok && (ev.TurnID == turn.TurnID || ev.TurnID == "" && done.TurnID == turn.TurnID):
						tc = *done
						return true, nil
					case !ok && ev.TurnID == turn.TurnID:
						return true, fmt.Errorf("turn %s: its turn.completed event does not decode", turn.TurnID)
					}
				}
				return false, nil
			}
			if err := f.follow(ctx, after); err != nil {
				return err
			}
			switch tc.StopReason {
			case event.StopError:
				msg := "turn " + turn.TurnID + " failed"
				if tc.Message != "" {
					msg += ": " + tc.Message
				}
				return &ExitError{Code: 1, Err: errors.New(msg)}
			case event.StopInterrupted:
				return &ExitError{Code: ExitInterrupted, Err: errors.New("turn " + turn.TurnID + " was interrupted")}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.agent, "agent", "", "agent to start (see agentbox agents)")
	fl.StringVar(&o.model, "model", "", "model for the agent")
	fl.StringVar(&o.permissionMode, "permission-mode", "", "how the agent's approval prompts are settled: "+strings.Join(permissionModes, "|"))
	fl.StringVar(&o.cwd, "cwd", "", "working directory of the session (default: a fresh one on the daemon)")
	fl.StringVar(&o.provider, "provider", "", "sandbox provider the session runs on (agentbox providers lists them); default: the daemon's --provider, else its host")
	fl.StringVar(&o.policy, "policy", "", "sandbox policy of the session: a preset (agent-default, strict, ...) or a policy file; default: the daemon's --session-policy")
	fl.StringArrayVar(&o.env, "env", nil, "NAME=VALUE for the agent's environment, e.g. ANTHROPIC_BASE_URL (repeatable; never stored)")
	fl.StringVar(&o.session, "session", "", "continue this session instead of starting one")
	fl.BoolVarP(&o.yes, "yes", "y", false, "allow permission requests when stdin is not a terminal")
	fl.BoolVar(&o.rm, "rm", false, "end and remove the session (its log too) after the turn")
	return cmd
}

// removeSession ends and purges session id for run --rm, also when the run
// was cancelled (Ctrl-C twice): the removal gets its own deadline.
func removeSession(ctx context.Context, c *client.Client, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := c.DeleteSession(ctx, id, true); err != nil && !client.IsNotFound(err) {
		return fmt.Errorf("remove session %s (--rm): %w", id, err)
	}
	return nil
}

// printKept tells how to continue, resume or remove a session run kept.
func printKept(w io.Writer, id string) {
	fmt.Fprintf(w, "session %s is kept:\n"+
		"  continue: agentbox run --session %s \"...\"\n"+
		"  resume:   agentbox sessions resume %s   (after a daemon restart)\n"+
		"  remove:   agentbox sessions rm --purge %s\n", id, id, id, id)
}

// newFollower returns a follower writing to the command's streams.
func (a *app) newFollower(cmd *cobra.Command, c *client.Client, sessionID string) *follower {
	out := cmd.OutOrStdout()
	f := &follower{
		c: c, sessionID: sessionID, in: cmd.InOrStdin(),
		errw:   &lockedWriter{w: cmd.ErrOrStderr()},
		notify: a.env.notify,
	}
	f.ask = a.interactive(f.in)
	if a.json {
		f.jsonOut = newJSONLines(a.jsonTerminal(out))
	} else {
		f.render = NewRenderer(out, a.colorFor(out))
	}
	return f
}

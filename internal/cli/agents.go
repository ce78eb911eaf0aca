package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent/amp"
	"github.com/agentbox/agentbox/internal/agent/install"
)

func (a *app) agentsCmd() *cobra.Command {
	cmd := &cobra.Command{
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
			// The daemon's text (custom agents' names and titles, reasons
			// quoting paths) is made inert, and the table fits 100
			// columns: a reason goes, wrapped, under its row.
			rows := make([]agentRow, 0, len(list.Agents))
			for _, ag := range list.Agents {
				r := agentRow{Name: termSafe(ag.Name), Available: "yes", Version: dash(termSafe(ag.Version)), Title: termSafe(ag.Title)}
				if !ag.Available {
					r.Available, r.Reason = "no", termSafe(ag.Reason)
				}
				rows = append(rows, r)
			}
			return writeAgentsTable(cmd.OutOrStdout(), rows)
		},
	}
	cmd.AddCommand(a.agentsInstallCmd(), a.agentsShowCmd())
	return cmd
}

// agentsShowCmd shows one agent with the models and modes it offers.
func (a *app) agentsShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show an agent with its capabilities and the models and modes it offers",
		Long: `Show an agent as the daemon sees it, with the models and modes the agent
itself announced (in the latest session of it that started). Select one with
"agentbox run --model" or switch a session between turns with
"agentbox sessions set ID --model M --mode M".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			ag, err := c.Agent(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(cmd.OutOrStdout(), ag)
			}
			w := cmd.OutOrStdout()
			avail := "yes"
			if !ag.Available {
				avail = "no: " + ag.Reason
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "name\t%s\ntitle\t%s\navailable\t%s\nversion\t%s\n", termSafe(ag.Name), termSafe(ag.Title), termSafe(avail), dash(termSafe(ag.Version)))
			fmt.Fprintf(tw, "model switch\t%s\nmode switch\t%s\n", yesNo(ag.Capabilities.ModelSwitch), yesNo(ag.Capabilities.ModeSwitch))
			if ag.CatalogNote != "" {
				fmt.Fprintf(tw, "models\t%s\n", termSafe(ag.CatalogNote))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, l := range []struct {
				title, def string
				list       []client.Choice
			}{{"MODEL", ag.DefaultModel, ag.Models}, {"MODE", ag.DefaultMode, ag.Modes}} {
				if len(l.list) == 0 {
					continue
				}
				fmt.Fprintln(w)
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintf(tw, "%s\tNAME\tDEFAULT\n", l.title)
				for _, ch := range l.list {
					def := ""
					if ch.ID == l.def {
						def = "yes"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\n", termSafe(ch.ID), dash(termSafe(ch.Name)), def)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// agentsInstallCmd installs agent CLIs into the local cache itself: no
// daemon is involved, so it works before one runs (and is what the daemon's
// adapters then find).
func (a *app) agentsInstallCmd() *cobra.Command {
	var all, force bool
	cmd := &cobra.Command{
		Use:   "install NAME... | --all",
		Short: "Install agent CLIs at their pinned versions from the npm registry into the local cache",
		Long: `Install agent CLIs at the versions agentbox is pinned to, from the npm
registry (with your npm configuration) into the per-user cache:
$AGENTBOX_CACHE_DIR/agents, else $XDG_CACHE_HOME/agentbox/agents, else
~/.cache/agentbox/agents. An agent already there is not installed again
(unless --force). Needs npm; no daemon.

Agents: ` + strings.Join(install.Names(), ", "),
		Example: "  agentbox agents install claude\n  agentbox agents install --all",
		RunE: func(cmd *cobra.Command, names []string) error {
			usage := func(err error) error {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())}
			}
			switch {
			case all && len(names) > 0:
				return usage(errors.New("give agent names or --all, not both"))
			case all:
				names = install.Names()
			case len(names) == 0:
				return usage(errors.New("name the agents to install, or --all"))
			}
			known := install.Names()
			for _, n := range names {
				switch {
				case n == amp.Name:
					// Listed by the daemon, with its reason, but there
					// is nothing to install that could run offline.
					return &ExitError{Code: 1, Err: fmt.Errorf("%s cannot be installed: %s", n, amp.Reason)}
				case !slices.Contains(known, n):
					return usage(fmt.Errorf("unknown agent %q (known: %s)", n, strings.Join(known, ", ")))
				}
			}
			ctx, stop := a.interruptible(cmd.Context())
			defer stop()
			return a.installAgents(ctx, cmd, unique(names), force)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "install every known agent")
	cmd.Flags().BoolVar(&force, "force", false, "install again even if the cache holds the agent")
	return cmd
}

func (a *app) installAgents(ctx context.Context, cmd *cobra.Command, names []string, force bool) error {
	progress := cmd.ErrOrStderr()
	done, failed := []install.Installed{}, []string{}
	for _, n := range names {
		ensure := install.Ensure
		if force {
			ensure = install.Reinstall
		}
		got, err := ensure(ctx, n, progress)
		if err != nil {
			if ctx.Err() != nil {
				return &ExitError{Code: ExitInterrupted, Err: err}
			}
			fmt.Fprintf(progress, "agentbox: %s: %v\n", n, err)
			failed = append(failed, n)
			continue
		}
		done = append(done, got)
	}
	out := cmd.OutOrStdout()
	if a.json {
		if err := printJSON(out, map[string]any{"installed": done, "failed": failed}); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		for _, in := range done {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", in.Name, in.Version, in.Binary)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("could not install %s (see above)", strings.Join(failed, ", "))
	}
	return nil
}

// interruptible returns a context that Ctrl-C cancels, so that an install
// cleans up after itself.
func (a *app) interruptible(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	sig := make(chan os.Signal, 1)
	stopNotify := a.env.notify(sig)
	go func() {
		select {
		case <-sig:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() { stopNotify(); cancel() }
}

// unique drops repeated names, keeping the first of each.
func unique(names []string) []string {
	var out []string
	for _, n := range names {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

//go:build linux

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/gvisor"
	"github.com/agentbox/agentbox/internal/sandbox/microvm"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
	"github.com/agentbox/agentbox/internal/sandbox/probe"
	"github.com/agentbox/agentbox/internal/sandbox/process"
)

// doctorReport is what `agentbox doctor --json` prints.
type doctorReport struct {
	Mechanisms []sandbox.Mechanism `json:"mechanisms"`
	Runtimes   []sandbox.Probe     `json:"runtimes"`
	Presets    []presetStatus      `json:"presets"`
	// Providers are the sandbox providers of the daemon the CLI reaches
	// (GET /v1/providers), when it answers; ProvidersNote says why not.
	Providers     []client.ProviderInfo `json:"providers,omitempty"`
	ProvidersNote string                `json:"providers_note,omitempty"`
}

type presetStatus struct {
	Name      string   `json:"name"`
	Isolation string   `json:"isolation"`
	OK        bool     `json:"ok"`
	Missing   []string `json:"missing,omitempty"`
}

// doctorCmd probes this machine's isolation mechanisms locally (no daemon).
func (a *app) doctorCmd() *cobra.Command {
	var noBoot bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check which sandbox mechanisms work on this machine (local; no daemon needed)",
		Long: `doctor tries every isolation mechanism agentbox uses, for real: namespaces,
overlayfs in a user namespace, Landlock, seccomp, cgroups, gVisor (runsc) and a
KVM guest boot. It prints what works, which runtimes (process, gvisor,
microvm) can run, and which policy presets can be enforced. It exits non-zero
when the default runtime (process) cannot run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			prog := &progress{w: cmd.ErrOrStderr(), tty: a.env.isTerminal(cmd.ErrOrStderr())}
			defer prog.finish()
			prog.say("checking namespaces, overlayfs, Landlock, seccomp and cgroups…")
			rep := doctorReport{Mechanisms: probe.Host(ctx, probe.Options{Runsc: true, Progress: prog.mechanism})}
			runtimes := []sandbox.Runtime{process.New(process.Options{}), gvisor.New(gvisor.Options{})}
			if !noBoot {
				runtimes = append(runtimes, microvm.New(microvm.Options{}))
			}
			avail := map[string]bool{}
			for _, rt := range runtimes {
				prog.runtimeStarts(rt.Name())
				p := rt.Probe(ctx)
				prog.runtime(p)
				rep.Runtimes = append(rep.Runtimes, p)
				avail[p.Runtime] = p.Available
				// The boot probe's rows, and whether this process may make
				// process sandboxes at all (root), belong in the mechanism
				// table.
				for _, m := range p.Mechanisms {
					if (p.Runtime == microvm.Name && m.Name == "kvm-boot") || (p.Runtime == "process" && m.Name == "root") {
						rep.Mechanisms = append(rep.Mechanisms, m)
					}
				}
			}
			if noBoot {
				rep.Runtimes = append(rep.Runtimes, sandbox.Probe{Runtime: microvm.Name, Reason: "boot probe skipped (--no-boot)"})
			}
			rep.Presets = presetStatuses(rep.Mechanisms, avail)
			rep.Providers, rep.ProvidersNote = a.doctorProviders(cmd)
			prog.finish()

			out := cmd.OutOrStdout()
			if a.json {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else if err := printDoctor(out, rep); err != nil {
				return err
			} else if err := printDoctorProviders(out, rep); err != nil {
				return err
			}
			if !avail["process"] {
				return &ExitError{Code: 1, Err: fmt.Errorf("the default runtime (process) cannot run here: %s", reasonOf(rep.Runtimes, "process"))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&noBoot, "no-boot", false, "skip the KVM guest boot probe (up to 10 s)")
	return cmd
}

func reasonOf(ps []sandbox.Probe, name string) string {
	for _, p := range ps {
		if p.Runtime == name {
			return p.Reason
		}
	}
	return "not probed"
}

// presetStatuses says, for each built-in preset, whether its runtime runs
// here and whether the mechanisms its limits need work.
func presetStatuses(rows []sandbox.Mechanism, avail map[string]bool) []presetStatus {
	ok := func(name string) bool { m, found := probe.Find(rows, name); return found && m.OK }
	ws, err := os.MkdirTemp("", "agentbox-doctor-")
	if err == nil {
		defer func() { _ = os.RemoveAll(ws) }() // best effort: a temp dir
	}
	var out []presetStatus
	for _, name := range policy.PresetNames() {
		st := presetStatus{Name: name}
		p, err := policy.Preset(name)
		if err != nil {
			st.Missing = []string{err.Error()}
			out = append(out, st)
			continue
		}
		st.Isolation = p.Isolation()
		if !avail[st.Isolation] {
			st.Missing = append(st.Missing, "runtime "+st.Isolation)
		}
		if st.Isolation == "process" {
			for _, m := range []string{"userns", "mountns", "pidns", "netns", "seccomp", "overlay-userns"} {
				if !ok(m) {
					st.Missing = append(st.Missing, m)
				}
			}
		}
		if spec, err := p.Compile(ws, func(string) (string, bool) { return "", false }); err != nil {
			st.Missing = append(st.Missing, "compile: "+err.Error())
		} else if l := spec.Limits; (l.MemoryBytes > 0 || l.Pids > 0 || l.CPUs > 0) && !ok("cgroup") {
			st.Missing = append(st.Missing, "cgroup")
		}
		st.OK = len(st.Missing) == 0
		out = append(out, st)
	}
	return out
}

func printDoctor(w interface{ Write([]byte) (int, error) }, rep doctorReport) error {
	mark := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "missing"
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MECHANISM\tSTATUS\tDETAIL")
	for _, m := range rep.Mechanisms {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", m.Name, mark(m.OK), m.Detail)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "RUNTIME\tSTATUS\tDETAIL")
	for _, p := range rep.Runtimes {
		status := "available"
		if !p.Available {
			status = "unavailable"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Runtime, status, p.Reason)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "PRESET\tSTATUS\tDETAIL")
	for _, p := range rep.Presets {
		status, detail := "enforceable", "isolation "+p.Isolation
		if !p.OK {
			status, detail = "not enforceable", "missing: "+strings.Join(p.Missing, ", ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, status, detail)
	}
	return tw.Flush()
}

// progress tells the user on stderr what doctor is checking, since a KVM
// boot alone can take 10 s: on a terminal one line rewritten in place and
// cleared before the report; otherwise a line per check. stdout (the
// table, or --json) is the same either way.
type progress struct {
	w    io.Writer
	tty  bool
	done bool
}

func (p *progress) say(line string) {
	if p.done {
		return
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[Kdoctor: %s", line)
		return
	}
	fmt.Fprintf(p.w, "doctor: %s\n", line)
}

// mechanism is probe.Options.Progress.
func (p *progress) mechanism(m sandbox.Mechanism, running bool) {
	switch {
	case running && m.Name == "runsc":
		p.say("checking runsc (a gVisor smoke test)…")
	case running:
		p.say("checking " + m.Name + "…")
	case m.OK:
		p.say(m.Name + " ok")
	default:
		p.say(m.Name + " missing")
	}
}

func (p *progress) runtimeStarts(name string) {
	if name == microvm.Name {
		p.say("checking runtime microvm: booting a KVM guest (up to 10 s; --no-boot skips it)…")
		return
	}
	p.say("checking runtime " + name + "…")
}

func (p *progress) runtime(pr sandbox.Probe) {
	if pr.Available {
		p.say("runtime " + pr.Runtime + " available")
		return
	}
	p.say("runtime " + pr.Runtime + " unavailable")
}

// finish clears a terminal's progress line; it is safe to call twice.
func (p *progress) finish() {
	if !p.done && p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	p.done = true
}

// doctorProviders asks the daemon the CLI reaches, if one answers within
// a few seconds, which sandbox providers it has and whether each answers
// with its credentials. The rest of doctor needs no daemon.
func (a *app) doctorProviders(cmd *cobra.Command) ([]client.ProviderInfo, string) {
	c, err := a.client(cmd)
	if err != nil {
		return nil, "providers not checked: " + err.Error()
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
	defer cancel()
	list, err := c.Providers(ctx)
	if err != nil {
		return nil, "providers not checked: no daemon answered (" + err.Error() + ")"
	}
	if len(list.Providers) == 0 {
		return nil, "the daemon has no sandbox providers (serve --provider-config adds them)"
	}
	return list.Providers, ""
}

func printDoctorProviders(w io.Writer, rep doctorReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nPROVIDER\tREACHABLE")
	if rep.ProvidersNote != "" {
		fmt.Fprintf(tw, "-\t%s\n", termSafe(rep.ProvidersNote))
	}
	for _, p := range rep.Providers {
		state := "yes"
		if !p.Healthy {
			state = "no: " + termSafe(p.Reason)
		}
		fmt.Fprintf(tw, "%s\t%s\n", termSafe(p.Name), state)
	}
	return tw.Flush()
}

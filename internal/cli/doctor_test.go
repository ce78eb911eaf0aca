package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestDoctor runs the real probes (no daemon) and checks the report's
// shape and its consistency: the exit code follows the process runtime.
func TestDoctor(t *testing.T) {
	for _, asJSON := range []bool{true, false} {
		// The table goes to a terminal, the JSON to a pipe: progress is
		// shown on stderr in both, a rewritten line or a line per check.
		tty := !asJSON
		root := newRoot("test", env{getenv: func(string) string { return "" }, isTerminal: func(any) bool { return tty }})
		args := []string{"doctor", "--no-boot"}
		if asJSON {
			args = append(args, "--json")
		}
		var stdout, stderr bytes.Buffer
		root.SetArgs(args)
		root.SetOut(&stdout)
		root.SetErr(&stderr)
		code := Execute(t.Context(), root)
		if !asJSON {
			if e := stderr.String(); !strings.HasPrefix(e, "\r\033[Kdoctor: checking") || !strings.Contains(e, "\r\033[Kdoctor: userns ") ||
				!strings.Contains(e, "doctor: checking runtime gvisor…") || !strings.HasSuffix(e, "\r\033[K") || strings.Contains(e, "\n") && code == 0 {
				t.Errorf("terminal progress %q", e)
			}
			for _, s := range []string{"MECHANISM", "userns", "seccomp", "cgroup", "RUNTIME", "process", "gvisor", "microvm", "PRESET", "strict"} {
				if !strings.Contains(stdout.String(), s) {
					t.Errorf("table lacks %q:\n%s", s, stdout.String())
				}
			}
			continue
		}
		var rep doctorReport
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatalf("doctor --json: %v\n%s%s", err, stdout.String(), stderr.String())
		}
		// A pipe gets a line per check, in the report's order, and the
		// JSON on stdout has the shape it had without progress.
		lines := strings.Split(stderr.String(), "\n")
		i := 0
		for _, m := range rep.Mechanisms {
			if m.Name == "root" {
				continue // the process runtime's row, reported as the runtime
			}
			want := "doctor: " + m.Name + " missing"
			if m.OK {
				want = "doctor: " + m.Name + " ok"
			}
			for i < len(lines) && lines[i] != want {
				i++
			}
			if i == len(lines) {
				t.Errorf("progress lacks %q in order:\n%s", want, stderr.String())
				break
			}
		}
		for _, w := range []string{"doctor: checking runsc (a gVisor smoke test)…", "doctor: checking runtime process…", "doctor: runtime process "} {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("progress lacks %q:\n%s", w, stderr.String())
			}
		}
		var shape map[string]json.RawMessage
		if err := json.Unmarshal(stdout.Bytes(), &shape); err != nil || len(shape) != 4 || (shape["providers"] == nil) == (shape["providers_note"] == nil) || shape["mechanisms"] == nil || shape["runtimes"] == nil || shape["presets"] == nil {
			t.Errorf("doctor --json shape changed: %v %s", err, stdout.String())
		}
		var processOK bool
		for _, r := range rep.Runtimes {
			if r.Runtime == "process" {
				processOK = r.Available
			}
			if r.Runtime == "microvm" && r.Available {
				t.Errorf("microvm available with --no-boot: %+v", r)
			}
		}
		if (code == 0) != processOK {
			t.Errorf("exit code %d with the process runtime available=%v; stderr %q", code, processOK, stderr.String())
		}
		if len(rep.Mechanisms) < 10 || len(rep.Presets) == 0 {
			t.Errorf("report too small: %+v", rep)
		}
		for _, p := range rep.Presets {
			if p.OK != (len(p.Missing) == 0) {
				t.Errorf("preset %+v: ok disagrees with missing", p)
			}
		}
		if os.Geteuid() == 0 && !processOK {
			t.Logf("process runtime unavailable as root: %s", stderr.String())
		}
	}
}

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
		root := newRoot("test", env{getenv: func(string) string { return "" }, isTerminal: func(any) bool { return false }})
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

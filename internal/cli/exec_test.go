package cli

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/execution"
	"github.com/agentbox/agentbox/internal/execution/exectest"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
)

// TestExecReportsLoweredLimits: a limit the request asks for and does not
// get (the global policy's is lower, or the policy's timeout is shorter
// than --timeout) is said on stderr and in the JSON result, never lowered
// silently; a request that gets what it asked has nothing reported.
func TestExecReportsLoweredLimits(t *testing.T) {
	global, err := policy.Parse("global.yaml", []byte("version: 1\nresources:\n  memory: 1Gi\n  timeout: 10s\n"))
	if err != nil {
		t.Fatal(err)
	}
	h := newExecHarnessUnder(t, global)
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, []byte("version: 1\nresources:\n  memory: 64Gi\n  pids: 50\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := h.run(t.Context(), nil, "exec", "--policy", big, "--timeout", "1m", "--", "echo", "ok")
	r.check(t, 0, []string{"ok\n"}, []string{
		"agentbox: resources.memory: asked 64Gi, applied 1Gi (lowered by the global policy)\n",
		"agentbox: timeout_ms: asked 60000, applied 10000 (lowered by the policy (resources.timeout))\n",
	})
	if strings.Contains(r.stderr, "pids") {
		t.Errorf("a limit applied as asked was reported: %q", r.stderr)
	}
	r = h.run(t.Context(), nil, "--json", "exec", "--policy", big, "--", "echo", "ok")
	var res client.ExecResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("%v: %q", err, r.stdout)
	}
	if want := []client.LimitAdjustment{{Field: "resources.memory", Requested: "64Gi", Applied: "1Gi", By: "global policy"}}; !slices.Equal(res.Adjusted, want) {
		t.Errorf("adjusted %+v, want %+v", res.Adjusted, want)
	}
	// A process says the same at its start, and after.
	c, err := client.New(h.env[EnvURL])
	if err != nil {
		t.Fatal(err)
	}
	text, _ := os.ReadFile(big)
	p, err := c.StartProcess(t.Context(), client.StartProcess{Argv: []string{"true"}, PolicySource: &client.PolicySource{Name: "big.yaml", Text: string(text)}, TimeoutMS: 60000})
	if err != nil {
		t.Fatal(err)
	}
	wantP := []client.LimitAdjustment{{Field: "resources.memory", Requested: "64Gi", Applied: "1Gi", By: "global policy"},
		{Field: "timeout_ms", Requested: "60000", Applied: "10000", By: "policy (resources.timeout)"}}
	if !slices.Equal(p.Adjusted, wantP) {
		t.Errorf("process adjusted %+v, want %+v", p.Adjusted, wantP)
	}
	if p, err = c.Wait(t.Context(), p.ID); err != nil || !slices.Equal(p.Adjusted, wantP) {
		t.Errorf("ended process: %v, adjusted %+v", err, p.Adjusted)
	}
	// A preset's limits are asked for too: exec-default's 30s timeout
	// comes out at the global 10s.
	r = h.run(t.Context(), nil, "exec", "--", "echo", "ok")
	r.check(t, 0, []string{"ok\n"}, []string{"agentbox: resources.timeout: asked 30s, applied 10s (lowered by the global policy)\n"})
	// Asked for less than the bounds: nothing to say.
	small := filepath.Join(t.TempDir(), "small.yaml")
	if err := os.WriteFile(small, []byte("version: 1\nresources:\n  memory: 512Mi\n  timeout: 5s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = h.run(t.Context(), nil, "exec", "--policy", small, "--timeout", "2s", "--", "echo", "ok")
	r.check(t, 0, []string{"ok\n"}, nil)
	if strings.Contains(r.stderr, "asked") {
		t.Errorf("nothing was lowered, yet: %q", r.stderr)
	}
}

// newExecHarness runs the CLI against the real API handler and execution
// service, with the real policy presets; the runtime named "process" is
// the host double, so these tests are about the CLI, not isolation.
func newExecHarness(t *testing.T) *harness {
	t.Helper()
	return newExecHarnessUnder(t, nil)
}

// newExecHarnessUnder is newExecHarness under the operator's global
// policy global (nil: none).
func newExecHarnessUnder(t *testing.T, global *policy.Policy) *harness {
	t.Helper()
	reg := sandbox.NewRegistry()
	reg.Register(&exectest.Runtime{Key: "process"})
	eg, err := egress.New(egress.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := execution.New(execution.Options{Runtimes: reg, Resolve: execution.PolicyResolver(global), WorkDir: t.TempDir(),
		Network: egress.Tasks{Server: eg}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Exec: svc}, nil, nil, nil))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = svc.Close(ctx)
		srv.Close()
	})
	return &harness{t: t, env: map[string]string{EnvURL: srv.URL}, signals: make(chan chan<- os.Signal, 1)}
}

func TestExecCommand(t *testing.T) {
	h := newExecHarness(t)
	dir := t.TempDir()
	local := filepath.Join(dir, "local.txt")
	if err := os.WriteFile(local, []byte("file content"), 0o644); err != nil {
		t.Fatal(err)
	}
	badPolicy := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badPolicy, []byte("version: 1\nresources:\n  memory: lots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		stdin  string
		args   []string
		code   int
		stdout string
		stderr []string
	}{
		{"command", "", []string{"exec", "--", "sh", "-c", "echo out; echo err >&2; exit 3"}, 3, "out\n", []string{"err\n"}},
		{"code", "", []string{"exec", "--lang", "python", "--code", "print(6*7)"}, 0, "42\n", nil},
		{"code from stdin", "echo from-stdin", []string{"exec", "--lang", "bash"}, 0, "from-stdin\n", nil},
		{"stdin to the command", "piped", []string{"exec", "--", "cat"}, 0, "piped", nil},
		{"file", "", []string{"exec", "--file", "sub/x.txt=" + local, "--", "cat", "sub/x.txt"}, 0, "file content", nil},
		{"preset", "", []string{"exec", "--policy", "strict", "--", "echo", "ok"}, 0, "ok\n", nil},
		{"timeout", "", []string{"exec", "--timeout", "300ms", "--", "sleep", "30"}, ExitTimeout, "", []string{"timeout"}},
		{"signal", "", []string{"exec", "--", "sh", "-c", "kill -9 $$"}, 137, "", nil},
		{"bad policy file", "", []string{"exec", "--policy", badPolicy, "--", "true"}, 1, "", []string{"bad.yaml:3", "resources.memory"}},
		{"unknown preset", "", []string{"exec", "--policy", "nope", "--", "true"}, 1, "", []string{`unknown policy preset "nope"`}},
		{"missing policy file", "", []string{"exec", "--policy", "./nope.yaml", "--", "true"}, 1, "", []string{"no such file"}},
		{"no command", "", []string{"exec"}, ExitUsage, "", []string{"give a command"}},
		{"both", "", []string{"exec", "--lang", "bash", "--", "true"}, ExitUsage, "", []string{"not both"}},
		{"language", "", []string{"exec", "--lang", "cobol", "--code", "x"}, ExitUsage, "", []string{"want one of"}},
		{"code without lang", "", []string{"exec", "--code", "x", "--", "true"}, ExitUsage, "", []string{"--code needs --lang"}},
		{"bad file flag", "", []string{"exec", "--file", "x", "--", "true"}, ExitUsage, "", []string{"PATH=LOCAL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.run(t.Context(), strings.NewReader(tt.stdin), tt.args...)
			if r.code != tt.code || r.stdout != tt.stdout {
				t.Fatalf("exit %d stdout %q stderr %q; want %d %q", r.code, r.stdout, r.stderr, tt.code, tt.stdout)
			}
			for _, s := range tt.stderr {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr %q lacks %q", r.stderr, s)
				}
			}
		})
	}
}

func TestExecCommandJSON(t *testing.T) {
	h := newExecHarness(t)
	r := h.run(t.Context(), nil, "--json", "exec", "--", "sh", "-c", "echo hi; exit 5")
	if r.code != 5 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	var res client.ExecResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("%v: %q", err, r.stdout)
	}
	if res.Stdout != "hi\n" || res.ExitCode != 5 || res.Sandbox.Runtime != "process" {
		t.Fatalf("result = %+v", res)
	}
}

// TestExecTerminal checks that a command's output reaches a terminal inert
// and a pipe byte for byte.
func TestExecTerminal(t *testing.T) {
	h := newExecHarness(t)
	const script = `printf 'a\033]52;c;aGk=\007b\302\233c\n'; printf 'e\033[2Kf\n' >&2`
	h.terminal = false
	r := h.run(t.Context(), nil, "exec", "--", "sh", "-c", script)
	if r.code != 0 || r.stdout != "a\x1b]52;c;aGk=\x07b\u009bc\n" || r.stderr != "e\x1b[2Kf\n" {
		t.Fatalf("to a pipe: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	h.terminal = true
	r = h.run(t.Context(), nil, "exec", "--", "sh", "-c", script)
	if r.code != 0 || r.stdout != `a\x1b]52;c;aGk=\x07b\u009bc`+"\n" || r.stderr != `e\x1b[2Kf`+"\n" {
		t.Fatalf("to a terminal: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	r = h.run(t.Context(), nil, "--json", "exec", "--", "sh", "-c", script)
	checkInert(t, "exec --json on a terminal", r.stdout)
	var res client.ExecResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Stdout != "a\x1b]52;c;aGk=\x07b\u009bc\n" {
		t.Fatalf("exec --json on a terminal: %v %+v", err, res)
	}
}

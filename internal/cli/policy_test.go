package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox/policy"
	"github.com/agentbox/agentbox/internal/stacktest"
)

func writePolicy(t *testing.T, name, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// policyHarness runs policy commands with no daemon reachable: they must
// not need one.
func policyHarness(t *testing.T) *harness {
	h := newHarness(t, stacktest.Options{})
	h.env[EnvURL] = "http://127.0.0.1:1"
	return h
}

func TestPolicyCheck(t *testing.T) {
	t.Parallel()
	h := policyHarness(t)
	good := writePolicy(t, "good.yaml", "version: 1\nresources: {memory: 1Gi}\n")
	goodJSON := writePolicy(t, "good.json", `{"version": 1, "isolation": "gvisor"}`)
	bad := writePolicy(t, "bad.yaml", "version: 1\nresources:\n  memroy: 1Gi\nisolation: docker\n")

	r := h.run(t.Context(), nil, "policy", "check", good, goodJSON)
	r.check(t, 0, []string{good + ": ok\n", goodJSON + ": ok\n"}, nil)
	if r.stderr != "" {
		t.Errorf("stderr: %q", r.stderr)
	}

	r = h.run(t.Context(), nil, "policy", "check", good, bad)
	r.check(t, 1, []string{good + ": ok\n"}, []string{
		bad + ":3:3: resources.memroy: unknown field (known: memory, cpus, pids, timeout, disk, output, files)\n",
		bad + ":4:12: isolation: value must be one of 'process', 'gvisor', 'microvm'\n",
		"agentbox: policy check: 1 of 2 files invalid\n",
	})
	if strings.Contains(r.stdout, bad) {
		t.Errorf("invalid file reported as ok: %q", r.stdout)
	}

	r = h.run(t.Context(), nil, "policy", "check", filepath.Join(t.TempDir(), "missing.yaml"))
	r.check(t, 1, nil, []string{"read policy: open ", "no such file or directory"})

	r = h.run(t.Context(), strings.NewReader("version: 1\nbogus: true\n"), "policy", "check", "-")
	r.check(t, 1, nil, []string{"<stdin>:2:1: bogus: unknown field"})

	r = h.run(t.Context(), nil, "policy", "check")
	r.check(t, ExitUsage, nil, []string{"requires at least 1 arg"})
}

func TestPolicyCheckJSON(t *testing.T) {
	t.Parallel()
	h := policyHarness(t)
	good := writePolicy(t, "good.yaml", "version: 1\n")
	bad := writePolicy(t, "bad.yaml", "version: 1\nresources: {timeout: soon}\n")
	r := h.run(t.Context(), nil, "--json", "policy", "check", good, bad)
	if r.code != 1 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	var got []checkResult
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, r.stdout)
	}
	want := []checkResult{
		{File: good, OK: true},
		{File: bad, OK: false, Errors: []checkResultError{{Line: 2, Column: 22, Field: "resources.timeout", Message: `"soon" is not a duration: use e.g. 500ms, 30s, 10m, 1h30m`}}},
	}
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("got  %s\nwant %s", gotJSON, wantJSON)
	}
}

func TestPolicyShow(t *testing.T) {
	t.Parallel()
	h := policyHarness(t)

	r := h.run(t.Context(), nil, "policy", "show", "--preset", "strict")
	r.check(t, 0, []string{"version: 1\n", "memory: 256Mi\n", "timeout: 10s\n", "workspace: ro\n", "profile: strict\n"}, nil)
	if strings.Contains(r.stdout, "CLAUDE.md") {
		t.Errorf("without --effective the built-in protected list is not shown:\n%s", r.stdout)
	}
	// What show prints is itself a valid policy equal to the preset.
	printed, err := policy.Parse("printed.yaml", []byte(r.stdout))
	if err != nil {
		t.Fatalf("show printed an invalid policy: %v\n%s", err, r.stdout)
	}
	preset, _ := policy.Preset("strict")
	if printed.Hash() != preset.Hash() {
		t.Errorf("printed policy differs from the preset:\n%s", r.stdout)
	}

	r = h.run(t.Context(), nil, "policy", "show", "--preset", "exec-default", "--effective")
	r.check(t, 0, []string{"isolation: process\n", "mode: proxy\n", `- "**/CLAUDE.md"`, `- "**/.git/hooks/**"`}, nil)

	global := writePolicy(t, "global.yaml", "version: 1\nisolation: gvisor\nresources: {memory: 128Mi, timeout: 5s}\nenv: {pass: [TERM]}\n")
	r = h.run(t.Context(), nil, "policy", "show", "--preset", "exec-default", "--effective", "--global", global)
	r.check(t, 0, []string{"isolation: gvisor\n", "memory: 128Mi\n", "timeout: 5s\n", "pids: 256\n"}, nil)

	r = h.run(t.Context(), nil, "--json", "policy", "show", "--preset", "exec-default", "--effective", "--global", global)
	var p policy.Policy
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || p.Isolation() != "gvisor" || p.Resources.Memory != 128<<20 {
		t.Errorf("--json show: %v %+v\n%s", err, p, r.stdout)
	}

	// A request beyond the global policy is refused, naming the rule.
	r = h.run(t.Context(), nil, "policy", "show", "--preset", "agent-default", "--effective", "--global", global)
	r.check(t, 1, nil, []string{
		"filesystem.read_outside_workspace: not permitted by the global policy",
		"env.pass[1]: COLORTERM may not be passed: the global policy does not list it (global env.pass: [TERM])",
	})

	file := writePolicy(t, "mine.yaml", "version: 1\nresources: {pids: 9}\n")
	r = h.run(t.Context(), nil, "policy", "show", file)
	r.check(t, 0, []string{"version: 1\nresources:\n  pids: 9\n"}, nil)

	for _, args := range [][]string{
		{"policy", "show"},
		{"policy", "show", file, "--preset", "strict"},
		{"policy", "show", file, "--global", global},
	} {
		r = h.run(t.Context(), nil, args...)
		if r.code != ExitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, r.code, ExitUsage, r.stderr)
		}
	}
	r = h.run(t.Context(), nil, "policy", "show", "--preset", "lax")
	r.check(t, 1, nil, []string{`unknown policy preset "lax" (known: agent-default, exec-default, strict)`})
}

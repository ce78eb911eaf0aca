package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/acp"
	"github.com/agentbox/agentbox/internal/agent/amp"
	"github.com/agentbox/agentbox/internal/agent/install"
	"github.com/agentbox/agentbox/internal/agent/install/installtest"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/stacktest"
)

// fakeNpmEnv puts the fake npm first on PATH, the agent cache in a temp dir
// and makes the fake install a claude that prints its pinned version. It
// returns the cache dir and the fake npm's log. (Process environment: these
// tests cannot run in parallel.)
func fakeNpmEnv(t *testing.T) (cache, log string) {
	cache, log = t.TempDir(), filepath.Join(t.TempDir(), "npm.log")
	t.Setenv("PATH", installtest.FakeNPM(t)+string(filepath.ListSeparator)+os.Getenv("PATH"))
	t.Setenv(install.EnvCacheDir, cache)
	t.Setenv(installtest.EnvLog, log)
	t.Setenv(installtest.EnvBin, "node_modules/.bin/claude")
	t.Setenv(installtest.EnvPrints, "2.1.332 (Claude Code)")
	return cache, log
}

func npmRuns(t *testing.T, log string) int {
	b, err := os.ReadFile(log)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

func TestAgentsInstall(t *testing.T) {
	cache, log := fakeNpmEnv(t)
	h := newHarness(t, stacktest.Options{})
	h.env[EnvURL] = "http://127.0.0.1:1" // no daemon is needed
	bin := filepath.Join(cache, "agents", "claude@2.1.332", "node_modules", ".bin", "claude")

	r := h.run(t.Context(), nil, "agents", "install", "claude")
	r.check(t, 0, []string{"claude  2.1.332  " + bin + "\n"}, []string{
		"agentbox: installing claude (@anthropic-ai/claude-code@2.1.332) into " + filepath.Dir(filepath.Dir(filepath.Dir(bin))) + "\n",
		"agentbox:   npm: added 1 package in 0s\n",
		"agentbox: installed claude 2.1.332 in ",
	})
	if npmRuns(t, log) != 1 {
		t.Fatalf("npm ran %d times", npmRuns(t, log))
	}

	// Cached: no npm, nothing on stderr; a name given twice counts once.
	r = h.run(t.Context(), nil, "agents", "install", "claude", "claude")
	r.check(t, 0, []string{"claude  2.1.332  " + bin + "\n"}, nil)
	if r.stderr != "" || npmRuns(t, log) != 1 || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("cached install: stderr %q, stdout %q, npm runs %d", r.stderr, r.stdout, npmRuns(t, log))
	}

	r = h.run(t.Context(), nil, "--json", "agents", "install", "--force", "claude")
	var out struct {
		Installed []install.Installed
		Failed    []string
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 0 || len(out.Installed) != 1 || out.Installed[0].Binary != bin || len(out.Failed) != 0 {
		t.Errorf("--json --force: %q %v", r.stdout, err)
	}
	if npmRuns(t, log) != 2 {
		t.Errorf("--force: npm ran %d times", npmRuns(t, log))
	}

	// One agent fails (the fake npm makes no codex binary), the others go on.
	r = h.run(t.Context(), nil, "agents", "install", "codex", "claude")
	r.check(t, 1, []string{"claude  2.1.332  " + bin + "\n"}, []string{
		"agentbox: codex: installed agent binary does not run: npm installed @openai/codex@0.171.0 but none of",
		"agentbox: could not install codex (see above)",
	})
}

func TestAgentsInstallUsage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, stacktest.Options{})
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"agents", "install"}, "name the agents to install, or --all"},
		{[]string{"agents", "install", "--all", "claude"}, "give agent names or --all, not both"},
		{[]string{"agents", "install", "claude", "nope"}, `unknown agent "nope" (known: claude, codex, opencode, gemini, pi, claude-code-acp, codex-acp)`},
		{[]string{"agents", "install", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"agents", "bogus"}, `unknown command "bogus"`},
	} {
		r := h.run(t.Context(), nil, tc.args...)
		if tc.args[1] == "bogus" {
			r.check(t, 1, nil, []string{tc.says})
			continue
		}
		r.check(t, ExitUsage, nil, []string{tc.says})
	}
	r := h.run(t.Context(), nil, "agents", "install", "--help")
	r.check(t, 0, []string{"--all", "--force", "Agents: claude, codex,"}, nil)
	// Amp is listed (unavailable, with its reason), so install says why
	// it cannot be installed rather than calling it unknown.
	r = h.run(t.Context(), nil, "agents", "install", "claude", "amp")
	r.check(t, 1, nil, []string{"amp cannot be installed: not supported: Amp's agent loop runs on Amp's servers"})
	if strings.Contains(r.stderr, "unknown agent") {
		t.Errorf("amp called unknown: %q", r.stderr)
	}
}

func TestAgentsInstallCtrlC(t *testing.T) {
	cache, _ := fakeNpmEnv(t)
	t.Setenv(installtest.EnvSleep, "30")
	h := newHarness(t, stacktest.Options{})
	done := make(chan result, 1)
	go func() { done <- h.run(t.Context(), nil, "agents", "install", "claude") }()
	sig := <-h.signals
	// Let npm start, then Ctrl-C.
	waitFor(t, "the staging dir", func() bool {
		m, _ := filepath.Glob(filepath.Join(cache, "agents", ".staging-claude@*"))
		return len(m) == 1
	})
	sig <- os.Interrupt
	select {
	case r := <-done:
		r.check(t, ExitInterrupted, nil, []string{"context canceled"})
	case <-time.After(10 * time.Second):
		t.Fatal("install did not stop on Ctrl-C")
	}
	// Only the lock file stays.
	if des, _ := os.ReadDir(filepath.Join(cache, "agents")); len(des) != 1 || des[0].Name() != ".claude@2.1.332.lock" {
		t.Errorf("left behind: %v", des)
	}
}

// TestAgentsTableWidth: the agents table fits 100 columns whatever the
// daemon says: a long name and title are cut, a long reason wraps under
// its row (testdata/agents_width100.golden).
func TestAgentsTableWidth(t *testing.T) {
	t.Parallel()
	reg := agent.NewRegistry()
	reg.Register(mock.Name, mock.New())
	reg.Register(amp.Name, amp.New())
	custom, err := acp.FromConfig(acp.Custom{
		Name:    "my-own-acp-agent-with-a-rather-long-name",
		Title:   "An ACP agent of our own, with a title far longer than any column of a table should be",
		Command: "/nonexistent/opt/our-agents/bin/an-acp-agent-binary-with-a-very-long-name-that-cannot-be-broken-at-a-space",
	}, t.TempDir(), acp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg.Register("my-own-acp-agent-with-a-rather-long-name", custom)
	h := newHarness(t, stacktest.Options{Agents: reg})
	r := h.run(t.Context(), nil, "agents")
	if r.code != 0 {
		t.Fatalf("agents: %d %q", r.code, r.stderr)
	}
	for _, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		if n := utf8.RuneCountInString(l); n > 100 {
			t.Errorf("%d columns: %q", n, l)
		}
	}
	// Nothing of the reason is lost to the wrapping.
	var words []string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "    ") {
			words = append(words, strings.Fields(l)...)
		}
	}
	if got := strings.Join(words, " "); !strings.Contains(got, strings.Join(strings.Fields(amp.Reason), " ")) {
		t.Errorf("amp's reason lost in the wrapping: %q", got)
	}
	golden(t, "agents_width100.golden", []byte(r.stdout))
}

func TestWrapAndFit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		want []string
	}{
		{"", 10, nil},
		{"a b c", 10, []string{"a b c"}},
		{"aaaa bbbb cccc", 9, []string{"aaaa bbbb", "cccc"}},
		{"abcdefghijkl xy", 5, []string{"abcde", "fghij", "kl xy"}},
		{"  spaced   out  ", 20, []string{"spaced out"}},
		{"ééé ééé", 3, []string{"ééé", "ééé"}},
	} {
		if got := wrap(tc.in, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("wrap(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{{"abc", 3, "abc"}, {"abcd", 3, "ab…"}, {"ééééé", 4, "ééé…"}, {"x", 0, ""}} {
		if got := fit(tc.in, tc.n); got != tc.want {
			t.Errorf("fit(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

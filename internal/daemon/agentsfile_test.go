package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/acp"
	"github.com/agentbox/agentbox/internal/agent/mock"
)

func TestAgentsFile(t *testing.T) {
	tests := []struct {
		name, src, wantErr string
		want               []string
	}{
		{name: "two agents", src: "acp:\n  - name: a\n    command: /bin/true\n  - name: b\n    command: sh\n    args: [-c, x]\n    env: {K: V}\n", want: []string{"a", "b", "mock"}},
		{name: "empty", src: "", want: []string{"mock"}},
		{name: "missing command", src: "acp:\n  - name: a\n", wantErr: "acp[0]: name and command are required"},
		{name: "unknown field", src: "acp:\n  - name: a\n    command: x\n    cmd: y\n", wantErr: "cmd"},
		{name: "taken name", src: "acp:\n  - name: mock\n    command: /bin/true\n", wantErr: `agent "mock" is already defined`},
		{name: "name not plain", src: "acp:\n  - name: ../x\n    command: /bin/true\n", wantErr: "not a plain name"},
		{name: "twice", src: "acp:\n  - name: a\n    command: x\n  - name: a\n    command: y\n", wantErr: `agent "a" is already defined`},
		{name: "nesting bomb", src: "acp: " + strings.Repeat("[{a: ", 50_000), wantErr: "agents.yaml:1:162: collections are nested more than 64 levels deep"},
		{name: "a credential in env", src: "acp:\n  - name: a\n    command: x\n    env: {MY_LLM_TOKEN: abc, GITHUB: ghp_0123456789abcdefghijklmnopqrstuvwxyz01}\n",
			wantErr: "acp[0] (a): env GITHUB (its value looks like a GitHub token (gh?_…)), MY_LLM_TOKEN (its name holds TOKEN): a credential here would enter"},
		{name: "a routed model key", src: "acp:\n  - name: a\n    command: x\n    env: {ANTHROPIC_API_KEY: sk-ant-x, OPENAI_API_KEY: sk-y}\n", want: []string{"a", "mock"}},
		{name: "block staircase", src: staircase(100), wantErr: "agents.yaml:65:65: collections are nested more than 64 levels deep"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agents.yaml")
			if err := os.WriteFile(path, []byte(tc.src), 0o600); err != nil {
				t.Fatal(err)
			}
			r := agent.NewRegistry()
			r.Register("mock", mock.New())
			custom, err := loadAgentsFile(path)
			if err == nil {
				err = registerCustom(r, custom, t.TempDir())
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(r.Names(), ","); got != strings.Join(tc.want, ",") {
				t.Fatalf("agents %s, want %v", got, tc.want)
			}
		})
	}
}

// staircase is a mapping n levels deep, one more space each.
func staircase(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(strings.Repeat(" ", i) + "a:\n")
	}
	return b.String()
}

// TestAgentsFileHomesUnderDataDir: an agent of the agents file keeps its
// sessions' homes under the daemon's data dir, as the built-in agents do,
// never in a directory of the shared temp dir that another local user
// could have made first.
func TestAgentsFileHomesUnderDataDir(t *testing.T) {
	dataDir := t.TempDir()
	file := writeFile(t, "agents.yaml", "acp:\n  - name: mine\n    command: /bin/true\n")
	reg := agent.NewRegistry()
	reg.Register("mock", mock.New())
	d, err := New(t.Context(), Config{Listen: "127.0.0.1:0", DataDir: dataDir, AgentsFile: file, Agents: reg,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Shutdown(context.Background()) })
	a, err := reg.Get("mine")
	if err != nil {
		t.Fatal(err)
	}
	_, write := a.(agent.SandboxNeeder).SandboxPaths(agent.Config{SessionID: "ses_1"})
	want := filepath.Join(dataDir, "agents", "mine", "sessions", "ses_1")
	if len(write) != 1 || write[0] != want {
		t.Errorf("the session's home: %v, want %s", write, want)
	}
}

// TestEveryAgentHomeIsRemoved runs over every agent the daemon registers
// (the built-in ones and one of the agents file): each that hands out
// write paths for a sandboxed session keeps them under the data dir and
// removes them when asked, whatever the agent left in them (a symbolic
// link where the adapter writes its settings, a read-only directory),
// without touching another session's; removing the state of a session
// that has none makes nothing.
func TestEveryAgentHomeIsRemoved(t *testing.T) {
	dataDir, outside := t.TempDir(), t.TempDir()
	fresh := func(dataDir string) *agent.Registry {
		r := Agents(dataDir, func(string) string { return "" }, nil)
		if err := registerCustom(r, []acp.Custom{{Name: "mine", Command: "/bin/true"}}, dataDir); err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := fresh(dataDir)
	needers := 0
	for _, name := range r.Names() {
		a, _ := r.Get(name)
		n, ok := a.(agent.SandboxNeeder)
		if !ok {
			continue
		}
		needers++
		t.Run(name, func(t *testing.T) {
			_, write := n.SandboxPaths(agent.Config{SessionID: "ses_purged", Cwd: t.TempDir()})
			_, kept := n.SandboxPaths(agent.Config{SessionID: "ses_kept", Cwd: t.TempDir()})
			if len(write) == 0 {
				t.Skip("no write paths")
			}
			for _, p := range append(append([]string(nil), write...), kept...) {
				if rel, err := filepath.Rel(dataDir, p); err != nil || !filepath.IsLocal(rel) {
					t.Errorf("write path %s is not under the data dir %s", p, dataDir)
				}
			}
			for _, p := range write {
				for _, name := range []string{".gemini", ".claude", "config.toml", "opencode.json"} {
					_ = os.RemoveAll(filepath.Join(p, name))
					if err := os.Symlink(outside, filepath.Join(p, name)); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.MkdirAll(filepath.Join(p, "ro", "sub"), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(filepath.Join(p, "ro"), 0o500); err != nil {
					t.Fatal(err)
				}
			}
			if err := n.RemoveState("ses_purged"); err != nil {
				t.Errorf("RemoveState: %v", err)
			}
			for _, p := range write {
				if _, err := os.Lstat(p); !os.IsNotExist(err) {
					t.Errorf("%s is still there after RemoveState (%v)", p, err)
				}
			}
			for _, p := range kept {
				if _, err := os.Stat(p); err != nil {
					t.Errorf("another session's %s: %v", p, err)
				}
			}
		})
	}
	if needers < 3 {
		t.Errorf("only %d agents hand out sandbox paths", needers)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("an adapter wrote through a symlink of the agent's: %v", entries)
	}
	// A fresh daemon purging a session of a previous run: nothing made.
	empty := t.TempDir()
	r = fresh(empty)
	for _, name := range r.Names() {
		a, _ := r.Get(name)
		if n, ok := a.(agent.SandboxNeeder); ok {
			if err := n.RemoveState("ses_gone"); err != nil {
				t.Errorf("%s: RemoveState of a session without a home: %v", name, err)
			}
		}
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("RemoveState made %v", entries)
	}
}

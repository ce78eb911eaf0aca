package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
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
		{name: "nesting bomb", src: "acp: " + strings.Repeat("[{a: ", 50_000), wantErr: "agents.yaml:1:166: collections are nested more than 64 levels deep"},
		{name: "block staircase", src: staircase(100), wantErr: "agents.yaml:65:65: block collections are nested more than 64 levels deep"},
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

package daemon

import (
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
		{name: "twice", src: "acp:\n  - name: a\n    command: x\n  - name: a\n    command: y\n", wantErr: `agent "a" is already defined`},
		{name: "nesting bomb", src: "acp: " + strings.Repeat("[{a: ", 50_000), wantErr: "agents.yaml:1:166: collections are nested more than 64 levels deep"},
		{name: "a credential in env", src: "acp:\n  - name: a\n    command: x\n    env: {MY_LLM_TOKEN: abc, GITHUB: ghp_0123456789abcdefghijklmnopqrstuvwxyz01}\n",
			wantErr: "acp[0] (a): env GITHUB (its value looks like a GitHub token (gh?_…)), MY_LLM_TOKEN (its name holds TOKEN): a credential here would enter"},
		{name: "a routed model key", src: "acp:\n  - name: a\n    command: x\n    env: {ANTHROPIC_API_KEY: sk-ant-x, OPENAI_API_KEY: sk-y}\n", want: []string{"a", "mock"}},
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
				err = registerCustom(r, custom)
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

package main

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/cli"
)

// TestServeAgentModelsRefused: serve refuses an --agent-models value the
// daemon would not use (an agent without declared models, a model id that
// is more than a name) before it starts anything.
func TestServeAgentModelsRefused(t *testing.T) {
	for _, v := range []string{"claude=opus", "pi=--help", "pi"} {
		cmd := serveCommand()
		cmd.SetArgs([]string{"--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--agent-models", v})
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		if err := cmd.ExecuteContext(t.Context()); err == nil || !strings.Contains(err.Error(), "--agent-models") {
			t.Errorf("serve --agent-models %q: %v, want a refusal naming the flag", v, err)
		}
	}
}

// TestServeRefusesClientFlags: serve refuses a log format it does not
// know, --json together with another --log-format, and the client's --url,
// which names no address of the daemon's, instead of ignoring them.
func TestServeRefusesClientFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--log-format", "yaml"}, "--log-format"},
		{[]string{"--json", "--log-format", "text"}, "--json"},
		{[]string{"--url", "http://127.0.0.1:1"}, "--listen"},
	} {
		root := cli.NewRoot("test")
		root.AddCommand(serveCommand())
		root.SetArgs(append([]string{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...))
		var out strings.Builder
		root.SetOut(&out)
		root.SetErr(&out)
		if code := cli.Execute(t.Context(), root); code == 0 || !strings.Contains(out.String(), tc.want) {
			t.Errorf("serve %q: exit %d, %q; want a refusal naming %s", tc.args, code, out.String(), tc.want)
		}
	}
}

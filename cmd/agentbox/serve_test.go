package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"

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
		// The whole tree, and the one main builds for serve.
		for name, newRoot := range map[string]func(string) *cobra.Command{"NewRoot": cli.NewRoot, "NewDaemonRoot": cli.NewDaemonRoot} {
			t.Run(name, func(t *testing.T) { serveRefuses(t, newRoot("test"), tc.args, tc.want) })
		}
	}
}

// serveRefuses runs serve with args under root, and wants a refusal naming
// want.
func serveRefuses(t *testing.T, root *cobra.Command, args []string, want string) {
	t.Helper()
	root.AddCommand(serveCommand())
	root.SetArgs(append([]string{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, args...))
	var out strings.Builder
	root.SetOut(&out)
	root.SetErr(&out)
	if code := cli.Execute(t.Context(), root); code == 0 || !strings.Contains(out.String(), want) {
		t.Errorf("serve %q: exit %d, %q; want a refusal naming %s", args, code, out.String(), want)
	}
}

package main

import (
	"strings"
	"testing"
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

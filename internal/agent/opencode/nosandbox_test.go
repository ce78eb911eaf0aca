package opencode

import (
	"context"
	"errors"
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// someSandbox stands for a session's sandbox; Start must refuse before it
// would use it.
type someSandbox struct{ sandbox.Sandbox }

// TestRefusesSandbox: the agent runs as a server shared by sessions, so a
// sandboxed session is refused (fail closed) rather than run outside.
func TestRefusesSandbox(t *testing.T) {
	a := New(Options{})
	_, err := a.Start(context.Background(), agent.Config{SessionID: "ses_1", Cwd: t.TempDir(), Sandbox: someSandbox{}}, nil)
	if !errors.Is(err, agent.ErrNoSandbox) {
		t.Fatalf("Start with a sandbox: %v, want ErrNoSandbox", err)
	}
}

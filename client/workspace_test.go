package client_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/snapshot"
	"github.com/agentbox/agentbox/internal/stacktest"
)

// TestDiffAndSessionExec: Diff reads a session's changes since its start
// and per turn, with ids passed as they are; SessionExec reaches the
// session's route and its problems come back typed (the command in a
// sandbox itself is tested against the daemon, session_workspace_test.go).
func TestDiffAndSessionExec(t *testing.T) {
	s := newStack(t, stacktest.Options{Engine: func(c *engine.Config) {
		st, err := snapshot.New(t.TempDir(), snapshot.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		c.Snapshots = st
	}})
	c := s.Client
	sess, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", PermissionMode: client.PermissionBypass})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	tr, err := c.Send(ctx, sess.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindWrite, Path: "a.txt", Content: "x\n"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitTurn(ctx, sess.ID, tr.TurnID, 0, func(event.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for _, opts := range []client.DiffOptions{{}, {Turn: tr.TurnID}} {
		d, err := c.Diff(ctx, sess.ID, opts)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(d.Files, []client.DiffFile{{Path: "a.txt", Status: client.DiffAdded}}) || d.Diff != "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+x\n" || d.Truncated {
			t.Errorf("Diff(%+v) = %+v", opts, d)
		}
	}
	if _, err := c.Diff(ctx, sess.ID, client.DiffOptions{Turn: "turn_ffffffffffffffffffffffffffffffff"}); !client.IsNotFound(err) {
		t.Errorf("an unknown turn: %v, want not found", err)
	}
	if _, err := c.Diff(ctx, "ses_nope", client.DiffOptions{}); !client.IsNotFound(err) {
		t.Errorf("an unknown session: %v, want not found", err)
	}
	if _, err := c.Diff(ctx, "a/../b", client.DiffOptions{}); err == nil {
		t.Error("an id with a slash was sent")
	}
	_, err = c.SessionExec(ctx, sess.ID, client.SessionExecRequest{Argv: []string{"true"}})
	if !client.HasProblemType(err, client.ProblemNoSandbox) {
		t.Errorf("SessionExec in a session on the host: %v, want no-sandbox", err)
	}
}

package session_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/session"
	"github.com/agentbox/agentbox/internal/store"
)

// floodAsks is how many permissions the "flood" prompt asks for at once.
const floodAsks = 100

// TestPendingPermissionCap checks that a session never has more than the
// default number of pending permission requests: the agent's further
// asks are denied by the daemon at once, and the others stay answerable.
func TestPendingPermissionCap(t *testing.T) {
	m := newManager(t, openStore(t, t.TempDir()), time.Minute)
	ctx := t.Context()
	s, err := m.Create(ctx, session.CreateParams{Agent: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("flood")}); err != nil {
		t.Fatal(err)
	}
	// Every ask either waits for an answer or was denied at once.
	const limit = session.DefaultMaxPendingRequests
	var pending []store.Request
	var denied int
	for deadline := time.Now().Add(30 * time.Second); ; {
		pending, _ = m.Requests(ctx, s.ID, store.StatePending)
		evs, _ := m.Events(ctx, s.ID, 0, 10000)
		denied = countText(t, evs, "denied by the daemon")
		if len(pending)+denied >= floodAsks || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(pending) != limit || denied != floodAsks-limit {
		t.Fatalf("%d permission requests pending and %d denied by the daemon; want %d and %d", len(pending), denied, limit, floodAsks-limit)
	}
	for _, r := range pending {
		if _, err := m.AnswerPermission(ctx, s.ID, r.ID, agent.PermissionAnswer{Decision: event.DecisionAllow}); err != nil {
			t.Fatal(err)
		}
	}
	evs := waitFor(t, m, s.ID, 0, event.TypeTurnCompleted)
	if got, want := lastText(t, evs), fmt.Sprintf("daemon denied %d", floodAsks-limit); got != want {
		t.Fatalf("agent saw %q, want %q", got, want)
	}
	// The denials are reported, coalesced: the first at once, the rest
	// in a summary.
	var reports, total int
	for _, e := range evs {
		if e.Type == event.TypeSandboxViolation {
			p, _ := e.Decode()
			if v := p.(*event.SandboxViolation); v.Rule == "session.max_pending_requests" && v.Kind == event.ViolationResource {
				reports++
				total += max(v.Count, 1)
			}
		}
	}
	if reports != 2 || total != floodAsks-limit {
		t.Fatalf("%d reports of the cap counting %d; want 2 counting %d", reports, total, floodAsks-limit)
	}
}

// countText counts the completed items whose text is text.
func countText(t *testing.T, evs []event.Event, text string) int {
	t.Helper()
	n := 0
	for _, e := range evs {
		if e.Type == event.TypeItemCompleted {
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			if p.(*event.ItemCompleted).Item.Text() == text {
				n++
			}
		}
	}
	return n
}

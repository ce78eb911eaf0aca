package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/engine"
)

// floodAsks is how many permissions the "flood" prompt asks for at once.
const floodAsks = 100

// TestPendingPermissionCap checks that a session never has more than the
// default number of pending permission requests: the agent's further
// asks are denied by the daemon at once, and the others stay answerable.
func TestPendingPermissionCap(t *testing.T) {
	m := newManager(t, openStore(t, t.TempDir()), time.Minute)
	ctx := t.Context()
	s, err := m.Create(ctx, engine.CreateParams{Agent: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("flood")}); err != nil {
		t.Fatal(err)
	}
	// Every ask either waits for an answer or was denied at once.
	const limit = engine.DefaultMaxPendingRequests
	var pending []engine.Request
	var denied int
	for deadline := time.Now().Add(30 * time.Second); ; {
		pending, _ = m.Requests(ctx, s.ID, engine.StatePending)
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

// TestPendingCapQuestions checks that questions count against the same
// cap as permission requests: with both asked at once, exactly the cap's
// worth wait for an answer, the rest are refused at once (questions as
// cancelled) and reported, by kind.
func TestPendingCapQuestions(t *testing.T) {
	m := newManager(t, openStore(t, t.TempDir()), time.Minute)
	ctx := t.Context()
	s, err := m.Create(ctx, engine.CreateParams{Agent: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("flood-mixed")}); err != nil {
		t.Fatal(err)
	}
	const limit = engine.DefaultMaxPendingRequests
	// Wait until every ask has been admitted or refused: the refusals are
	// reported, coalesced, so count the admitted ones and the reports.
	var pending []engine.Request
	for deadline := time.Now().Add(30 * time.Second); ; {
		pending, _ = m.Requests(ctx, s.ID, engine.StatePending)
		if len(pending) >= limit || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(pending) != limit {
		t.Fatalf("%d requests pending, want %d", len(pending), limit)
	}
	var questions int
	for _, r := range pending {
		switch r.Kind {
		case engine.KindQuestion:
			questions++
			_, err = m.AnswerQuestion(ctx, s.ID, r.ID, agent.Answer{OptionID: "r"})
		default:
			_, err = m.AnswerPermission(ctx, s.ID, r.ID, agent.PermissionAnswer{Decision: event.DecisionAllow})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if questions == 0 || questions == limit {
		t.Fatalf("%d of the %d pending requests are questions: the test wants both kinds admitted", questions, limit)
	}
	evs := waitFor(t, m, s.ID, 0, event.TypeTurnCompleted)
	deniedPerms, deniedQuestions := floodAsks/2-(limit-questions), floodAsks/2-questions
	if got, want := lastText(t, evs), fmt.Sprintf("daemon denied %d permissions and %d questions", deniedPerms, deniedQuestions); got != want {
		t.Fatalf("agent saw %q, want %q", got, want)
	}
	// Every refusal is reported, under the kind it was.
	byTarget := map[string]int{}
	for _, e := range evs {
		if e.Type == event.TypeSandboxViolation {
			p, _ := e.Decode()
			if v := p.(*event.SandboxViolation); v.Rule == "session.max_pending_requests" {
				byTarget[v.Path] += max(v.Count, 1)
			}
		}
	}
	if byTarget["question"] != deniedQuestions || byTarget[string(event.PermCommand)] != deniedPerms {
		t.Fatalf("reported refusals %v; want %d questions and %d %s", byTarget, deniedQuestions, deniedPerms, event.PermCommand)
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

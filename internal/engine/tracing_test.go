package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/tracing"
	"github.com/agentbox/agentbox/internal/tracing/tracingtest"
)

// TestTraceSpans: a turn is a span, the child of the span of the context
// that started it; a permission wait (settled here by its timeout) is the
// turn's child; a tool call the agent leaves open is ended, failed, with
// its turn; a failed turn's span says so.
func TestTraceSpans(t *testing.T) {
	rcv := tracingtest.NewReceiver(t)
	tr, err := tracing.New(tracing.Config{Endpoint: rcv.URL + "/v1/traces"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := agent.NewRegistry()
	reg.Register("test", &testAgent{exit: make(chan struct{})})
	m := engine.New(engine.Config{Store: openStore(t, t.TempDir()), Agents: reg, WorkspaceDir: t.TempDir(),
		PermissionTimeout: 20 * time.Millisecond, Tracer: tr})
	ctx := t.Context()
	s, err := m.Create(ctx, engine.CreateParams{Agent: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var after int64
	for _, text := range []string{"perm", "half", "fail"} {
		// Each message as if from a request with its own span.
		rctx, req := tr.Start(ctx, "request "+text, tracing.KindServer)
		if _, err := m.Send(rctx, s.ID, []event.ContentPart{event.TextPart(text)}); err != nil {
			t.Fatal(err)
		}
		req.End()
		evs := waitFor(t, m, s.ID, after, event.TypeTurnCompleted)
		after = evs[len(evs)-1].Seq
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if err := tr.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Spans()
	turns := tracingtest.Named(spans, "agentbox.turn")
	if len(turns) != 3 {
		t.Fatalf("%d turn spans in %q", len(turns), tracingtest.Names(spans))
	}
	parentOf := func(s tracingtest.Span) string {
		p, _ := tracingtest.ParentOf(spans, s)
		return p.Name
	}
	byRequest := map[string]tracingtest.Span{}
	for _, turn := range turns {
		byRequest[parentOf(turn)] = turn
	}
	perm := tracingtest.Named(spans, "agentbox.permission.wait")
	if len(perm) != 1 || parentOf(perm[0]) != "agentbox.turn" ||
		perm[0].Attr("agentbox.permission.decided_by") != "timeout" || perm[0].Attr("agentbox.permission.decision") != "deny" {
		t.Errorf("permission spans %+v", perm)
	} else if p, _ := tracingtest.ParentOf(spans, perm[0]); p.SpanId == nil || string(p.SpanId) != string(byRequest["request perm"].SpanId) {
		t.Errorf("the permission wait is not the child of its turn")
	}
	tool := tracingtest.Named(spans, "agentbox.tool_call")
	if len(tool) != 1 || string(tool[0].ParentSpanId) != string(byRequest["request half"].SpanId) ||
		tool[0].Status.GetCode() != 2 || tool[0].Attr("agentbox.item.kind") != "command" {
		t.Errorf("tool spans %+v", tool)
	}
	if f := byRequest["request fail"]; f.Status.GetCode() != 2 || f.Attr("agentbox.turn.stop_reason") != "error" || f.Status.GetMessage() != "boom" {
		t.Errorf("failed turn: status %v stop %q", f.Status, f.Attr("agentbox.turn.stop_reason"))
	}
	if ok := byRequest["request perm"]; ok.Status != nil || ok.Attr("agentbox.turn.stop_reason") != "end_turn" || ok.Attr("agentbox.session.id") != s.ID {
		t.Errorf("turn: status %v attrs %v", ok.Status, ok.Attributes)
	}
}

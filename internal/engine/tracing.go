package engine

import (
	"context"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/tracing"
)

// The engine's trace spans (Config.Tracer; all of this is a nil check when
// tracing is off): a turn is a span, the child of the request that
// started it although it runs detached from it; each tool call of the
// agent (an item other than a message, reasoning or plan, from its
// item.started to its item.completed) and each permission wait is a child
// of the turn's span.

// turnTrace is a live session's spans of the turn that runs, under l.mu.
type turnTrace struct {
	span  *tracing.Span
	tools map[string]*tracing.Span // by item id
}

// startTurnSpan starts the span of turn turnID, the child of the span in
// ctx (the request's).
func (l *live) startTurnSpan(ctx context.Context, turnID string) *tracing.Span {
	t := l.m.cfg.Tracer
	if t == nil {
		return nil
	}
	s := t.StartChild(tracing.FromContext(ctx).Context(), "agentbox.turn", tracing.KindInternal)
	s.SetString("agentbox.session.id", l.id)
	s.SetString("agentbox.turn.id", turnID)
	s.SetString("agentbox.agent", l.agent)
	return s
}

// endTurnSpan ends the turn's span (the one in ctx, from startTurn) with
// how the turn ended, and the spans of tool calls it left open. It is
// called before the turn frees its slot: no next turn's spans exist yet.
func (l *live) endTurnSpan(ctx context.Context, res agent.Result) {
	if l.m.cfg.Tracer == nil {
		return
	}
	s := tracing.FromContext(ctx)
	l.mu.Lock()
	for id, ts := range l.trace.tools {
		ts.SetStatus(tracing.StatusError, "the turn ended before the agent completed this item")
		ts.End()
		delete(l.trace.tools, id)
	}
	if l.trace.span == s {
		l.trace.span = nil
	}
	l.mu.Unlock()
	s.SetString("agentbox.turn.stop_reason", string(res.StopReason))
	if res.Usage != nil {
		s.SetInt("gen_ai.usage.input_tokens", res.Usage.InputTokens)
		s.SetInt("gen_ai.usage.output_tokens", res.Usage.OutputTokens)
	}
	if res.StopReason == event.StopError {
		s.SetStatus(tracing.StatusError, res.Message)
	}
	s.End()
}

// traceItem follows one of the agent's events for the spans of its tool
// calls. Called with l.mu held.
func (l *live) traceItem(e event.Event) {
	t := l.m.cfg.Tracer
	if t == nil || (e.Type != event.TypeItemStarted && e.Type != event.TypeItemCompleted) {
		return
	}
	p, err := e.Decode()
	if err != nil {
		return
	}
	switch p := p.(type) {
	case *event.ItemStarted:
		switch p.Item.Kind {
		case event.ItemMessage, event.ItemReasoning, event.ItemPlan:
			return
		}
		if _, dup := l.trace.tools[p.Item.ID]; dup || len(l.trace.tools) >= maxOpenToolSpans {
			return
		}
		s := t.StartChild(l.trace.span.Context(), "agentbox.tool_call", tracing.KindInternal)
		s.SetString("agentbox.session.id", l.id)
		s.SetString("agentbox.item.id", p.Item.ID)
		s.SetString("agentbox.item.kind", string(p.Item.Kind))
		if p.Item.Name != "" {
			s.SetString("gen_ai.tool.name", p.Item.Name)
		}
		if l.trace.tools == nil {
			l.trace.tools = map[string]*tracing.Span{}
		}
		l.trace.tools[p.Item.ID] = s
	case *event.ItemCompleted:
		s, ok := l.trace.tools[p.Item.ID]
		if !ok {
			return
		}
		delete(l.trace.tools, p.Item.ID)
		s.SetString("agentbox.item.status", string(p.Item.Status))
		if p.Item.Status == event.StatusFailed {
			s.SetStatus(tracing.StatusError, p.Item.Error)
		}
		s.End()
	}
}

// maxOpenToolSpans bounds the tool-call spans one session keeps open: the
// agent decides how many items it starts.
const maxOpenToolSpans = 256

// startPermissionSpan starts the span of a permission wait, the child of
// the span in ctx or else of the running turn's.
func (l *live) startPermissionSpan(ctx context.Context, req *agent.PermissionRequest, source event.Source) *tracing.Span {
	t := l.m.cfg.Tracer
	if t == nil {
		return nil
	}
	parent := tracing.FromContext(ctx).Context()
	if !parent.IsValid() {
		l.mu.Lock()
		parent = l.trace.span.Context()
		l.mu.Unlock()
	}
	s := t.StartChild(parent, "agentbox.permission.wait", tracing.KindInternal)
	s.SetString("agentbox.session.id", l.id)
	s.SetString("agentbox.permission.id", req.ID)
	s.SetString("agentbox.permission.kind", string(req.Kind))
	s.SetString("agentbox.permission.source", string(source))
	return s
}

// endPermissionSpan ends a permission wait's span with its answer.
func endPermissionSpan(s *tracing.Span, a agent.PermissionAnswer, err error) {
	if s == nil {
		return
	}
	s.SetString("agentbox.permission.decision", string(a.Decision))
	s.SetString("agentbox.permission.decided_by", string(a.By))
	s.SetError(err)
	s.End()
}

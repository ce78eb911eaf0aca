package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// The request broker: an agent (or the daemon's egress proxy) asks the
// client something, a permission or a question, and waits for the answer.
// Both kinds go through request (the asking side) and answer (the client's
// side, through the API); they differ only in their payloads.

// pending is a request waiting for its answer, delivered on ch.
type pending struct {
	kind store.RequestKind
	ch   chan any // buffered: the one answer that resolved the request
}

// ask is one request to the client, answered by an A.
type ask[A any] struct {
	kind store.RequestKind
	id   string
	// requested is the requested event's payload, stored as the
	// request's payload too; source is who asks.
	requested event.Payload
	source    event.Source
	// capKind and title describe the request to the pending cap.
	capKind, title string
	timeout        time.Duration
	// overCap is the answer to a request over the pending cap, given the
	// cap's denial.
	overCap func(denied agent.PermissionAnswer) A
	// settle is the daemon's answer when nobody gave one (by timeout, or
	// by the daemon as the turn or session ends, msg saying why), with
	// the event that records it.
	settle func(by event.DecidedBy, msg string) (A, event.Event)
	// asked, when set, is told the answer of a request that was asked
	// and how long it waited.
	asked func(a A, waited time.Duration)
}

// request records r, waits for an answer through the API, the timeout or
// the end of ctx, and records the resolution. Each request is settled on
// its own; nothing is remembered for the next one.
func request[A any](ctx context.Context, l *live, r ask[A]) (A, error) {
	var zero A
	ch := make(chan any, 1)
	if denied, ok := l.admit(r.capKind, r.title, func() { l.pending[r.id] = pending{kind: r.kind, ch: ch} }); !ok {
		return r.overCap(denied), nil
	}
	defer func() {
		l.mu.Lock()
		delete(l.pending, r.id)
		l.mu.Unlock()
	}()

	// Everything the agent emitted before asking goes first.
	if err := l.q.flush(); err != nil {
		return zero, err
	}
	payload, _ := json.Marshal(r.requested)
	ev := event.New(r.source, r.requested)
	l.stamp(&ev)
	if _, err := l.m.st.CreateRequest(context.WithoutCancel(ctx), store.Request{
		SessionID: l.id, ID: r.id, Kind: r.kind, State: store.StatePending, Payload: payload, CreatedAt: time.Now().UTC(),
	}, ev); err != nil {
		return zero, fmt.Errorf("record %s request: %w", r.kind, err)
	}
	l.m.cfg.Metrics.EventsAppended.Inc()
	start := time.Now()
	timer := time.NewTimer(r.timeout)
	defer timer.Stop()

	var ans A
	select {
	case a := <-ch:
		ans = a.(A)
	case <-timer.C:
		ans = settle(l, r, ch, event.ByTimeout, fmt.Sprintf("no answer within %s", r.timeout))
	case <-ctx.Done():
		msg := "the turn ended before an answer came"
		if errors.Is(context.Cause(ctx), errClosing) {
			msg = errClosing.Error()
		}
		ans = settle(l, r, ch, event.ByDaemon, msg)
	}
	if r.asked != nil {
		r.asked(ans, time.Since(start))
	}
	return ans, nil
}

// settle resolves a pending request on the daemon's behalf, unless a
// client's answer won the race, in which case that answer is returned.
func settle[A any](l *live, r ask[A], ch chan any, by event.DecidedBy, msg string) A {
	ans, resolved := r.settle(by, msg)
	_, err := l.m.st.ResolveRequest(context.Background(), l.id, r.id, resolved)
	if errors.Is(err, store.ErrAlreadyResolved) {
		// answer resolved it first and is about to deliver.
		select {
		case a := <-ch:
			return a.(A)
		case <-time.After(time.Second):
		}
	} else if err == nil {
		l.m.cfg.Metrics.EventsAppended.Inc()
	}
	return ans
}

// answer settles pending request rid (of kind, in session sid, its stored
// payload a Q) with the client's answer: check validates (and completes)
// the answer against the request, resolved makes the event that records
// it. The waiting request, if its session is live, gets the answer.
func answer[Q, A any](ctx context.Context, m *Manager, sid, rid string, kind store.RequestKind, ans A,
	check func(q *Q, a *A) error, resolved func(a A) event.Event,
) (event.Event, error) {
	r, err := m.request(ctx, sid, rid, kind)
	if err != nil {
		return event.Event{}, err
	}
	var q Q
	if err := json.Unmarshal(r.Payload, &q); err != nil {
		return event.Event{}, fmt.Errorf("decode stored %s %s: %w", kind, rid, err)
	}
	if err := check(&q, &ans); err != nil {
		return event.Event{}, err
	}
	ev, err := m.st.ResolveRequest(ctx, sid, rid, resolved(ans))
	if err != nil {
		return event.Event{}, notFound(err, string(kind), rid)
	}
	m.cfg.Metrics.EventsAppended.Inc()
	if l := m.lookup(sid); l != nil {
		l.mu.Lock()
		p, ok := l.pending[rid]
		l.mu.Unlock()
		if ok && p.kind == kind {
			p.ch <- ans
		}
	}
	return ev, nil
}

// request returns pending request rid of session id, of kind.
func (m *Manager) request(ctx context.Context, id, rid string, kind store.RequestKind) (store.Request, error) {
	if _, err := m.get(ctx, id); err != nil {
		return store.Request{}, err
	}
	r, err := m.st.GetRequest(ctx, id, rid)
	if err != nil {
		return store.Request{}, notFound(err, string(kind), rid)
	}
	if r.Kind != kind {
		return store.Request{}, fmt.Errorf("%s %s: %w", kind, rid, ErrNotFound)
	}
	if r.State != store.StatePending {
		return store.Request{}, fmt.Errorf("%s %s: %w", kind, rid, store.ErrAlreadyResolved)
	}
	return r, nil
}

// RequestPermission implements agent.Host.
func (l *live) RequestPermission(ctx context.Context, req agent.PermissionRequest) (agent.PermissionAnswer, error) {
	return l.requestPermission(ctx, req, event.SourceAgent, l.m.cfg.PermissionTimeout)
}

// requestPermission is RequestPermission for a request from source (the
// agent's, or the daemon's own: the egress proxy's), denied by timeout
// after timeout.
func (l *live) requestPermission(ctx context.Context, req agent.PermissionRequest, source event.Source, timeout time.Duration) (agent.PermissionAnswer, error) {
	req.ID = ids.New(ids.Permission)
	if len(req.Options) == 0 {
		req.Options = []event.PermissionOption{
			{ID: "allow", Kind: event.OptionAllowOnce, Label: "Allow once"},
			{ID: "deny", Kind: event.OptionDenyOnce, Label: "Deny"},
		}
	}
	exp := time.Now().Add(timeout).UTC()
	req.ExpiresAt = &exp
	span := l.startPermissionSpan(ctx, &req, source)
	a, err := request(ctx, l, ask[agent.PermissionAnswer]{
		kind: store.KindPermission, id: req.ID, requested: &req, source: source,
		capKind: string(req.Kind), title: req.Title, timeout: timeout,
		overCap: func(denied agent.PermissionAnswer) agent.PermissionAnswer { return denied },
		settle: func(by event.DecidedBy, msg string) (agent.PermissionAnswer, event.Event) {
			return agent.PermissionAnswer{Decision: event.DecisionDeny, By: by, Message: msg},
				event.New(event.SourceDaemon, &event.PermissionResolved{ID: req.ID, Decision: event.DecisionDeny, By: by, Message: msg})
		},
		asked: func(a agent.PermissionAnswer, waited time.Duration) {
			l.m.cfg.Metrics.PermissionWait.WithLabelValues(string(req.Kind)).Observe(waited.Seconds())
			l.m.cfg.Metrics.PermissionRequests.WithLabelValues(string(req.Kind), string(a.Decision), string(a.By)).Inc()
		},
	})
	endPermissionSpan(span, a, err)
	return a, err
}

// AskQuestion implements agent.Host.
func (l *live) AskQuestion(ctx context.Context, q agent.Question) (agent.Answer, error) {
	q.ID = ids.New(ids.Question)
	timeout := l.m.cfg.QuestionTimeout
	exp := time.Now().Add(timeout).UTC()
	q.ExpiresAt = &exp
	return request(ctx, l, ask[agent.Answer]{
		kind: store.KindQuestion, id: q.ID, requested: &q, source: event.SourceAgent,
		capKind: "question", title: q.Prompt, timeout: timeout,
		overCap: func(agent.PermissionAnswer) agent.Answer { return agent.Answer{Cancelled: true} },
		settle: func(by event.DecidedBy, _ string) (agent.Answer, event.Event) {
			return agent.Answer{Cancelled: true},
				event.New(event.SourceDaemon, &event.QuestionResolved{ID: q.ID, Cancelled: true, By: by})
		},
	})
}

// AnswerPermission settles a pending permission request with the client's
// answer.
func (m *Manager) AnswerPermission(ctx context.Context, id, pid string, ans agent.PermissionAnswer) (event.Event, error) {
	if ans.Decision != event.DecisionAllow && ans.Decision != event.DecisionDeny {
		return event.Event{}, fmt.Errorf("%w: decision must be allow or deny", ErrInvalid)
	}
	return answer(ctx, m, id, pid, store.KindPermission, ans, func(req *event.PermissionRequested, ans *agent.PermissionAnswer) error {
		if ans.OptionID != "" {
			opt, ok := findOption(req.Options, ans.OptionID)
			if !ok {
				return fmt.Errorf("%w: option_id %q is not an option of permission %s", ErrInvalid, ans.OptionID, pid)
			}
			allow := opt.Kind == event.OptionAllowOnce || opt.Kind == event.OptionAllowAlways
			if allow != (ans.Decision == event.DecisionAllow) {
				return fmt.Errorf("%w: option %q (%s) contradicts decision %s", ErrInvalid, opt.ID, opt.Kind, ans.Decision)
			}
		} else {
			// Without an explicit option, only a once-only option is
			// chosen: a session-wide grant must be asked for by name.
			want := event.OptionAllowOnce
			if ans.Decision == event.DecisionDeny {
				want = event.OptionDenyOnce
			}
			for _, o := range req.Options {
				if o.Kind == want {
					ans.OptionID = o.ID
					break
				}
			}
		}
		ans.By = apiDecider(ans.By)
		return nil
	}, func(ans agent.PermissionAnswer) event.Event {
		return event.New(event.SourceDaemon, &event.PermissionResolved{
			ID: pid, Decision: ans.Decision, By: ans.By, OptionID: ans.OptionID, Message: ans.Message,
		})
	})
}

// AnswerQuestion settles a pending question with the client's answer.
func (m *Manager) AnswerQuestion(ctx context.Context, id, qid string, ans agent.Answer) (event.Event, error) {
	return answer(ctx, m, id, qid, store.KindQuestion, ans, func(q *event.QuestionRequested, ans *agent.Answer) error {
		if !ans.Cancelled && ans.Text == "" && ans.OptionID == "" {
			return fmt.Errorf("%w: give an answer, an option_id or cancel", ErrInvalid)
		}
		if ans.OptionID != "" {
			found := false
			for _, o := range q.Options {
				if o.ID == ans.OptionID {
					found = true
					if ans.Text == "" {
						ans.Text = o.Label
					}
				}
			}
			if !found {
				return fmt.Errorf("%w: option_id %q is not an option of question %s", ErrInvalid, ans.OptionID, qid)
			}
		}
		ans.By = apiDecider(ans.By)
		return nil
	}, func(ans agent.Answer) event.Event {
		return event.New(event.SourceDaemon, &event.QuestionResolved{
			ID: qid, Answer: ans.Text, OptionID: ans.OptionID, Cancelled: ans.Cancelled, By: ans.By,
		})
	})
}

// apiDecider is who decided an answer given through the API: a client's
// rule (policy) when it says so, a person (user) otherwise; never the
// daemon's own deciders, which only the daemon records.
func apiDecider(by event.DecidedBy) event.DecidedBy {
	if by == event.ByPolicy {
		return event.ByPolicy
	}
	return event.ByUser
}

func findOption(opts []event.PermissionOption, id string) (event.PermissionOption, bool) {
	for _, o := range opts {
		if o.ID == id {
			return o, true
		}
	}
	return event.PermissionOption{}, false
}

// admit is the session's pending cap, for permission requests and
// questions together: it registers a request of kind (permission kind, or
// "question") with add, under l.mu, when fewer than MaxPendingRequests are
// waiting; otherwise it returns the denial overCap made, and ok false.
func (l *live) admit(kind, title string, add func()) (denied agent.PermissionAnswer, ok bool) {
	l.mu.Lock()
	n := len(l.pending)
	if n < l.m.cfg.MaxPendingRequests {
		add()
		l.mu.Unlock()
		return agent.PermissionAnswer{}, true
	}
	l.mu.Unlock()
	return l.overCap(kind, title, n), false
}

// overCap denies a request of kind (permission kind, or "question") that
// would exceed the session's pending cap, n being the requests pending, and
// reports it as a resource violation (coalesced like every other).
func (l *live) overCap(kind, title string, n int) agent.PermissionAnswer {
	msg := fmt.Sprintf("%d requests of this session are waiting for an answer, the most allowed (%d)", n, l.m.cfg.MaxPendingRequests)
	l.reports.Add(sandbox.Violation{
		Kind: sandbox.ViolationResource, Rule: "session.max_pending_requests", Target: kind, Action: "blocked",
		Detail: fmt.Sprintf("a %s request (%q) was denied without asking: %s", kind, clip(title, 200), msg),
	})
	// A rule (the session's cap) decided, not a person nor the session's
	// end: by policy.
	if kind != "question" {
		l.m.cfg.Metrics.PermissionRequests.WithLabelValues(kind, string(event.DecisionDeny), string(event.ByPolicy)).Inc()
	}
	return agent.PermissionAnswer{Decision: event.DecisionDeny, By: event.ByPolicy, Message: msg}
}

// clip cuts s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

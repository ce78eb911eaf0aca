package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// live is a session with a running agent. It is the agent.Host handed to the
// adapter.
type live struct {
	m     *Manager
	id    string
	agent string
	sess  agent.Session
	// sb is the session's sandbox, nil when the agent runs on the host;
	// sbInfo says what it has in force (set before the session is live).
	sb     sandbox.Sandbox
	sbInfo *event.SandboxInfo
	// setAllow replaces its egress proxy's allow rules; nil without one.
	setAllow func([]string) error
	// ctx ends when the session is torn down.
	ctx    context.Context
	cancel context.CancelFunc
	// closing ends (with errClosing) as soon as the teardown starts.
	closing     context.Context
	stopClosing context.CancelCauseFunc
	// reports coalesces the violations of the session's sandbox (and the
	// requests over the pending cap) into events and audit records.
	reports *sandbox.Coalescer[sandbox.Violation]
	// env is the env the client gave (never stored), kept for the resume
	// after an idle stop.
	env map[string]string
	// mcp are its MCP servers with their values, kept the same way.
	mcp []agent.MCPServer
	// canPark: the agent can resume the session, so its idle agent
	// process may be stopped.
	canPark bool

	mu         sync.Mutex
	native     string
	turnID     string
	turnCancel context.CancelCauseFunc
	turnDone   chan struct{}
	pending    map[string]chan agent.PermissionAnswer
	questions  map[string]chan agent.Answer
	// open holds the items started and not yet completed: for tool-call
	// durations, and so a turn never ends with an item left open.
	open map[string]*openItem
	// idleAt is when the session last became idle, zero while a turn
	// runs; idleTimer fires Config.IdleTimeout later. stopping is set
	// once the idle stop has begun: no turn starts after it.
	idleAt    time.Time
	idleTimer *time.Timer
	stopping  bool
	// configuring is set while Configure changes the model or mode: no
	// turn starts meanwhile.
	configuring bool
	// announced is set once session.started is in the log; until then
	// the violation events of the sandbox wait in early (report), so that
	// the log starts with session.started.
	announced bool
	early     []event.Event

	// The event queue; see pump.
	queue    []batch
	queued   int
	qerr     error
	wake     chan struct{}
	pumpStop chan struct{}
	pumpDone chan struct{}
}

var _ agent.Host = (*live)(nil)

// errClosing is the cause of a live session's closing context.
var errClosing = errors.New("the session is closing")

// errStopping refuses a turn in a session whose idle agent is being
// stopped; Send then resumes the session.
var errStopping = errors.New("the session's idle agent is being stopped")

// idleLocked records that the session became idle and (re)arms the idle
// timer. Called with l.mu held.
func (l *live) idleLocked() {
	l.idleAt = time.Now()
	d := l.m.cfg.IdleTimeout
	if d <= 0 || !l.canPark || l.stopping {
		return
	}
	if l.idleTimer == nil {
		l.idleTimer = time.AfterFunc(d, l.idleExpired)
		return
	}
	l.idleTimer.Reset(d)
}

// busyLocked records that a turn started. Called with l.mu held.
func (l *live) busyLocked() {
	l.idleAt = time.Time{}
	if l.idleTimer != nil {
		l.idleTimer.Stop()
	}
}

// idleDue reports how long until the idle stop of l, when one is due.
func (l *live) idleDue(now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.idleTimer == nil || l.idleAt.IsZero() || l.stopping {
		return 0, false
	}
	return l.idleAt.Add(l.m.cfg.IdleTimeout).Sub(now), true
}

// idleExpired stops the agent when the session is still idle (a stale
// timer, or one whose session started a turn meanwhile, does nothing) and
// the agent has given the native id a resume needs.
func (l *live) idleExpired() {
	l.mu.Lock()
	if l.stopping || l.turnCancel != nil || l.idleAt.IsZero() || time.Since(l.idleAt) < l.m.cfg.IdleTimeout ||
		l.native == "" || len(l.pending)+len(l.questions) > 0 {
		l.mu.Unlock()
		return
	}
	l.stopping = true
	l.mu.Unlock()
	l.m.stopIdle(l)
}

func (l *live) nativeID() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.native
}

// Emitted events go through a per-session queue drained by one pump
// goroutine, which appends everything queued in one store call: an agent
// streaming deltas is not held to one fsync per event, the order of the
// session's events is the order they were queued in, and a subscriber still
// sees an event only after it is durable.
const maxQueued = 8192 // beyond this, Emit waits for the queue to drain

type batch struct {
	evs  []event.Event
	done chan error // nil: nobody waits
}

// enqueue stamps events and queues them; with wait it returns once they (and
// everything queued before them) are durable.
func (l *live) enqueue(evs []event.Event, wait bool) error {
	l.mu.Lock()
	b, backlog, err := l.pushLocked(evs, wait)
	l.mu.Unlock()
	if err != nil {
		return err
	}
	return l.await(b, backlog)
}

// pushLocked stamps and queues events. Called with l.mu held.
func (l *live) pushLocked(evs []event.Event, wait bool) (batch, bool, error) {
	for i := range evs {
		if evs[i].Source == "" {
			evs[i].Source = event.SourceAgent
		}
		if evs[i].TurnID == "" {
			evs[i].TurnID = l.turnID
		}
		if evs[i].NativeSessionID == "" {
			evs[i].NativeSessionID = l.native
		}
		l.observe(evs[i])
	}
	if l.qerr != nil {
		return batch{}, false, l.qerr
	}
	b := batch{evs: evs}
	if wait {
		b.done = make(chan error, 1)
	}
	l.queue = append(l.queue, b)
	l.queued += len(evs)
	return b, l.queued > maxQueued, nil
}

// await wakes the pump and, for a waited batch, waits for its commit.
func (l *live) await(b batch, backlog bool) error {
	select {
	case l.wake <- struct{}{}:
	default:
	}
	if b.done != nil {
		return <-b.done
	}
	if backlog {
		return l.flush()
	}
	return nil
}

// flush waits until everything queued so far is durable.
func (l *live) flush() error { return l.enqueue(nil, true) }

// pump appends queued events until the session is torn down.
func (l *live) pump() {
	defer close(l.pumpDone)
	for {
		select {
		case <-l.wake:
		case <-l.pumpStop:
			l.drain()
			return
		}
		l.drain()
	}
}

func (l *live) drain() {
	for {
		l.mu.Lock()
		q := l.queue
		l.queue, l.queued = nil, 0
		l.mu.Unlock()
		if len(q) == 0 {
			return
		}
		var all []event.Event
		for _, b := range q {
			all = append(all, b.evs...)
		}
		var err error
		if len(all) > 0 {
			// Durable writes are not tied to any request or turn context:
			// an interrupted turn must still record how it ended.
			_, err = l.m.st.Append(context.Background(), l.id, all...)
			if err != nil {
				err = fmt.Errorf("append events: %w", err)
				l.m.log.Error("appending events", "session", l.id, "count", len(all), "err", err)
				l.mu.Lock()
				l.qerr = err
				l.mu.Unlock()
			} else {
				l.m.cfg.Metrics.EventsAppended.Add(float64(len(all)))
			}
		}
		for _, b := range q {
			if b.done != nil {
				b.done <- err
			}
		}
	}
}

// append queues events and waits until they are durable.
func (l *live) append(_ context.Context, evs ...event.Event) ([]event.Event, error) {
	return nil, l.enqueue(evs, true)
}

// observe feeds the tool-call duration metric. Called with l.mu held.
func (l *live) observe(e event.Event) {
	if e.Type == event.TypeItemDelta {
		if len(l.open) == 0 {
			return
		}
		var d event.ItemDelta
		if json.Unmarshal(e.Data, &d) != nil {
			return
		}
		if o, ok := l.open[d.ItemID]; ok {
			switch d.Field {
			case event.DeltaText:
				o.text.WriteString(d.Delta)
			case event.DeltaOutput:
				o.output.WriteString(d.Delta)
			}
		}
		return
	}
	if e.Type != event.TypeItemStarted && e.Type != event.TypeItemCompleted {
		return
	}
	var p event.ItemStarted // same shape as ItemCompleted
	if json.Unmarshal(e.Data, &p) != nil {
		return
	}
	if e.Type == event.TypeItemStarted {
		l.open[p.Item.ID] = &openItem{item: p.Item, at: time.Now()}
		return
	}
	o, ok := l.open[p.Item.ID]
	if !ok {
		return
	}
	delete(l.open, p.Item.ID)
	switch p.Item.Kind {
	case event.ItemMessage, event.ItemReasoning, event.ItemPlan:
	default:
		l.m.cfg.Metrics.ToolCallDuration.WithLabelValues(string(p.Item.Kind)).Observe(time.Since(o.at).Seconds())
	}
}

// openItem is an item started and not yet completed, with what its deltas
// said so far.
type openItem struct {
	item         event.Item
	at           time.Time
	text, output strings.Builder
}

// closeOpenItems completes, as failed, the items the agent started and
// never completed (it died, or an adapter lost track), so every item.started
// has its item.completed before the turn ends. Called with l.mu held.
func (l *live) closeOpenItems(why string) []event.Event {
	items := make([]*openItem, 0, len(l.open))
	for id, o := range l.open {
		items = append(items, o)
		delete(l.open, id)
	}
	slices.SortFunc(items, func(a, b *openItem) int { return a.at.Compare(b.at) })
	evs := make([]event.Event, len(items))
	for i, o := range items {
		it := o.item
		it.Status, it.Error = event.StatusFailed, why
		if o.text.Len() > 0 && it.Text() == "" {
			it.Content = append(it.Content, event.TextPart(o.text.String()))
		}
		if o.output.Len() > 0 && it.Output == "" {
			it.Output = o.output.String()
		}
		evs[i] = event.New(event.SourceDaemon, &event.ItemCompleted{Item: it})
	}
	return evs
}

// Emit implements agent.Host. It queues the events and returns without
// waiting for the disk; see pump.
func (l *live) Emit(_ context.Context, evs ...event.Event) error {
	return l.enqueue(evs, false)
}

// SetNativeSessionID implements agent.Host.
func (l *live) SetNativeSessionID(ctx context.Context, id string) error {
	l.mu.Lock()
	l.native = id
	l.mu.Unlock()
	_, err := l.m.st.UpdateSession(context.WithoutCancel(ctx), l.id, func(s *store.Session) error {
		s.NativeSessionID = id
		return nil
	})
	return err
}

// startTurn records the turn's start and the user's message, then runs the
// turn in its own goroutine.
func (l *live) startTurn(ctx context.Context, content []event.ContentPart) (string, error) {
	l.mu.Lock()
	if l.stopping {
		l.mu.Unlock()
		return "", errStopping
	}
	if l.turnCancel != nil {
		l.mu.Unlock()
		return "", fmt.Errorf("%w in session %s (turn %s)", ErrBusy, l.id, l.turnID)
	}
	if l.configuring {
		l.mu.Unlock()
		return "", fmt.Errorf("%w: session %s is changing its model or mode; send the message again", ErrBusy, l.id)
	}
	l.busyLocked()
	turnID := ids.New(ids.Turn)
	// The turn's context descends from the session, not from the request:
	// the request returns as soon as the turn is recorded.
	tctx, cancel := context.WithCancelCause(l.ctx)
	l.turnID, l.turnCancel, l.turnDone = turnID, cancel, make(chan struct{})
	done := l.turnDone
	l.mu.Unlock()

	fail := func(err error) (string, error) {
		l.mu.Lock()
		l.turnID, l.turnCancel, l.turnDone = "", nil, nil
		l.idleLocked()
		l.mu.Unlock()
		cancel(err)
		close(done)
		return "", err
	}
	// The status is stored before turn.started announces the turn.
	if _, err := l.m.st.UpdateSession(context.WithoutCancel(ctx), l.id, func(s *store.Session) error {
		s.Status, s.CurrentTurnID, s.UpdatedAt = store.StatusRunning, turnID, time.Now().UTC()
		return nil
	}); err != nil {
		return fail(err)
	}
	user := event.Item{ID: ids.New(ids.Item), Kind: event.ItemMessage, Status: event.StatusCompleted, Role: event.RoleUser, Content: content}
	if _, err := l.append(ctx,
		event.New(event.SourceDaemon, &event.TurnStarted{TurnID: turnID}),
		event.New(event.SourceDaemon, &event.ItemStarted{Item: user}),
		event.New(event.SourceDaemon, &event.ItemCompleted{Item: user}),
	); err != nil {
		_, _ = l.m.st.UpdateSession(context.WithoutCancel(ctx), l.id, func(s *store.Session) error {
			if s.CurrentTurnID == turnID {
				s.Status, s.CurrentTurnID = store.StatusIdle, ""
			}
			return nil
		})
		return fail(err)
	}
	l.m.wg.Add(1)
	go l.runTurn(tctx, turnID, content, done)
	return turnID, nil
}

func (l *live) runTurn(ctx context.Context, turnID string, content []event.ContentPart, done chan struct{}) {
	defer l.m.wg.Done()
	defer close(done)
	start := time.Now()
	res, err := l.sess.Prompt(ctx, agent.Input{TurnID: turnID, Content: content})
	// A turn cancelled because its agent died failed; one cancelled by an
	// interrupt, a termination or a shutdown was interrupted.
	var ending *endingError
	agentFailed := errors.As(context.Cause(ctx), &ending) && ending.agentFailed
	interrupted := ctx.Err() != nil && !agentFailed
	switch {
	case agentFailed && (err == nil || errors.Is(err, context.Canceled)):
		err = errors.New(ending.msg) // not "context canceled": why it was
		fallthrough
	case agentFailed:
		res.StopReason = event.StopError
		res.Message = err.Error()
		_, _ = l.append(ctx, event.New(event.SourceDaemon, &event.Error{Code: "agent_exited", Message: err.Error()}))
	case interrupted:
		res.StopReason = event.StopInterrupted
		if res.Message == "" {
			res.Message = context.Cause(ctx).Error()
		}
	case err != nil:
		res.StopReason = event.StopError
		res.Message = err.Error()
		_, _ = l.append(ctx, event.New(event.SourceDaemon, &event.Error{Code: "agent_error", Message: err.Error()}))
	case res.StopReason == "":
		res.StopReason = event.StopEndTurn
	}
	if l.sb != nil {
		// The turn's workspace changes reach the host before anyone sees
		// turn.completed; changes to protected paths are dropped here,
		// and changes held for review wait for their answers (not for an
		// interrupt: the client may still answer them).
		vs, cerr := l.sb.Commit(context.WithoutCancel(ctx))
		l.addReports(vs)
		if cerr != nil {
			_, _ = l.append(context.WithoutCancel(ctx), event.New(event.SourceDaemon, &event.Error{Code: "sandbox_commit_failed", Message: cerr.Error()}))
		}
	}
	// The turn's log says what its sandbox refused, repeats included.
	l.reports.Flush()
	d := time.Since(start)
	l.m.cfg.Metrics.TurnDuration.WithLabelValues(l.agent, string(res.StopReason)).Observe(d.Seconds())

	// The session is idle before anyone can see turn.completed, so a client
	// that sends the next message on seeing it is never told "busy".
	_, serr := l.m.st.UpdateSession(context.WithoutCancel(ctx), l.id, func(s *store.Session) error {
		if s.Status == store.StatusRunning && s.CurrentTurnID == turnID {
			s.Status, s.CurrentTurnID, s.UpdatedAt = store.StatusIdle, "", time.Now().UTC()
		}
		return nil
	})
	if serr != nil && !errors.Is(serr, store.ErrNotFound) {
		l.m.log.Error("recording session status", "session", l.id, "err", serr)
	}
	completed := event.New(event.SourceDaemon, &event.TurnCompleted{
		TurnID: turnID, StopReason: res.StopReason, Usage: res.Usage, DurationMS: d.Milliseconds(), Message: res.Message,
	})
	completed.TurnID = turnID
	// Queue turn.completed and free the turn slot in one step: the next
	// turn's events can only be queued after it.
	l.mu.Lock()
	b, backlog, err := l.pushLocked(append(l.closeOpenItems("the turn ended before the agent completed this item"), completed), true)
	if l.turnID == turnID {
		l.turnID, l.turnCancel, l.turnDone = "", nil, nil
		l.idleLocked()
	}
	l.mu.Unlock()
	if err == nil {
		err = l.await(b, backlog)
	}
	if err != nil {
		l.m.log.Error("recording turn end", "session", l.id, "turn", turnID, "err", err)
	}
}

// RequestPermission implements agent.Host: it records the request, waits for
// an answer through the API, the timeout or the end of ctx, and records the
// resolution. Each request is settled on its own; nothing is remembered for
// the next one.
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

	ch := make(chan agent.PermissionAnswer, 1)
	if denied, ok := l.admit(string(req.Kind), req.Title, func() { l.pending[req.ID] = ch }); !ok {
		return denied, nil
	}
	defer func() {
		l.mu.Lock()
		delete(l.pending, req.ID)
		l.mu.Unlock()
	}()

	// Everything the agent emitted before asking goes first.
	if err := l.flush(); err != nil {
		return agent.PermissionAnswer{}, err
	}
	payload, _ := json.Marshal(&req)
	reqEv := event.New(source, &req)
	l.stamp(&reqEv)
	if _, err := l.m.st.CreateRequest(context.WithoutCancel(ctx), store.Request{
		SessionID: l.id, ID: req.ID, Kind: store.KindPermission, State: store.StatePending, Payload: payload, CreatedAt: time.Now().UTC(),
	}, reqEv); err != nil {
		return agent.PermissionAnswer{}, fmt.Errorf("record permission request: %w", err)
	}
	l.m.cfg.Metrics.EventsAppended.Inc()
	start := time.Now()
	timer := time.NewTimer(timeout)
	defer timer.Stop()

	var ans agent.PermissionAnswer
	select {
	case ans = <-ch:
	case <-timer.C:
		ans = l.settlePermission(req.ID, ch, event.ByTimeout, fmt.Sprintf("no answer within %s", timeout))
	case <-ctx.Done():
		msg := "the turn ended before an answer came"
		if errors.Is(context.Cause(ctx), errClosing) {
			msg = errClosing.Error()
		}
		ans = l.settlePermission(req.ID, ch, event.ByDaemon, msg)
	}
	l.m.cfg.Metrics.PermissionWait.WithLabelValues(string(req.Kind)).Observe(time.Since(start).Seconds())
	l.m.cfg.Metrics.PermissionRequests.WithLabelValues(string(req.Kind), string(ans.Decision), string(ans.By)).Inc()
	return ans, nil
}

// admit is the session's pending cap, for permission requests and
// questions together: it registers a request of kind (permission kind, or
// "question") with add, under l.mu, when fewer than MaxPendingRequests are
// waiting; otherwise it returns the denial overCap made, and ok false.
func (l *live) admit(kind, title string, add func()) (denied agent.PermissionAnswer, ok bool) {
	l.mu.Lock()
	n := len(l.pending) + len(l.questions)
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
	if kind != "question" {
		l.m.cfg.Metrics.PermissionRequests.WithLabelValues(kind, string(event.DecisionDeny), string(event.ByDaemon)).Inc()
	}
	return agent.PermissionAnswer{Decision: event.DecisionDeny, By: event.ByDaemon, Message: msg}
}

// clip cuts s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// settlePermission denies a pending request on the daemon's behalf, unless a
// user answer won the race, in which case that answer is returned.
func (l *live) settlePermission(id string, ch chan agent.PermissionAnswer, by event.DecidedBy, msg string) agent.PermissionAnswer {
	ans := agent.PermissionAnswer{Decision: event.DecisionDeny, By: by, Message: msg}
	_, err := l.m.st.ResolveRequest(context.Background(), l.id, id, event.New(event.SourceDaemon, &event.PermissionResolved{
		ID: id, Decision: event.DecisionDeny, By: by, Message: msg,
	}))
	if errors.Is(err, store.ErrAlreadyResolved) {
		// AnswerPermission resolved it first and is about to deliver.
		select {
		case a := <-ch:
			return a
		case <-time.After(time.Second):
		}
	} else if err == nil {
		l.m.cfg.Metrics.EventsAppended.Inc()
	}
	return ans
}

// stamp sets the envelope fields append would set, for events written
// through the request path of the store.
func (l *live) stamp(e *event.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.TurnID, e.NativeSessionID = l.turnID, l.native
}

// AskQuestion implements agent.Host.
func (l *live) AskQuestion(ctx context.Context, q agent.Question) (agent.Answer, error) {
	q.ID = ids.New(ids.Question)
	timeout := l.m.cfg.QuestionTimeout
	exp := time.Now().Add(timeout).UTC()
	q.ExpiresAt = &exp
	ch := make(chan agent.Answer, 1)
	if _, ok := l.admit("question", q.Prompt, func() { l.questions[q.ID] = ch }); !ok {
		return agent.Answer{Cancelled: true}, nil
	}
	defer func() {
		l.mu.Lock()
		delete(l.questions, q.ID)
		l.mu.Unlock()
	}()
	if err := l.flush(); err != nil {
		return agent.Answer{}, err
	}
	payload, _ := json.Marshal(&q)
	ev := event.New(event.SourceAgent, &q)
	l.stamp(&ev)
	if _, err := l.m.st.CreateRequest(context.WithoutCancel(ctx), store.Request{
		SessionID: l.id, ID: q.ID, Kind: store.KindQuestion, State: store.StatePending, Payload: payload, CreatedAt: time.Now().UTC(),
	}, ev); err != nil {
		return agent.Answer{}, fmt.Errorf("record question: %w", err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var by event.DecidedBy
	select {
	case a := <-ch:
		return a, nil
	case <-timer.C:
		by = event.ByTimeout
	case <-ctx.Done():
		by = event.ByDaemon
	}
	_, err := l.m.st.ResolveRequest(context.Background(), l.id, q.ID, event.New(event.SourceDaemon, &event.QuestionResolved{ID: q.ID, Cancelled: true, By: by}))
	if errors.Is(err, store.ErrAlreadyResolved) {
		select {
		case a := <-ch:
			return a, nil
		case <-time.After(time.Second):
		}
	}
	return agent.Answer{Cancelled: true}, nil
}

// AnswerPermission settles a pending permission request with the client's
// answer.
func (m *Manager) AnswerPermission(ctx context.Context, id, pid string, ans agent.PermissionAnswer) (event.Event, error) {
	if ans.Decision != event.DecisionAllow && ans.Decision != event.DecisionDeny {
		return event.Event{}, fmt.Errorf("%w: decision must be allow or deny", ErrInvalid)
	}
	r, err := m.request(ctx, id, pid, store.KindPermission)
	if err != nil {
		return event.Event{}, err
	}
	var req event.PermissionRequested
	if err := json.Unmarshal(r.Payload, &req); err != nil {
		return event.Event{}, fmt.Errorf("decode stored permission %s: %w", pid, err)
	}
	if ans.OptionID != "" {
		opt, ok := findOption(req.Options, ans.OptionID)
		if !ok {
			return event.Event{}, fmt.Errorf("%w: option_id %q is not an option of permission %s", ErrInvalid, ans.OptionID, pid)
		}
		allow := opt.Kind == event.OptionAllowOnce || opt.Kind == event.OptionAllowAlways
		if allow != (ans.Decision == event.DecisionAllow) {
			return event.Event{}, fmt.Errorf("%w: option %q (%s) contradicts decision %s", ErrInvalid, opt.ID, opt.Kind, ans.Decision)
		}
	} else {
		// Without an explicit option, only a once-only option is chosen:
		// a session-wide grant must be asked for by name.
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
	ans.By = event.ByUser
	ev, err := m.st.ResolveRequest(ctx, id, pid, event.New(event.SourceDaemon, &event.PermissionResolved{
		ID: pid, Decision: ans.Decision, By: event.ByUser, OptionID: ans.OptionID, Message: ans.Message,
	}))
	if err != nil {
		return event.Event{}, notFound(err, "permission", pid)
	}
	m.cfg.Metrics.EventsAppended.Inc()
	if l := m.lookup(id); l != nil {
		l.mu.Lock()
		ch := l.pending[pid]
		l.mu.Unlock()
		if ch != nil {
			ch <- ans
		}
	}
	return ev, nil
}

// AnswerQuestion settles a pending question with the client's answer.
func (m *Manager) AnswerQuestion(ctx context.Context, id, qid string, ans agent.Answer) (event.Event, error) {
	r, err := m.request(ctx, id, qid, store.KindQuestion)
	if err != nil {
		return event.Event{}, err
	}
	var q event.QuestionRequested
	if err := json.Unmarshal(r.Payload, &q); err != nil {
		return event.Event{}, fmt.Errorf("decode stored question %s: %w", qid, err)
	}
	if !ans.Cancelled && ans.Text == "" && ans.OptionID == "" {
		return event.Event{}, fmt.Errorf("%w: give an answer, an option_id or cancel", ErrInvalid)
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
			return event.Event{}, fmt.Errorf("%w: option_id %q is not an option of question %s", ErrInvalid, ans.OptionID, qid)
		}
	}
	ev, err := m.st.ResolveRequest(ctx, id, qid, event.New(event.SourceDaemon, &event.QuestionResolved{
		ID: qid, Answer: ans.Text, OptionID: ans.OptionID, Cancelled: ans.Cancelled, By: event.ByUser,
	}))
	if err != nil {
		return event.Event{}, notFound(err, "question", qid)
	}
	m.cfg.Metrics.EventsAppended.Inc()
	if l := m.lookup(id); l != nil {
		l.mu.Lock()
		ch := l.questions[qid]
		l.mu.Unlock()
		if ch != nil {
			ch <- ans
		}
	}
	return ev, nil
}

func (m *Manager) request(ctx context.Context, id, rid string, kind store.RequestKind) (store.Request, error) {
	if _, err := m.Get(ctx, id); err != nil {
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

func findOption(opts []event.PermissionOption, id string) (event.PermissionOption, bool) {
	for _, o := range opts {
		if o.ID == id {
			return o, true
		}
	}
	return event.PermissionOption{}, false
}

// stopPump drains the queue and stops the pump; later emits fail.
func (l *live) stopPump() {
	l.mu.Lock()
	if l.qerr == nil {
		l.qerr = fmt.Errorf("session %s: %w", l.id, ErrNotLive)
	}
	l.mu.Unlock()
	close(l.pumpStop)
	<-l.pumpDone
}

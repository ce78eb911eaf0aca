package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/errkind"
	"github.com/agentbox/agentbox/internal/store"
)

// fullStore is a real store whose writes fail, while full is set, with an
// error of kind errkind.StorageFull, as the sqlite store's do when the
// disk is full; reads keep working.
type fullStore struct {
	store.Store
	full atomic.Bool
	// appendsOnly: only appends are refused (the store fills up between
	// a status update and an append).
	appendsOnly bool
	mu          sync.Mutex
	// refused counts the appends refused since the store became full;
	// retried is closed at the second (the engine tried again).
	refused int
	retried chan struct{}
	// filled is set by the first fill; afterFill counts the events of the
	// appends that started after it and succeeded.
	filled    atomic.Bool
	afterFill atomic.Int64
}

func newFullStore(st store.Store) *fullStore { return &fullStore{Store: st} }

// fill makes every write fail until drain.
func (s *fullStore) fill() {
	s.mu.Lock()
	s.refused, s.retried = 0, make(chan struct{})
	s.mu.Unlock()
	s.filled.Store(true)
	s.full.Store(true)
}

func (s *fullStore) drain() { s.full.Store(false) }

func (s *fullStore) check(isAppend bool) error {
	if !s.full.Load() || s.appendsOnly && !isAppend {
		return nil
	}
	if isAppend {
		s.mu.Lock()
		if s.refused++; s.refused == 2 {
			close(s.retried)
		}
		s.mu.Unlock()
	}
	return errkind.Wrap(errkind.StorageFull, errors.New("database or disk is full"))
}

func (s *fullStore) CreateSession(ctx context.Context, x store.Session) error {
	if err := s.check(false); err != nil {
		return err
	}
	return s.Store.CreateSession(ctx, x)
}

func (s *fullStore) UpdateSession(ctx context.Context, id string, fn func(*store.Session) error) (store.Session, error) {
	if err := s.check(false); err != nil {
		return store.Session{}, err
	}
	return s.Store.UpdateSession(ctx, id, fn)
}

func (s *fullStore) Append(ctx context.Context, id string, evs ...event.Event) ([]event.Event, error) {
	after := s.filled.Load()
	if err := s.check(true); err != nil {
		return nil, err
	}
	out, err := s.Store.Append(ctx, id, evs...)
	if err == nil && after {
		s.afterFill.Add(int64(len(out)))
	}
	return out, err
}

func (s *fullStore) CreateRequest(ctx context.Context, r store.Request, ev event.Event) (event.Event, error) {
	if err := s.check(false); err != nil {
		return event.Event{}, err
	}
	return s.Store.CreateRequest(ctx, r, ev)
}

func (s *fullStore) ResolveRequest(ctx context.Context, sid, id string, ev event.Event) (event.Event, error) {
	if err := s.check(false); err != nil {
		return event.Event{}, err
	}
	return s.Store.ResolveRequest(ctx, sid, id, ev)
}

// gateAgent's turns are scripted by the prompt: "gate" says one thing,
// waits for the test to open the gate and says three more; "flood" says
// n things, one Emit each, stopping early when its turn is cancelled.
type gateAgent struct {
	gate chan struct{}
	n    int
	// flooded is closed when a flood ends.
	flooded chan struct{}
}

func (a *gateAgent) Info(context.Context) agent.Info {
	return agent.Info{Title: "gate", Available: true, Installed: true}
}

func (a *gateAgent) Start(_ context.Context, _ agent.Config, h agent.Host) (agent.Session, error) {
	return &gateSession{a: a, h: h}, nil
}

type gateSession struct {
	a *gateAgent
	h agent.Host
}

func (s *gateSession) say(ctx context.Context, id, text string) error {
	it := event.Item{ID: id, Kind: event.ItemMessage, Status: event.StatusCompleted, Role: event.RoleAssistant, Content: []event.ContentPart{event.TextPart(text)}}
	return s.h.Emit(ctx, event.New(event.SourceAgent, &event.ItemCompleted{Item: it}))
}

func (s *gateSession) Prompt(ctx context.Context, in agent.Input) (agent.Result, error) {
	switch in.Text() {
	case "gate":
		_ = s.say(ctx, "item_before", "before")
		select {
		case <-s.a.gate:
		case <-ctx.Done():
			return agent.Result{}, ctx.Err()
		}
		for i := range 3 {
			// Emit queues; it does not wait for the disk.
			_ = s.say(ctx, fmt.Sprintf("item_during_%d", i), "during")
		}
		return agent.Result{}, nil
	case "flood":
		defer close(s.a.flooded)
		for i := range s.a.n {
			if ctx.Err() != nil {
				return agent.Result{}, ctx.Err()
			}
			_ = s.say(ctx, fmt.Sprintf("item_%d", i), "flood")
		}
		return agent.Result{}, nil
	}
	return agent.Result{}, s.say(ctx, "item_hello", "hello")
}

func (s *gateSession) Close(context.Context) error { return nil }

func fullManager(t *testing.T, st store.Store, a *gateAgent) *engine.Manager {
	t.Helper()
	reg := agent.NewRegistry()
	reg.Register("gate", a)
	m := engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: t.TempDir(), PermissionTimeout: time.Minute})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return m
}

func turnCompleted(t *testing.T, evs []event.Event) *event.TurnCompleted {
	t.Helper()
	p, err := evs[len(evs)-1].Decode()
	if err != nil {
		t.Fatal(err)
	}
	return p.(*event.TurnCompleted)
}

// A write refused because the disk is full does not stick: the session's
// events wait, the turn ends once the store takes writes again, and the
// session takes new turns, all without a restart. While the store is
// full, a new message is refused with the kind StorageFull.
func TestStorageFullTurnRecovers(t *testing.T) {
	st := newFullStore(openStore(t, t.TempDir()))
	a := &gateAgent{gate: make(chan struct{})}
	m := fullManager(t, st, a)
	ctx := t.Context()
	s, err := m.Create(ctx, engine.CreateParams{Agent: "gate"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("gate")}); err != nil {
		t.Fatal(err)
	}
	evs := waitFor(t, m, s.ID, 0, event.TypeItemCompleted) // the user's message
	evs = waitFor(t, m, s.ID, evs[len(evs)-1].Seq, event.TypeItemCompleted)
	if got := lastText(t, evs); got != "before" {
		t.Fatalf("first item %q", got)
	}
	st.fill()
	close(a.gate) // the agent says three things and ends its turn: all queued
	select {
	case <-st.retried:
	case <-time.After(10 * time.Second):
		t.Error("the engine never tried the refused write again")
	}
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("hi")}); !errors.Is(err, errkind.StorageFull) {
		t.Errorf("send while the store is full: %v, want kind %v", err, errkind.StorageFull)
	}
	st.drain()

	evs = waitFor(t, m, s.ID, evs[len(evs)-1].Seq, event.TypeTurnCompleted)
	if got, want := fmt.Sprint(types(evs)), fmt.Sprint([]event.Type{event.TypeItemCompleted, event.TypeItemCompleted, event.TypeItemCompleted, event.TypeTurnCompleted}); got != want {
		t.Fatalf("after recovery: %v, want %v (nothing the agent said is lost)", got, want)
	}
	if tc := turnCompleted(t, evs); tc.StopReason != event.StopEndTurn {
		t.Fatalf("stop reason %s", tc.StopReason)
	}
	sess, err := m.Get(ctx, s.ID)
	if err != nil || sess.Status != engine.StatusIdle {
		t.Fatalf("session after the turn: %s %v, want idle", sess.Status, err)
	}
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("hi")}); err != nil {
		t.Fatalf("send after recovery: %v", err)
	}
	evs = waitFor(t, m, s.ID, evs[len(evs)-1].Seq, event.TypeTurnCompleted)
	if got := lastText(t, evs); got != "hello" {
		t.Fatalf("second turn said %q", got)
	}
}

// While the store is full the events an agent emits wait in memory, up to
// a bound; beyond it they are dropped and the turn is cancelled, and once
// the store takes writes again the turn ends with an error event saying
// so, and stop reason error.
func TestStorageFullBound(t *testing.T) {
	st := newFullStore(openStore(t, t.TempDir()))
	a := &gateAgent{n: 3 * engine.MaxQueued, flooded: make(chan struct{})}
	m := fullManager(t, st, a)
	ctx := t.Context()
	s, err := m.Create(ctx, engine.CreateParams{Agent: "gate"})
	if err != nil {
		t.Fatal(err)
	}
	before, err := m.Events(ctx, s.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("flood")}); err != nil {
		t.Fatal(err)
	}
	st.fill()
	<-a.flooded // all emitted, or the turn was cancelled
	select {
	case <-st.retried:
	case <-time.After(10 * time.Second):
		t.Error("the engine never tried the refused write again")
	}
	st.drain()
	evs := waitFor(t, m, s.ID, before[len(before)-1].Seq, event.TypeTurnCompleted)
	tc := turnCompleted(t, evs)
	// What waited in memory: at most the bound, one event over it (one
	// Emit), the error event and turn.completed.
	if n := st.afterFill.Load(); n > engine.MaxQueued+3 {
		t.Fatalf("%d events recorded after the store became full, more than the bound %d holds", n, engine.MaxQueued)
	}
	if tc.StopReason != event.StopError {
		t.Fatalf("stop reason %s, want error", tc.StopReason)
	}
	var dropped *event.Error
	for _, e := range evs {
		if e.Type == event.TypeError {
			p, _ := e.Decode()
			dropped = p.(*event.Error)
		}
	}
	if dropped == nil || dropped.Code != "events_dropped" {
		t.Fatalf("no events_dropped error before turn.completed: %v", dropped)
	}
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("hi")}); err != nil {
		t.Fatalf("send after recovery: %v", err)
	}
	waitFor(t, m, s.ID, evs[len(evs)-1].Seq, event.TypeTurnCompleted)
}

// A session that ends while the store stays full does not wait for it
// past its close deadline: shutdown returns, no goroutine is left (goleak),
// and the next start's recovery records the end the full store refused.
func TestStorageFullSessionEnds(t *testing.T) {
	dir := t.TempDir()
	st := newFullStore(openStore(t, dir))
	a := &gateAgent{gate: make(chan struct{})}
	reg := agent.NewRegistry()
	reg.Register("gate", a)
	m := engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: t.TempDir()})
	ctx := t.Context()
	s, err := m.Create(ctx, engine.CreateParams{Agent: "gate"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("gate")}); err != nil {
		t.Fatal(err)
	}
	evs := waitFor(t, m, s.ID, 0, event.TypeItemCompleted) // the user's message
	waitFor(t, m, s.ID, evs[len(evs)-1].Seq, event.TypeItemCompleted)
	st.fill()
	close(a.gate)
	select {
	case <-st.retried:
	case <-time.After(10 * time.Second):
		t.Error("the engine never tried the refused write again")
	}

	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := m.Shutdown(sctx); err != nil {
		t.Fatalf("shutdown with the store full: %v", err)
	}
	st.drain()

	m2 := engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: t.TempDir()})
	defer func() { _ = m2.Shutdown(context.Background()) }()
	if n, err := m2.Recover(ctx); err != nil || n != 1 {
		t.Fatalf("recover: %d %v, want the one session", n, err)
	}
	all, err := m2.Events(ctx, s.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if last := all[len(all)-1]; last.Type != event.TypeSessionEnded {
		t.Fatalf("the log ends with %s, want session.ended: %v", last.Type, types(all))
	}
}

// A store that becomes full between a message's status update and its
// turn.started refuses the message (kind StorageFull) at once rather than
// holding the request until it has room; the session takes the next one.
func TestStorageFullRefusesTurnStart(t *testing.T) {
	st := newFullStore(openStore(t, t.TempDir()))
	st.appendsOnly = true
	m := fullManager(t, st, &gateAgent{})
	ctx := t.Context()
	s, err := m.Create(ctx, engine.CreateParams{Agent: "gate"})
	if err != nil {
		t.Fatal(err)
	}
	st.fill()
	sent := make(chan error, 1)
	go func() {
		_, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("hi")})
		sent <- err
	}()
	select {
	case err := <-sent:
		if !errors.Is(err, errkind.StorageFull) {
			t.Fatalf("send: %v, want kind %v", err, errkind.StorageFull)
		}
	case <-time.After(10 * time.Second):
		st.drain()
		<-sent
		t.Fatal("send waited for the store to have room")
	}
	st.drain()
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("hi")}); err != nil {
		t.Fatalf("send after recovery: %v", err)
	}
	evs := waitFor(t, m, s.ID, 0, event.TypeTurnCompleted)
	if got := lastText(t, evs); got != "hello" {
		t.Fatalf("turn said %q", got)
	}
	if n := countType(evs, event.TypeTurnStarted); n != 1 {
		t.Fatalf("%d turn.started in the log, want the one of the turn that ran: %v", n, types(evs))
	}
}

func countType(evs []event.Event, typ event.Type) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

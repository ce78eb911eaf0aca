// Package storetest is the conformance suite of store.Store: every
// implementation runs it from its own tests with
//
//	storetest.Run(t, storetest.FactoryFunc(func(t *testing.T, dir string) store.Store { ... }))
//
// The suite checks the contract documented in package store, and the points
// it leaves open that callers rely on (see Run).
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/store"
)

// Factory opens the stores under test.
type Factory interface {
	// Open opens the store whose state lives in (or is keyed by) dir, a
	// fresh t.TempDir() of the suite, and fails t if it cannot. Opening
	// the same dir again after Close must see everything the earlier
	// store acknowledged; different dirs must not share state. The suite
	// closes every store it opens; Close may be called twice and the
	// second call may return nil or ErrClosed.
	Open(t *testing.T, dir string) store.Store
}

// FactoryFunc adapts a function to Factory.
type FactoryFunc func(t *testing.T, dir string) store.Store

// Open implements Factory.
func (f FactoryFunc) Open(t *testing.T, dir string) store.Store { return f(t, dir) }

// Run runs the conformance suite against the stores f opens. Beyond what the
// Store documentation says, it requires:
//   - Events, ListRequests and Subscribe on an unknown session, and
//     ListSessions with an unknown Before, fail with ErrNotFound;
//   - Events with limit <= 0 returns every event after after;
//   - a zero Session.CreatedAt is set by the store; times come back in UTC;
//   - a subscription's channel closes when its session is deleted;
//   - after Close every method fails with ErrClosed;
//   - it implements store.Leases, and fences writes (store.WithFence).
//
// Subtests run in parallel, each on its own store. Implementations should
// also check for leaked goroutines (go.uber.org/goleak) in their TestMain.
func Run(t *testing.T, f Factory) {
	groups := []struct {
		name  string
		tests []test
	}{
		{"Sessions", sessionTests},
		{"Append", appendTests},
		{"Events", eventsTests},
		{"Subscribe", subscribeTests},
		{"Requests", requestTests},
		{"Lifecycle", lifecycleTests},
		{"Lease", leaseTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.run(t, f)
				})
			}
		})
	}
}

type test struct {
	name string
	run  func(t *testing.T, f Factory)
}

// Scale shrinks an iteration count for slow modes: -short and the race
// detector each divide it by 4. It never returns less than 1.
func Scale(n int) int {
	if raceEnabled {
		n /= 4
	}
	if testing.Short() {
		n /= 4
	}
	return max(n, 1)
}

// timeout bounds every wait of the suite for something that should happen.
const timeout = 30 * time.Second

// open opens a store in a fresh directory and closes it when the test ends.
func open(t *testing.T, f Factory) store.Store {
	t.Helper()
	return openAt(t, f, t.TempDir())
}

func openAt(t *testing.T, f Factory, dir string) store.Store {
	t.Helper()
	s := f.Open(t, dir)
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// base is the creation time of the sessions the suite makes.
var base = time.Date(2025, 3, 4, 5, 6, 7, 891011121, time.UTC)

func newSession(id string) store.Session {
	return store.Session{
		ID:        id,
		Agent:     "mock",
		Status:    store.StatusIdle,
		CreatedAt: base,
		UpdatedAt: base,
	}
}

// mustCreate creates a minimal session.
func mustCreate(t *testing.T, s store.Store, id string) {
	t.Helper()
	if err := s.CreateSession(t.Context(), newSession(id)); err != nil {
		t.Fatalf("CreateSession(%q): %v", id, err)
	}
}

// ev returns an agent event whose data records n.
func ev(n int) event.Event {
	return event.Event{
		Type:   event.TypeItemDelta,
		Source: event.SourceAgent,
		TurnID: "turn_1",
		Data:   json.RawMessage(fmt.Sprintf(`{"item_id":"item_1","field":"text","delta":"%d"}`, n)),
	}
}

func evs(from, n int) []event.Event {
	out := make([]event.Event, n)
	for i := range out {
		out[i] = ev(from + i)
	}
	return out
}

// mustAppend appends n events, one call per batch of at most 100.
func mustAppend(t *testing.T, s store.Store, sessionID string, n int) []event.Event {
	t.Helper()
	var all []event.Event
	for len(all) < n {
		got, err := s.Append(t.Context(), sessionID, evs(len(all), min(100, n-len(all)))...)
		if err != nil {
			t.Fatalf("Append(%q): %v", sessionID, err)
		}
		all = append(all, got...)
	}
	return all
}

func mustEvents(t *testing.T, s store.Store, sessionID string) []event.Event {
	t.Helper()
	got, err := s.Events(t.Context(), sessionID, 0, 0)
	if err != nil {
		t.Fatalf("Events(%q): %v", sessionID, err)
	}
	return got
}

func seqs(evs []event.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

// span returns from, from+1, ..., to.
func span(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// recv receives n events from ch, failing if it closes or stalls first.
func recv(t *testing.T, ch <-chan event.Event, n int) []event.Event {
	t.Helper()
	out, err := tryRecv(ch, n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryRecv is recv for goroutines other than the test's.
func tryRecv(ch <-chan event.Event, n int) ([]event.Event, error) {
	out := make([]event.Event, 0, n)
	deadline := time.After(timeout)
	for len(out) < n {
		select {
		case e, ok := <-ch:
			if !ok {
				return out, fmt.Errorf("subscription closed after %d of %d events", len(out), n)
			}
			out = append(out, e)
		case <-deadline:
			return out, fmt.Errorf("received %d of %d events before the timeout", len(out), n)
		}
	}
	return out, nil
}

// quiet checks that nothing arrives on ch for a short while.
func quiet(t *testing.T, ch <-chan event.Event) {
	t.Helper()
	select {
	case e, ok := <-ch:
		if ok {
			t.Fatalf("unexpected event seq %d", e.Seq)
		}
		t.Fatal("subscription closed unexpectedly")
	case <-time.After(50 * time.Millisecond):
	}
}

// waitClosed drains ch until it is closed.
func waitClosed(t *testing.T, ch <-chan event.Event) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("subscription not closed before the timeout")
		}
	}
}

// wantErr fails unless errors.Is(err, want).
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got error %v, want %v", what, err, want)
	}
}

// lastSeq returns the seq of the last event of a session, 0 if none.
func lastSeq(t *testing.T, s store.Store, sessionID string) int64 {
	t.Helper()
	all := mustEvents(t, s, sessionID)
	if len(all) == 0 {
		return 0
	}
	return all[len(all)-1].Seq
}

// sortedSeqs returns the seqs of evs sorted.
func sortedSeqs(evs []event.Event) []int64 {
	out := seqs(evs)
	slices.Sort(out)
	return out
}

// ctx is shorthand for the test's context.
func ctx(t *testing.T) context.Context { return t.Context() }

// diffEvents is cmp.Diff for event lists, fast enough for thousands of
// events: it reports the length mismatch or the first differing event.
func diffEvents(want, got []event.Event) string {
	for i := range min(len(want), len(got)) {
		if !sameEvent(want[i], got[i]) {
			return fmt.Sprintf("event %d:\n%s", i, cmp.Diff(want[i], got[i]))
		}
	}
	if len(want) != len(got) {
		return fmt.Sprintf("%d events, want %d (seqs %v..., want %v...)",
			len(got), len(want), seqs(got[:min(len(got), 5)]), seqs(want[:min(len(want), 5)]))
	}
	return ""
}

func sameEvent(a, b event.Event) bool {
	return a.ID == b.ID && a.Seq == b.Seq && a.SessionID == b.SessionID && a.Time.Equal(b.Time) &&
		a.Schema == b.Schema && a.Type == b.Type && a.Source == b.Source &&
		a.NativeSessionID == b.NativeSessionID && a.TurnID == b.TurnID &&
		bytes.Equal(a.Data, b.Data) && bytes.Equal(a.Raw, b.Raw) &&
		(a.Data == nil) == (b.Data == nil) && (a.Raw == nil) == (b.Raw == nil)
}

package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/store"
)

// Two Store instances on one database stand for two daemons.

func newSession(id string) store.Session {
	return store.Session{ID: id, Agent: "mock", Status: store.StatusIdle}
}

func delta(n int) event.Event {
	return event.Event{
		Type: event.TypeItemDelta, Source: event.SourceAgent, TurnID: "turn_1",
		Data: json.RawMessage(fmt.Sprintf(`{"item_id":"item_1","field":"text","delta":"%d"}`, n)),
	}
}

func seqs(evs []event.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

// receive takes n events from ch, failing if it closes or stalls first.
func receive(t *testing.T, ch <-chan event.Event, n int) []event.Event {
	t.Helper()
	var out []event.Event
	deadline := time.After(60 * time.Second)
	for len(out) < n {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("subscription closed after %d of %d events", len(out), n)
			}
			out = append(out, e)
		case <-deadline:
			t.Fatalf("received %d of %d events before the timeout", len(out), n)
		}
	}
	return out
}

// pair opens two stores on a database of their own, whose DSN it returns.
func pair(t *testing.T) (a, b *Store, dsn string) {
	t.Helper()
	dsn = database(t, t.TempDir())
	a, b = open(t, dsn, Options{}), open(t, dsn, Options{})
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b, dsn
}

// TestCrossStoreStream appends through one store while a subscriber of the
// other streams: it gets every event once, in order, as stored, including
// those appended before it subscribed and a resume from a seq.
func TestCrossStoreStream(t *testing.T) {
	a, b, _ := pair(t)
	if err := a.CreateSession(t.Context(), newSession("ses_1")); err != nil {
		t.Fatal(err)
	}
	var appended []event.Event
	for i := range 5 {
		got, err := a.Append(t.Context(), "ses_1", delta(i))
		if err != nil {
			t.Fatal(err)
		}
		appended = append(appended, got...)
	}
	ch, err := b.Subscribe(t.Context(), "ses_1", 0)
	if err != nil {
		t.Fatalf("Subscribe through the other store: %v", err)
	}
	n := 300
	var wg sync.WaitGroup
	var mu sync.Mutex
	for g := range 3 {
		wg.Go(func() {
			for i := range n / 3 {
				got, err := a.Append(t.Context(), "ses_1", delta(g*1000+i))
				if err != nil {
					t.Errorf("Append: %v", err)
					return
				}
				mu.Lock()
				appended = append(appended, got...)
				mu.Unlock()
			}
		})
	}
	got := receive(t, ch, 5+n)
	wg.Wait()
	slices.SortFunc(appended, func(x, y event.Event) int { return int(x.Seq - y.Seq) })
	if !slices.Equal(seqs(got), seqs(appended)) {
		t.Fatalf("streamed seqs %v..., want %v...", seqs(got)[:10], seqs(appended)[:10])
	}
	for i := range got {
		if got[i].ID != appended[i].ID || string(got[i].Data) != string(appended[i].Data) || !got[i].Time.Equal(appended[i].Time) {
			t.Fatalf("seq %d: streamed %+v, appended %+v", got[i].Seq, got[i], appended[i])
		}
	}
	select {
	case e := <-ch:
		t.Fatalf("event seq %d after the last", e.Seq)
	case <-time.After(100 * time.Millisecond):
	}

	// Resume by seq through the other store.
	resumed, err := b.Subscribe(t.Context(), "ses_1", int64(len(got)-2))
	if err != nil {
		t.Fatal(err)
	}
	if r := receive(t, resumed, 2); r[0].Seq != int64(len(got)-1) || r[1].Seq != int64(len(got)) {
		t.Errorf("resumed at seqs %v", seqs(r))
	}

	// A delete through one store closes the other's subscriptions.
	if err := a.DeleteSession(t.Context(), "ses_1"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []<-chan event.Event{ch, resumed} {
		select {
		case _, ok := <-c:
			if ok {
				t.Error("event after delete")
			}
		case <-time.After(60 * time.Second):
			t.Fatal("subscription of the other store not closed by the delete")
		}
	}
}

// TestCrossStoreGapless appends to one session through both stores at once:
// the seqs are unique and gapless, and both stores' subscribers see the same
// log.
func TestCrossStoreGapless(t *testing.T) {
	a, b, _ := pair(t)
	if err := a.CreateSession(t.Context(), newSession("ses_1")); err != nil {
		t.Fatal(err)
	}
	subA, err := a.Subscribe(t.Context(), "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	subB, err := b.Subscribe(t.Context(), "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var all []int64
	var wg sync.WaitGroup
	calls := 100
	for _, s := range []*Store{a, b} {
		for g := range 4 {
			wg.Go(func() {
				for i := range calls {
					got, err := s.Append(t.Context(), "ses_1", delta(g), delta(i))
					if err != nil {
						t.Errorf("Append: %v", err)
						return
					}
					if got[1].Seq != got[0].Seq+1 {
						t.Errorf("one append got seqs %d and %d", got[0].Seq, got[1].Seq)
					}
					mu.Lock()
					all = append(all, seqs(got)...)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	total := 2 * 4 * calls * 2
	slices.Sort(all)
	for i, q := range all {
		if q != int64(i+1) {
			t.Fatalf("seqs not unique and gapless: position %d has %d", i, q)
		}
	}
	if len(all) != total {
		t.Fatalf("%d seqs, want %d", len(all), total)
	}
	stored, err := b.Events(t.Context(), "ses_1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan event.Event{"a": subA, "b": subB} {
		got := receive(t, ch, total)
		for i := range got {
			if got[i].ID != stored[i].ID || got[i].Seq != stored[i].Seq {
				t.Fatalf("subscriber of %s: event %d is seq %d %s, stored seq %d %s", name, i, got[i].Seq, got[i].ID, stored[i].Seq, stored[i].ID)
			}
		}
	}
}

// TestListenerReconnects kills the listening connection of a store from the
// server side: its subscriber still gets what the other store appends
// afterwards (and meanwhile), because the store listens again and re-reads.
func TestListenerReconnects(t *testing.T) {
	a, b, dsn := pair(t)
	if err := a.CreateSession(t.Context(), newSession("ses_1")); err != nil {
		t.Fatal(err)
	}
	ch, err := b.Subscribe(t.Context(), "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(t.Context(), "ses_1", delta(0)); err != nil {
		t.Fatal(err)
	}
	receive(t, ch, 1)

	// End every listening backend of the database but the caller's.
	c, err := connectDSN(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn(c)
	res, err := c.ExecParams(t.Context(), `SELECT count(pg_terminate_backend(pid))::int8 FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN%'`, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := getInt8(res.Rows[0][0]); n < 2 {
		t.Fatalf("terminated %d listening connections, want at least 2", n)
	}
	for i := range 20 {
		if _, err := a.Append(context.Background(), "ses_1", delta(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	got := receive(t, ch, 20)
	if got[0].Seq != 2 || got[19].Seq != 21 {
		t.Errorf("after the lost connection: seqs %v", seqs(got))
	}
}

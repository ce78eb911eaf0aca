package storetest

import (
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/store"
)

var lifecycleTests = []test{
	{"Reopen", testReopen},
	{"AcknowledgedSurviveClose", testAcknowledgedSurviveClose},
	{"Closed", testClosed},
}

func testReopen(t *testing.T, f Factory) {
	dir := t.TempDir()
	s := openAt(t, f, dir)
	mustCreate(t, s, "ses_1")
	mustCreate(t, s, "ses_2")
	mustAppend(t, s, "ses_1", 3)
	mustAppend(t, s, "ses_2", 1)
	if _, err := s.CreateRequest(ctx(t), permRequest("ses_1", "perm_1"), permRequested("perm_1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRequest(ctx(t), permRequest("ses_1", "perm_2"), permRequested("perm_2")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResolveRequest(ctx(t), "ses_1", "perm_1", permResolved("perm_1")); err != nil {
		t.Fatal(err)
	}
	sessions, err := s.ListSessions(ctx(t), store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	events := mustEvents(t, s, "ses_1")
	requests, err := s.ListRequests(ctx(t), "ses_1", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s = openAt(t, f, dir)
	gotSessions, err := s.ListSessions(ctx(t), store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sessions, gotSessions); diff != "" {
		t.Errorf("sessions after reopen (-before +after):\n%s", diff)
	}
	if diff := diffEvents(events, mustEvents(t, s, "ses_1")); diff != "" {
		t.Errorf("events after reopen (-before +after):\n%s", diff)
	}
	gotRequests, err := s.ListRequests(ctx(t), "ses_1", "")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(requests, gotRequests); diff != "" {
		t.Errorf("requests after reopen (-before +after):\n%s", diff)
	}

	// Seqs continue where they stopped; the CAS still holds.
	if got := mustAppend(t, s, "ses_1", 2); !cmp.Equal(seqs(got), []int64{7, 8}) {
		t.Errorf("ses_1 seqs after reopen %v, want [7 8]", seqs(got))
	}
	if got := mustAppend(t, s, "ses_2", 1); got[0].Seq != 2 {
		t.Errorf("ses_2 seq after reopen %d, want 2", got[0].Seq)
	}
	_, err = s.ResolveRequest(ctx(t), "ses_1", "perm_1", permResolved("perm_1"))
	wantErr(t, "ResolveRequest after reopen", err, store.ErrAlreadyResolved)
	if _, err := s.ResolveRequest(ctx(t), "ses_1", "perm_2", permResolved("perm_2")); err != nil {
		t.Errorf("ResolveRequest(pending) after reopen: %v", err)
	}
}

// testAcknowledgedSurviveClose closes the store under load: every append that
// was acknowledged is there after reopening, and the others failed with
// ErrClosed.
func testAcknowledgedSurviveClose(t *testing.T, f Factory) {
	dir := t.TempDir()
	s := openAt(t, f, dir)
	mustCreate(t, s, "ses_1")
	var mu sync.Mutex
	var acked []event.Event
	started := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				got, err := s.Append(ctx(t), "ses_1", ev(i))
				if err != nil {
					if !errors.Is(err, store.ErrClosed) {
						t.Errorf("Append while closing: %v, want ErrClosed", err)
					}
					return
				}
				mu.Lock()
				acked = append(acked, got...)
				if len(acked) >= 50 {
					once.Do(func() { close(started) })
				}
				mu.Unlock()
			}
		})
	}
	appenders := make(chan struct{})
	go func() { wg.Wait(); close(appenders) }()
	select {
	case <-started:
	case <-appenders:
		t.Fatal("appenders stopped before the store was closed")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	<-appenders

	s = openAt(t, f, dir)
	stored := mustEvents(t, s, "ses_1")
	if !cmp.Equal(seqs(stored), span(1, int64(len(stored)))) {
		t.Fatalf("stored seqs not gapless: %v", seqs(stored))
	}
	byID := map[string]event.Event{}
	for _, e := range stored {
		byID[e.ID] = e
	}
	for _, e := range acked {
		if diff := diffEvents([]event.Event{e}, []event.Event{byID[e.ID]}); diff != "" {
			t.Fatalf("acknowledged seq %d lost or changed (-acked +stored):\n%s", e.Seq, diff)
		}
	}
}

func testClosed(t *testing.T, f Factory) {
	s := open(t, f)
	mustCreate(t, s, "ses_1")
	mustAppend(t, s, "ses_1", 3)
	if _, err := s.CreateRequest(ctx(t), permRequest("ses_1", "perm_1"), permRequested("perm_1")); err != nil {
		t.Fatal(err)
	}
	live, err := s.Subscribe(ctx(t), "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, live, 4)
	stalled, err := s.Subscribe(ctx(t), "ses_1", 0) // never read
	if err != nil {
		t.Fatal(err)
	}

	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitClosed(t, live)
	waitClosed(t, stalled)

	c := ctx(t)
	calls := []struct {
		name string
		call func() error
	}{
		{"CreateSession", func() error { return s.CreateSession(c, newSession("ses_2")) }},
		{"GetSession", func() error { _, err := s.GetSession(c, "ses_1"); return err }},
		{"ListSessions", func() error { _, err := s.ListSessions(c, store.ListOptions{}); return err }},
		{"UpdateSession", func() error {
			_, err := s.UpdateSession(c, "ses_1", func(*store.Session) error { return nil })
			return err
		}},
		{"DeleteSession", func() error { return s.DeleteSession(c, "ses_1") }},
		{"Append", func() error { _, err := s.Append(c, "ses_1", ev(0)); return err }},
		{"Events", func() error { _, err := s.Events(c, "ses_1", 0, 0); return err }},
		{"Subscribe", func() error { _, err := s.Subscribe(c, "ses_1", 0); return err }},
		{"CreateRequest", func() error {
			_, err := s.CreateRequest(c, permRequest("ses_1", "perm_2"), permRequested("perm_2"))
			return err
		}},
		{"ResolveRequest", func() error {
			_, err := s.ResolveRequest(c, "ses_1", "perm_1", permResolved("perm_1"))
			return err
		}},
		{"GetRequest", func() error { _, err := s.GetRequest(c, "ses_1", "perm_1"); return err }},
		{"ListRequests", func() error { _, err := s.ListRequests(c, "ses_1", ""); return err }},
	}
	for _, tc := range calls {
		wantErr(t, tc.name+" after Close", tc.call(), store.ErrClosed)
	}
	if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}

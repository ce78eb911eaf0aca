package storetest

import (
	"context"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/store"
)

var subscribeTests = []test{
	{"CatchUpThenLive", testSubscribeCatchUp},
	{"From", testSubscribeFrom},
	{"Many", testSubscribeMany},
	{"SlowNeverLoses", testSubscribeSlow},
	{"StoredBeforeSeen", testSubscribeStoredBeforeSeen},
	{"CancelCloses", testSubscribeCancel},
	{"DeleteCloses", testSubscribeDelete},
	{"UnknownSession", testSubscribeUnknown},
}

func testSubscribeCatchUp(t *testing.T, f Factory) {
	s := open(t, f)
	mustCreate(t, s, "ses_1")
	stored := mustAppend(t, s, "ses_1", 5)
	ch, err := s.Subscribe(ctx(t), "ses_1", 0)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	if diff := cmp.Diff(stored, recv(t, ch, 5)); diff != "" {
		t.Errorf("catch-up (-stored +received):\n%s", diff)
	}
	quiet(t, ch)
	live := mustAppend(t, s, "ses_1", 3)
	if diff := cmp.Diff(live, recv(t, ch, 3)); diff != "" {
		t.Errorf("live (-appended +received):\n%s", diff)
	}
}

func testSubscribeFrom(t *testing.T, f Factory) {
	tests := []struct {
		name   string
		stored int   // events before subscribing
		after  int64 // subscribe after this seq
		live   int   // events appended after subscribing
		want   []int64
	}{
		{"zero", 3, 0, 2, span(1, 5)},
		{"middle", 10, 4, 2, span(5, 12)},
		{"end", 3, 3, 2, span(4, 5)},
		{"beyond end", 3, 7, 6, span(8, 9)},
		{"negative", 2, -1, 1, span(1, 3)},
		{"empty log", 0, 0, 3, span(1, 3)},
	}
	s := open(t, f)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := "ses_" + tc.name
			mustCreate(t, s, id)
			mustAppend(t, s, id, tc.stored)
			ch, err := s.Subscribe(ctx(t), id, tc.after)
			if err != nil {
				t.Fatalf("Subscribe: %v", err)
			}
			mustAppend(t, s, id, tc.live)
			got := recv(t, ch, len(tc.want))
			if !cmp.Equal(seqs(got), tc.want) {
				t.Errorf("received seqs %v, want %v", seqs(got), tc.want)
			}
			quiet(t, ch)
		})
	}
}

// testSubscribeMany runs several subscribers while several goroutines append:
// each subscriber sees the whole log, in order, once.
func testSubscribeMany(t *testing.T, f Factory) {
	s := open(t, f)
	mustCreate(t, s, "ses_1")
	mustAppend(t, s, "ses_1", 7)
	subscribers, appenders, calls := 8, 4, Scale(100)
	total := 7 + appenders*calls

	var wg sync.WaitGroup
	results := make([][]event.Event, subscribers)
	for i := range subscribers {
		ch, err := s.Subscribe(ctx(t), "ses_1", 0)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			var err error
			if results[i], err = tryRecv(ch, total); err != nil {
				t.Errorf("subscriber %d: %v", i, err)
			}
		})
	}
	for range appenders {
		wg.Go(func() {
			for i := range calls {
				if _, err := s.Append(ctx(t), "ses_1", ev(i)); err != nil {
					t.Errorf("Append: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	stored := mustEvents(t, s, "ses_1")
	for i, got := range results {
		if diff := diffEvents(stored, got); diff != "" {
			t.Errorf("subscriber %d (-stored +received):\n%s", i, diff)
		}
	}
}

// testSubscribeSlow lets a subscriber fall far behind (it reads nothing while
// thousands of events are appended), then checks it still gets every one.
func testSubscribeSlow(t *testing.T, f Factory) {
	s := open(t, f)
	mustCreate(t, s, "ses_1")
	slow, err := s.Subscribe(ctx(t), "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := s.Subscribe(ctx(t), "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	n := Scale(10000)
	var fastGot []event.Event
	var wg sync.WaitGroup
	wg.Go(func() {
		var err error
		if fastGot, err = tryRecv(fast, n); err != nil {
			t.Errorf("fast subscriber: %v", err)
		}
	})
	stored := mustAppend(t, s, "ses_1", n)
	wg.Wait() // the slow subscriber holds nobody up
	if diff := diffEvents(stored, fastGot); diff != "" {
		t.Errorf("fast subscriber (-stored +received):\n%s", diff)
	}
	if diff := diffEvents(stored, recv(t, slow, n)); diff != "" {
		t.Errorf("slow subscriber (-stored +received):\n%s", diff)
	}
}

// testSubscribeStoredBeforeSeen checks append-before-publish: every event a
// subscriber receives can already be read with Events.
func testSubscribeStoredBeforeSeen(t *testing.T, f Factory) {
	s := open(t, f)
	mustCreate(t, s, "ses_1")
	ch, err := s.Subscribe(ctx(t), "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	appenders, calls := 4, Scale(100)
	total := appenders * calls
	var wg sync.WaitGroup
	for range appenders {
		wg.Go(func() {
			for i := range calls {
				if _, err := s.Append(ctx(t), "ses_1", ev(i)); err != nil {
					t.Errorf("Append: %v", err)
					return
				}
			}
		})
	}
	// No t.Fatal while the appenders run.
	for range total {
		got, err := tryRecv(ch, 1)
		if err != nil {
			t.Error(err)
			break
		}
		e := got[0]
		stored, err := s.Events(ctx(t), "ses_1", e.Seq-1, 1)
		if err != nil {
			t.Errorf("Events: %v", err)
			break
		}
		if len(stored) != 1 {
			t.Errorf("seq %d was delivered but is not stored", e.Seq)
			break
		}
		if diff := diffEvents(stored, []event.Event{e}); diff != "" {
			t.Errorf("seq %d: delivered differs from stored (-stored +delivered):\n%s", e.Seq, diff)
			break
		}
	}
	wg.Wait()
}

func testSubscribeCancel(t *testing.T, f Factory) {
	s := open(t, f)
	mustCreate(t, s, "ses_1")
	mustAppend(t, s, "ses_1", 3)

	// One subscriber waiting for live events, one that is not reading
	// and has events pending: both channels close on cancel.
	waiting, cancelWaiting := context.WithCancel(ctx(t))
	chWaiting, err := s.Subscribe(waiting, "ses_1", 3)
	if err != nil {
		t.Fatal(err)
	}
	blocked, cancelBlocked := context.WithCancel(ctx(t))
	chBlocked, err := s.Subscribe(blocked, "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "ses_1", Scale(400))
	cancelWaiting()
	cancelBlocked()
	waitClosed(t, chWaiting)
	waitClosed(t, chBlocked)

	// Other subscriptions and the store carry on.
	ch, err := s.Subscribe(ctx(t), "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, ch, 3)
}

func testSubscribeDelete(t *testing.T, f Factory) {
	s := open(t, f)
	mustCreate(t, s, "ses_1")
	mustAppend(t, s, "ses_1", 2)
	ch, err := s.Subscribe(ctx(t), "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, ch, 2)
	if err := s.DeleteSession(ctx(t), "ses_1"); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, ch)
}

func testSubscribeUnknown(t *testing.T, f Factory) {
	s := open(t, f)
	_, err := s.Subscribe(ctx(t), "ses_missing", 0)
	wantErr(t, "Subscribe(unknown session)", err, store.ErrNotFound)
}

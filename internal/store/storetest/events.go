package storetest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/store"
)

var appendTests = []test{
	{"Envelope", testAppendEnvelope},
	{"GaplessPerSession", testAppendGapless},
	{"UnknownSession", testAppendUnknown},
	{"Concurrent", testAppendConcurrent},
}

var eventsTests = []test{
	{"Ranges", testEventsRanges},
	{"Empty", testEventsEmpty},
}

func testAppendEnvelope(t *testing.T, f Factory) {
	s := open(t, f)
	mustCreate(t, s, "ses_1")

	callerTime := time.Date(2024, 1, 2, 3, 4, 5, 6, time.FixedZone("X", 3600))
	in := []event.Event{
		{
			// Everything a producer sets, with JSON spelled unusually
			// to catch re-encoding.
			Type:            event.TypeItemCompleted,
			Source:          event.SourceAgent,
			NativeSessionID: "native-1",
			TurnID:          "turn_1",
			Data:            json.RawMessage(`{ "item" : {"id":"item_1","kind":"message","status":"completed"} }`),
			Raw:             json.RawMessage(`{"type":"assistant",  "n":1.50}`),
		},
		{Type: event.TypeTurnStarted, Source: event.SourceDaemon, ID: "evt_caller", Time: callerTime, Data: json.RawMessage(`{"turn_id":"turn_2"}`)},
		// Seq, SessionID and Schema are the store's to set.
		{Type: event.TypeNative, Source: event.SourceAgent, Seq: 99, SessionID: "ses_other", Schema: 42},
	}
	before := time.Now()
	got, err := s.Append(ctx(t), "ses_1", in...)
	after := time.Now()
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	if len(got) != len(in) {
		t.Fatalf("Append returned %d events, want %d", len(got), len(in))
	}
	ids := map[string]bool{}
	for i, e := range got {
		if e.Seq != int64(i+1) || e.SessionID != "ses_1" || e.Schema != event.SchemaVersion {
			t.Errorf("event %d: seq %d session %q schema %d; want %d, ses_1, %d", i, e.Seq, e.SessionID, e.Schema, i+1, event.SchemaVersion)
		}
		if e.ID == "" || ids[e.ID] {
			t.Errorf("event %d: ID %q empty or repeated", i, e.ID)
		}
		ids[e.ID] = true
		if e.Time.Location() != time.UTC {
			t.Errorf("event %d: time %v not in UTC", i, e.Time)
		}
		if e.Type != in[i].Type || e.Source != in[i].Source || e.NativeSessionID != in[i].NativeSessionID ||
			e.TurnID != in[i].TurnID || string(e.Data) != string(in[i].Data) || string(e.Raw) != string(in[i].Raw) {
			t.Errorf("event %d: producer fields changed:\n got %+v\nwant %+v", i, e, in[i])
		}
	}
	if got[1].ID != "evt_caller" || !got[1].Time.Equal(callerTime) {
		t.Errorf("caller-set ID/Time not kept: %q %v", got[1].ID, got[1].Time)
	}
	for _, i := range []int{0, 2} {
		// Clocks may differ between the test and a database server.
		if got[i].Time.Before(before.Add(-time.Minute)) || got[i].Time.After(after.Add(time.Minute)) {
			t.Errorf("event %d: assigned time %v, want about %v", i, got[i].Time, before)
		}
	}

	more, err := s.Append(ctx(t), "ses_1", ev(1), ev(2))
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(seqs(more), []int64{4, 5}) {
		t.Errorf("second Append: seqs %v, want [4 5]", seqs(more))
	}

	// Events returns exactly what Append returned.
	if diff := cmp.Diff(append(got, more...), mustEvents(t, s, "ses_1")); diff != "" {
		t.Errorf("Events differs from what Append returned (-appended +stored):\n%s", diff)
	}

	// Appending nothing is allowed and changes nothing.
	if none, err := s.Append(ctx(t), "ses_1"); err != nil || len(none) != 0 {
		t.Errorf("Append() = %v, %v; want nothing", none, err)
	}
	if n := lastSeq(t, s, "ses_1"); n != 5 {
		t.Errorf("last seq %d, want 5", n)
	}
}

func testAppendGapless(t *testing.T, f Factory) {
	s := open(t, f)
	mustCreate(t, s, "ses_a")
	mustCreate(t, s, "ses_b")
	var a, b []event.Event
	for i := range 5 {
		got, err := s.Append(ctx(t), "ses_a", evs(0, i+1)...)
		if err != nil {
			t.Fatal(err)
		}
		a = append(a, got...)
		got, err = s.Append(ctx(t), "ses_b", ev(i))
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, got...)
	}
	if !cmp.Equal(seqs(a), span(1, 15)) {
		t.Errorf("ses_a seqs %v, want 1..15", seqs(a))
	}
	if !cmp.Equal(seqs(b), span(1, 5)) {
		t.Errorf("ses_b seqs %v, want 1..5", seqs(b))
	}
	if diff := diffEvents(a, mustEvents(t, s, "ses_a")); diff != "" {
		t.Errorf("ses_a stored (-appended +stored):\n%s", diff)
	}
	if diff := diffEvents(b, mustEvents(t, s, "ses_b")); diff != "" {
		t.Errorf("ses_b stored (-appended +stored):\n%s", diff)
	}
}

func testAppendUnknown(t *testing.T, f Factory) {
	s := open(t, f)
	_, err := s.Append(ctx(t), "ses_missing", ev(0))
	wantErr(t, "Append(unknown session)", err, store.ErrNotFound)
	// A failed append leaves no trace when the session appears.
	mustCreate(t, s, "ses_missing")
	if got := mustAppend(t, s, "ses_missing", 1); got[0].Seq != 1 {
		t.Errorf("first seq %d, want 1", got[0].Seq)
	}
}

// testAppendConcurrent appends from many goroutines to a few sessions: every
// session's seqs are unique and gapless, and what each caller got back is
// what is stored.
func testAppendConcurrent(t *testing.T, f Factory) {
	s := open(t, f)
	sessions := []string{"ses_a", "ses_b", "ses_c"}
	for _, id := range sessions {
		mustCreate(t, s, id)
	}
	goroutines, calls := 16, Scale(60)
	var mu sync.Mutex
	appended := map[string][]event.Event{}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				id := sessions[(g+i)%len(sessions)]
				got, err := s.Append(ctx(t), id, evs(i, 1+i%2)...)
				if err != nil {
					t.Errorf("Append: %v", err)
					return
				}
				mu.Lock()
				appended[id] = append(appended[id], got...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, id := range sessions {
		got := sortedSeqs(appended[id])
		if !cmp.Equal(got, span(1, int64(len(got)))) {
			t.Errorf("%s: seqs not unique and gapless: %v", id, got)
			continue
		}
		stored := mustEvents(t, s, id)
		byID := map[string]event.Event{}
		for _, e := range appended[id] {
			byID[e.ID] = e
		}
		for _, e := range stored {
			if diff := diffEvents([]event.Event{byID[e.ID]}, []event.Event{e}); diff != "" {
				t.Errorf("%s seq %d: stored differs from appended (-appended +stored):\n%s", id, e.Seq, diff)
				break
			}
		}
		if len(stored) != len(got) {
			t.Errorf("%s: %d stored, %d appended", id, len(stored), len(got))
		}
	}
}

func testEventsRanges(t *testing.T, f Factory) {
	s := open(t, f)
	mustCreate(t, s, "ses_1")
	all := mustAppend(t, s, "ses_1", 10)
	tests := []struct {
		after int64
		limit int
		want  []int64
	}{
		{0, 0, span(1, 10)},
		{-5, 0, span(1, 10)},
		{0, 3, span(1, 3)},
		{4, 3, span(5, 7)},
		{8, 5, span(9, 10)},
		{0, 100, span(1, 10)},
		{9, 1, span(10, 10)},
		{10, 5, nil},
		{25, 0, nil},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("after=%d,limit=%d", tc.after, tc.limit), func(t *testing.T) {
			got, err := s.Events(ctx(t), "ses_1", tc.after, tc.limit)
			if err != nil {
				t.Fatalf("Events: %v", err)
			}
			want := pick(all, tc.want)
			if len(got) != len(want) {
				t.Fatalf("seqs %v, want %v", seqs(got), tc.want)
			}
			if len(want) > 0 {
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("Events (-want +got):\n%s", diff)
				}
			}
		})
	}
	_, err := s.Events(ctx(t), "ses_missing", 0, 0)
	wantErr(t, "Events(unknown session)", err, store.ErrNotFound)
}

func pick(all []event.Event, seqs []int64) []event.Event {
	var out []event.Event
	for _, q := range seqs {
		out = append(out, all[q-1])
	}
	return out
}

func testEventsEmpty(t *testing.T, f Factory) {
	s := open(t, f)
	mustCreate(t, s, "ses_1")
	got, err := s.Events(ctx(t), "ses_1", 0, 10)
	if err != nil || len(got) != 0 {
		t.Errorf("Events of an empty session = %v, %v; want none", got, err)
	}
}

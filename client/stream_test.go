package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/stacktest"
)

// fast makes reconnection quick enough for tests.
var fast = client.WithBackoff(time.Millisecond, 20*time.Millisecond)

// addSession creates an idle session of the mock agent and returns its id
// and the seq of its last event.
func addSession(t *testing.T, s *stacktest.Stack) (string, int64) {
	t.Helper()
	ses, err := s.Client.CreateSession(t.Context(), client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	last, err := s.Client.LastSeq(t.Context(), ses.ID)
	if err != nil {
		t.Fatal(err)
	}
	return ses.ID, last
}

// appendDeltas appends n item.delta events numbered from 0 to a session's
// log in the stack's store, where the engine appends what its agent emits;
// the API streams them like any other.
func appendDeltas(t *testing.T, s *stacktest.Stack, id string, n int) {
	t.Helper()
	evs := make([]event.Event, n)
	for i := range evs {
		evs[i] = event.New(event.SourceAgent, &event.ItemDelta{ItemID: "it", Field: event.DeltaText, Delta: fmt.Sprint(i)})
	}
	if _, err := s.Store.Append(context.Background(), id, evs...); err != nil {
		t.Error(err)
	}
}

// logOf returns a session's whole log from the store.
func logOf(t *testing.T, s *stacktest.Stack, id string) []event.Event {
	t.Helper()
	evs, err := s.Store.Events(t.Context(), id, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// collect reads a stream until it ends.
func collect(st *client.Stream) []event.Event {
	var out []event.Event
	for st.Next() {
		out = append(out, st.Event())
	}
	return out
}

func TestStreamSurvivesAFaultyServer(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			faults := &stacktest.Faults{Seed: seed, Cut: 0.04, Duplicate: 0.1, Skip: 0.05, Vary: true}
			stk := newStack(t, stacktest.Options{Faults: faults, API: httpapi.Config{Retry: time.Millisecond}})
			c := stk.Client
			id, base := addSession(t, stk)
			const total = 600
			appendDeltas(t, stk, id, total/2)
			// The rest arrives while the client reads, in small bursts.
			var wg sync.WaitGroup
			wg.Go(func() {
				for i := 0; i < total/2; i += 10 {
					appendDeltas(t, stk, id, 10)
					time.Sleep(time.Millisecond)
				}
			})
			var reconnects atomic.Int64
			st := c.Stream(t.Context(), id, 0, fast,
				client.Until(func(ev event.Event) bool { return ev.Seq == base+total }),
				client.OnReconnect(func(int, error, time.Duration) { reconnects.Add(1) }))
			got := collect(st)
			wg.Wait()
			if err := st.Err(); err != nil {
				t.Fatalf("stream error: %v", err)
			}
			if diff := cmp.Diff(logOf(t, stk, id), got, compactJSON); diff != "" {
				t.Fatalf("events differ from the log (-log +got):\n%s", diff)
			}
			if faults.Connections() < 2 || reconnects.Load() == 0 {
				t.Fatalf("the faults cut nothing: %d connections, %d reconnects", faults.Connections(), reconnects.Load())
			}
			t.Logf("%d connections", faults.Connections())
		})
	}
}

func TestStreamResumesFromAfter(t *testing.T) {
	t.Parallel()
	stk := newStack(t, stacktest.Options{})
	id, base := addSession(t, stk)
	appendDeltas(t, stk, id, 10)
	st := stk.Client.Stream(t.Context(), id, base+7, client.Until(func(ev event.Event) bool { return ev.Seq == base+10 }))
	got := collect(st)
	if st.Err() != nil || len(got) != 3 || got[0].Seq != base+8 || st.LastSeq() != base+10 {
		t.Fatalf("got %d events from %v, err %v", len(got), got, st.Err())
	}
	if st.Next() {
		t.Fatal("Next after the end returned true")
	}
}

func TestStreamFillsGaps(t *testing.T) {
	t.Parallel()
	// The stream leaves out the third and fourth delta; the page endpoint
	// is the real one.
	var base int64
	faults := &stacktest.Faults{SkipSeq: func(seq int64) bool { return seq == base+3 || seq == base+4 }}
	stk := newStack(t, stacktest.Options{Faults: faults})
	id, b := addSession(t, stk)
	base = b
	appendDeltas(t, stk, id, 6)
	st := stk.Client.Stream(t.Context(), id, 0, client.Until(func(ev event.Event) bool { return ev.Seq == base+6 }))
	got := collect(st)
	if diff := cmp.Diff(logOf(t, stk, id), got); diff != "" || st.Err() != nil {
		t.Fatalf("err %v; (-log +got):\n%s", st.Err(), diff)
	}
	if faults.Connections() != 1 {
		t.Fatalf("%d stream connections; the gap should be filled without reconnecting", faults.Connections())
	}
}

func TestStreamPermanentErrors(t *testing.T) {
	t.Parallel()
	stk := newStack(t, stacktest.Options{API: httpapi.Config{Token: "t"}, ClientOptions: []client.Option{client.WithToken("t")}})
	c := stk.Client
	st := c.Stream(t.Context(), "ses_missing", 0, fast)
	if st.Next() || !client.IsNotFound(st.Err()) {
		t.Fatalf("unknown session: err %v", st.Err())
	}
	bad, _ := client.New(stk.URL, client.WithToken("nope"))
	id, _ := addSession(t, stk)
	st = bad.Stream(t.Context(), id, 0, fast)
	if st.Next() || !client.IsUnauthorized(st.Err()) {
		t.Fatalf("bad token: err %v", st.Err())
	}

	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html>"))
	}))
	t.Cleanup(ts.Close)
	c2, _ := client.New(ts.URL)
	st = c2.Stream(t.Context(), "s", 0, fast)
	if st.Next() || st.Err() == nil || !strings.Contains(st.Err().Error(), "text/event-stream") {
		t.Fatalf("not SSE: err %v", st.Err())
	}

	ts2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "id: 1\nevent: turn.started\ndata: {not json\n\n")
	}))
	t.Cleanup(ts2.Close)
	c3, _ := client.New(ts2.URL)
	st = c3.Stream(t.Context(), "s", 0, fast)
	if st.Next() || st.Err() == nil || !strings.Contains(st.Err().Error(), "turn.started") {
		t.Fatalf("bad event: err %v", st.Err())
	}
}

func TestStreamRetriesTemporaryErrors(t *testing.T) {
	t.Parallel()
	// The first two stream requests meet a daemon shutting down and a
	// proxy's rate limit; the rest reach the real server.
	var calls atomic.Int64
	stk := newStack(t, stacktest.Options{Wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasSuffix(r.URL.Path, "/events/stream") {
				h.ServeHTTP(w, r)
				return
			}
			switch calls.Add(1) {
			case 1:
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, `{"type":"https://agentbox.dev/problems/shutting-down","title":"Service Unavailable","status":503}`)
			case 2:
				w.WriteHeader(http.StatusTooManyRequests)
			default:
				h.ServeHTTP(w, r)
			}
		})
	}})
	c := stk.Client
	id, base := addSession(t, stk)
	appendDeltas(t, stk, id, 3)
	var errs []error
	st := c.Stream(t.Context(), id, base, fast,
		client.OnReconnect(func(_ int, err error, _ time.Duration) { errs = append(errs, err) }),
		client.Until(func(ev event.Event) bool { return ev.Seq == base+3 }))
	if got := collect(st); len(got) != 3 || st.Err() != nil {
		t.Fatalf("got %d events, err %v", len(got), st.Err())
	}
	var ae429 *client.APIError
	if len(errs) != 2 || !client.IsShuttingDown(errs[0]) || !errors.As(errs[1], &ae429) || ae429.Status != http.StatusTooManyRequests {
		t.Fatalf("reconnect errors %v", errs)
	}

	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
	}))
	t.Cleanup(down.Close)
	c2, _ := client.New(down.URL)
	st = c2.Stream(t.Context(), id, 0, fast, client.WithMaxAttempts(3))
	var ae *client.APIError
	if st.Next() || !errors.As(st.Err(), &ae) || ae.Status != 502 || !strings.Contains(st.Err().Error(), "giving up after 3") {
		t.Fatalf("max attempts: err %v", st.Err())
	}
}

func TestStreamIdleTimeout(t *testing.T) {
	t.Parallel()
	// The first stream request meets a connection that stalls after the
	// headers; the rest reach the real server.
	var calls atomic.Int64
	stk := newStack(t, stacktest.Options{Wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/events/stream") && calls.Add(1) == 1 {
				w.Header().Set("Content-Type", "text/event-stream")
				w.(http.Flusher).Flush()
				<-r.Context().Done()
				return
			}
			h.ServeHTTP(w, r)
		})
	}})
	c := stk.Client
	id, base := addSession(t, stk)
	appendDeltas(t, stk, id, 1)
	var cause error
	st := c.Stream(t.Context(), id, base, fast, client.WithIdleTimeout(50*time.Millisecond),
		client.OnReconnect(func(_ int, err error, _ time.Duration) { cause = err }),
		client.Until(func(event.Event) bool { return true }))
	if got := collect(st); len(got) != 1 || st.Err() != nil {
		t.Fatalf("got %d events, err %v", len(got), st.Err())
	}
	if cause == nil || !strings.Contains(cause.Error(), "idle") {
		t.Fatalf("reconnect cause %v, want the idle timeout", cause)
	}
}

func TestStreamStopsOnContext(t *testing.T) {
	t.Parallel()
	stk := newStack(t, stacktest.Options{})
	c := stk.Client
	id, base := addSession(t, stk)
	ctx, cancel := context.WithCancel(t.Context())
	st := c.Stream(ctx, id, base)
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	if st.Next() {
		t.Fatal("an event from an idle session, after its last")
	}
	if !errors.Is(st.Err(), context.Canceled) || time.Since(start) > 5*time.Second {
		t.Fatalf("err %v after %v", st.Err(), time.Since(start))
	}
	// The backoff wait also ends with the context.
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }))
	t.Cleanup(ts.Close)
	c2, _ := client.New(ts.URL)
	ctx2, cancel2 := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel2()
	st = c2.Stream(ctx2, id, 0, client.WithBackoff(time.Hour, time.Hour))
	if st.Next() || !errors.Is(st.Err(), context.DeadlineExceeded) {
		t.Fatalf("err %v", st.Err())
	}
}

func TestStreamAll(t *testing.T) {
	t.Parallel()
	stk := newStack(t, stacktest.Options{})
	c := stk.Client
	id, _ := addSession(t, stk)
	appendDeltas(t, stk, id, 5)
	var seqs []int64
	for ev, err := range c.Stream(t.Context(), id, 0).All() {
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ev.Seq)
		if ev.Seq == 3 {
			break
		}
	}
	if !cmp.Equal(seqs, []int64{1, 2, 3}) {
		t.Fatalf("seqs %v", seqs)
	}
	var last error
	for _, err := range c.Stream(t.Context(), "ses_missing", 0).All() {
		last = err
	}
	if !client.IsNotFound(last) {
		t.Fatalf("last error %v", last)
	}
}

func TestWaitTurn(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := newStack(t, stacktest.Options{}).Client
	s, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}

	// fn's error ends the wait.
	turn, _ := c.Send(ctx, s.ID, "hello")
	boom := errors.New("boom")
	if _, err := c.WaitTurn(ctx, s.ID, turn.TurnID, 0, func(event.Event) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	if _, err := c.WaitTurn(ctx, s.ID, turn.TurnID, 0, nil); err != nil {
		t.Fatal(err)
	}

	// An interrupted turn completes as interrupted.
	after, _ := c.LastSeq(ctx, s.ID)
	turn, _ = c.Send(ctx, s.ID, hang)
	go func() { _, _ = c.Interrupt(ctx, s.ID) }()
	tc, err := c.WaitTurn(ctx, s.ID, turn.TurnID, after, nil)
	if err != nil || tc.StopReason != event.StopInterrupted {
		t.Fatalf("interrupted turn: %+v, %v", tc, err)
	}

	// A session that ends before the wait sees the turn complete ends the
	// wait: the engine completes the running turn (interrupted) before it
	// ends the session, so the wait starts after that turn.completed, as a
	// client resuming past it would.
	turn, _ = c.Send(ctx, s.ID, hang)
	if err := c.DeleteSession(ctx, s.ID, false); err != nil {
		t.Fatal(err)
	}
	if err := c.EventsAll(ctx, s.ID, after, func(ev event.Event) error {
		if ev.Type == event.TypeTurnCompleted {
			after = ev.Seq
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitTurn(ctx, s.ID, turn.TurnID, after, nil); !errors.Is(err, client.ErrSessionEnded) || !strings.Contains(err.Error(), "terminated") {
		t.Fatalf("err %v, want ErrSessionEnded", err)
	}
}

// compactJSON compares raw JSON ignoring insignificant whitespace: Faults
// may send indented JSON over several data lines.
var compactJSON = cmp.Transformer("compact", func(m json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, m); err != nil {
		return string(m)
	}
	return b.String()
})

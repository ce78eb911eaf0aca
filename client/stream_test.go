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
	"github.com/agentbox/agentbox/internal/cli/fakeapi"
)

// fast makes reconnection quick enough for tests.
var fast = client.WithBackoff(time.Millisecond, 20*time.Millisecond)

// deltas returns n item.delta payloads numbered from 0.
func deltas(n int) []event.Payload {
	out := make([]event.Payload, n)
	for i := range out {
		out[i] = &event.ItemDelta{ItemID: "it", Field: event.DeltaText, Delta: fmt.Sprint(i)}
	}
	return out
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
			srv, c := newPair(t, fakeapi.Config{
				Faults: fakeapi.Faults{Seed: seed, Drop: 0.04, Duplicate: 0.1, Skip: 0.05, Vary: true},
				Retry:  time.Millisecond,
			})
			id := srv.AddSession()
			const total = 600
			srv.Append(id, deltas(total/2)...)
			// The rest arrives while the client reads, in small bursts.
			var wg sync.WaitGroup
			wg.Go(func() {
				for i := 0; i < total/2; i += 10 {
					srv.Append(id, deltas(10)...)
					time.Sleep(time.Millisecond)
				}
			})
			var reconnects atomic.Int64
			st := c.Stream(t.Context(), id, 0, fast,
				client.Until(func(ev event.Event) bool { return ev.Seq == total }),
				client.OnReconnect(func(int, error, time.Duration) { reconnects.Add(1) }))
			got := collect(st)
			wg.Wait()
			if err := st.Err(); err != nil {
				t.Fatalf("stream error: %v", err)
			}
			if diff := cmp.Diff(srv.Events(id), got, compactJSON); diff != "" {
				t.Fatalf("events differ from the log (-log +got):\n%s", diff)
			}
			if srv.StreamConnections() < 2 || reconnects.Load() == 0 {
				t.Fatalf("the fake dropped nothing: %d connections, %d reconnects", srv.StreamConnections(), reconnects.Load())
			}
			t.Logf("%d connections", srv.StreamConnections())
		})
	}
}

func TestStreamResumesFromAfter(t *testing.T) {
	t.Parallel()
	srv, c := newPair(t, fakeapi.Config{})
	id := srv.AddSession()
	srv.Append(id, deltas(10)...)
	st := c.Stream(t.Context(), id, 7, client.Until(func(ev event.Event) bool { return ev.Seq == 10 }))
	got := collect(st)
	if st.Err() != nil || len(got) != 3 || got[0].Seq != 8 || st.LastSeq() != 10 {
		t.Fatalf("got %d events from %v, err %v", len(got), got, st.Err())
	}
	if st.Next() {
		t.Fatal("Next after the end returned true")
	}
}

func TestStreamFillsGaps(t *testing.T) {
	t.Parallel()
	srv := fakeapi.New(t, fakeapi.Config{})
	id := srv.AddSession()
	srv.Append(id, deltas(6)...)
	var streams atomic.Int64
	// The stream endpoint leaves out seq 3 and 4; the page endpoint is the
	// fake's.
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/stream") {
			srv.Config.Handler.ServeHTTP(w, r)
			return
		}
		streams.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range srv.Events(id) {
			if ev.Seq == 3 || ev.Seq == 4 {
				continue
			}
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, mustJSON(t, ev))
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(ts.Close)
	c, err := client.New(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	st := c.Stream(t.Context(), id, 0, client.Until(func(ev event.Event) bool { return ev.Seq == 6 }))
	got := collect(st)
	if diff := cmp.Diff(srv.Events(id), got); diff != "" || st.Err() != nil {
		t.Fatalf("err %v; (-log +got):\n%s", st.Err(), diff)
	}
	if streams.Load() != 1 {
		t.Fatalf("%d stream connections; the gap should be filled without reconnecting", streams.Load())
	}
}

func TestStreamPermanentErrors(t *testing.T) {
	t.Parallel()
	srv, c := newPair(t, fakeapi.Config{Token: "t"}, client.WithToken("t"))
	st := c.Stream(t.Context(), "ses_missing", 0, fast)
	if st.Next() || !client.IsNotFound(st.Err()) {
		t.Fatalf("unknown session: err %v", st.Err())
	}
	bad, _ := client.New(srv.URL, client.WithToken("nope"))
	st = bad.Stream(t.Context(), srv.AddSession(), 0, fast)
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
	srv := fakeapi.New(t, fakeapi.Config{})
	id := srv.AddSession()
	srv.Append(id, deltas(3)...)
	var calls atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"type":"https://agentbox.dev/problems/shutting-down","title":"Service Unavailable","status":503}`)
		case 2:
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			srv.Config.Handler.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(ts.Close)
	c, _ := client.New(ts.URL)
	var errs []error
	st := c.Stream(t.Context(), id, 0, fast,
		client.OnReconnect(func(_ int, err error, _ time.Duration) { errs = append(errs, err) }),
		client.Until(func(ev event.Event) bool { return ev.Seq == 3 }))
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
	srv := fakeapi.New(t, fakeapi.Config{})
	id := srv.AddSession()
	srv.Append(id, deltas(1)...)
	var calls atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 { // a connection that stalls after the headers
			w.Header().Set("Content-Type", "text/event-stream")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		srv.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	c, _ := client.New(ts.URL)
	var cause error
	st := c.Stream(t.Context(), id, 0, fast, client.WithIdleTimeout(50*time.Millisecond),
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
	srv, c := newPair(t, fakeapi.Config{})
	id := srv.AddSession()
	ctx, cancel := context.WithCancel(t.Context())
	st := c.Stream(ctx, id, 0)
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	if st.Next() {
		t.Fatal("an event from an empty session")
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
	srv, c := newPair(t, fakeapi.Config{})
	id := srv.AddSession()
	srv.Append(id, deltas(5)...)
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
	release := make(chan struct{})
	script := func(tn *fakeapi.Turn) {
		if tn.Text == "hang" {
			select {
			case <-release:
			case <-tn.Context().Done():
			}
			return
		}
		fakeapi.Echo(tn)
	}
	_, c := newPair(t, fakeapi.Config{Script: script})
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
	turn, _ = c.Send(ctx, s.ID, "hang")
	go func() { _, _ = c.Interrupt(ctx, s.ID) }()
	tc, err := c.WaitTurn(ctx, s.ID, turn.TurnID, after, nil)
	if err != nil || tc.StopReason != event.StopInterrupted {
		t.Fatalf("interrupted turn: %+v, %v", tc, err)
	}

	// A session that ends first ends the wait.
	after, _ = c.LastSeq(ctx, s.ID)
	turn, _ = c.Send(ctx, s.ID, "hang")
	if err := c.DeleteSession(ctx, s.ID, false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitTurn(ctx, s.ID, turn.TurnID, after, nil); !errors.Is(err, client.ErrSessionEnded) || !strings.Contains(err.Error(), "terminated") {
		t.Fatalf("err %v, want ErrSessionEnded", err)
	}
	close(release)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// compactJSON compares raw JSON ignoring insignificant whitespace: the fake
// may send indented JSON over several data lines.
var compactJSON = cmp.Transformer("compact", func(m json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, m); err != nil {
		return string(m)
	}
	return b.String()
})

package opencode

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

// emitHost is an agent.Host that only takes events.
type emitHost struct{ agent.Host }

func (emitHost) Emit(context.Context, ...event.Event) error { return nil }

// TestLateIdleDoesNotEndNextTurn: a turn that gave up on a failing model
// ends InterruptTimeout after its abort even when OpenCode has not yet said
// the session is idle. That idle, arriving during the next turn, must not
// end it: the next Prompt waits for it before posting. (Seen in the
// conformance suite's upstream_error under load: the turn after the error
// ended at once, with no answer.)
func TestLateIdleDoesNotEndNextTurn(t *testing.T) {
	var (
		prompts atomic.Int32
		s       *session
	)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/session/ses/prompt_async" {
			if prompts.Add(1) == 1 {
				// Turn 1: the model keeps failing. The retry is sent once
				// the prompt is posted, never before Prompt drains the
				// signals of earlier turns (a retry sent earlier is
				// drained as stale, and turn 1 never gives up).
				s.retry <- Retry{Attempt: 2, Message: "fakellm: internal error"}
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(api.Close)
	// InterruptTimeout: long beside the steps below, so a loaded machine
	// does not turn the order of events around.
	const wait = 2 * time.Second
	s = &session{
		a:     &adapter{opts: Options{MaxRetries: 1, InterruptTimeout: wait}},
		srv:   &server{url: api.URL, http: api.Client()},
		host:  emitHost{},
		ctx:   t.Context(),
		id:    "ses",
		m:     NewMapper("", t.TempDir()),
		idle:  make(chan struct{}, 1),
		retry: make(chan Retry, 16),
		done:  make(chan struct{}),
	}

	// Turn 1: the model keeps failing; OpenCode's idle after the abort
	// comes late, after the turn has given up waiting for it.
	first := make(chan agent.Result, 1)
	go func() {
		r, _ := s.Prompt(t.Context(), agent.Input{TurnID: "t1"})
		first <- r
	}()
	select {
	case res := <-first:
		if res.StopReason != event.StopError {
			t.Fatalf("turn 1: stop reason %s, want error", res.StopReason)
		}
	case <-time.After(5 * wait):
		t.Fatal("turn 1 did not give up on the failing model")
	}

	// Turn 2 starts; turn 1's idle arrives meanwhile, then turn 2's own.
	late := make(chan struct{})
	go func() {
		time.Sleep(wait / 10)
		s.idle <- struct{}{} // turn 1's, late
		close(late)
	}()
	ended := make(chan agent.Result, 1)
	go func() {
		r, _ := s.Prompt(t.Context(), agent.Input{TurnID: "t2"})
		ended <- r
	}()
	<-late
	for deadline := time.Now().Add(10 * time.Second); prompts.Load() < 2; {
		select {
		case r := <-ended:
			t.Fatalf("turn 2 ended on turn 1's idle: %+v", r)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d prompts posted, want 2", prompts.Load())
		}
	}
	select { // turn 2 is posted: only its own idle may end it
	case r := <-ended:
		t.Fatalf("turn 2 ended on turn 1's idle: %+v", r)
	case <-time.After(wait / 10):
	}
	s.idle <- struct{}{} // turn 2's
	select {
	case r := <-ended:
		if r.StopReason != event.StopEndTurn {
			t.Fatalf("turn 2: stop reason %s, want end_turn", r.StopReason)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("turn 2 did not end on its own idle")
	}
}

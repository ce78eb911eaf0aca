package daemon

import (
	"context"
	"net/http"
	"testing"
)

// TestSettled: the start's background work begins once a connection is
// idle after a request, hijacked or closed (a first answer), not on a
// connection that is only new or active; and it is not begun once the
// daemon shuts down.
func TestSettled(t *testing.T) {
	for _, tc := range []struct {
		name     string
		states   []http.ConnState
		shutdown bool
		answered bool // the first answer is recorded
		want     bool // settled's result
	}{
		{"idle after a request", []http.ConnState{http.StateNew, http.StateActive, http.StateIdle}, false, true, true},
		{"hijacked", []http.ConnState{http.StateNew, http.StateActive, http.StateHijacked}, false, true, true},
		{"closed", []http.ConnState{http.StateNew, http.StateClosed}, false, true, true},
		{"active only: waits for its bound", []http.ConnState{http.StateNew, http.StateActive}, false, false, true},
		{"shutting down", []http.ConnState{http.StateNew, http.StateActive}, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Daemon{answered: make(chan struct{})}
			var cancel context.CancelFunc
			d.handlerCtx, cancel = context.WithCancel(t.Context())
			defer cancel()
			for _, s := range tc.states {
				d.connState(nil, s)
			}
			select {
			case <-d.answered:
				if !tc.answered {
					t.Fatalf("states %v: recorded as a first answer", tc.states)
				}
			default:
				if tc.answered {
					t.Fatalf("states %v: not recorded as a first answer", tc.states)
				}
			}
			if tc.shutdown {
				cancel()
			}
			if got := d.settled(); got != tc.want {
				t.Errorf("settled() = %v, want %v", got, tc.want)
			}
		})
	}
}

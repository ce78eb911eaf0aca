package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/procrt"
)

// TestInnerEventBound: the relay's bound of one inner event is the one of
// an agent's line on this host, one constant for both.
func TestInnerEventBound(t *testing.T) {
	if MaxInnerEvent != agent.MaxEventBytes || procrt.DefaultMaxLine != agent.MaxEventBytes {
		t.Fatalf("relay event bound %d, local runtime line bound %d: want both agent.MaxEventBytes (%d)",
			MaxInnerEvent, procrt.DefaultMaxLine, agent.MaxEventBytes)
	}
}

// encodedEvent returns an inner event of seq whose JSON encoding is
// exactly size bytes.
func encodedEvent(t *testing.T, seq int64, size int) []byte {
	t.Helper()
	ev := event.Event{ID: fmt.Sprintf("evt_%d", seq), Seq: seq, SessionID: "ses_inner", Type: event.TypeItemDelta,
		Source: event.SourceAgent, Data: json.RawMessage(`{"item_id":"i","delta":{"text":""}}`)}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	pad := size - len(b)
	if pad < 0 {
		t.Fatalf("an event cannot be as small as %d bytes", size)
	}
	ev.Data = json.RawMessage(`{"item_id":"i","delta":{"text":"` + strings.Repeat("x", pad) + `"}}`)
	if b, err = json.Marshal(ev); err != nil || len(b) != size {
		t.Fatalf("padded event of %d bytes (%v), want %d", len(b), err, size)
	}
	return b
}

// TestInnerBounds: everything the relay reads from an inner daemon is
// bounded: an event of the stream (MaxInnerEvent), a page of events read
// to fill a gap, any other answer (MaxInnerAnswer) and an error answer
// (MaxInnerProblem). The inner daemon is an httptest server answering as
// a hostile one would; the client is the one the relay makes.
func TestInnerBounds(t *testing.T) {
	tests := []struct {
		name  string
		serve http.HandlerFunc
		// run reads from the inner daemon as the relay does and returns
		// what it got or the error.
		run   func(ctx context.Context, c *client.Client) (any, error)
		check func(t *testing.T, got any, err error)
	}{{
		name: "stream event over the bound",
		serve: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "id: 1\nevent: item.delta\ndata: %s\n\n", encodedEvent(t, 1, MaxInnerEvent+1))
		},
		run:   streamOne,
		check: tooLarge,
	}, {
		name: "stream event at the bound",
		serve: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "id: 1\nevent: item.delta\ndata: %s\n\n", encodedEvent(t, 1, MaxInnerEvent))
		},
		run: streamOne,
		check: func(t *testing.T, got any, err error) {
			if ev, ok := got.(event.Event); err != nil || !ok || ev.Seq != 1 {
				t.Fatalf("an event of MaxInnerEvent bytes: %v, %v; want it delivered", err, ok)
			}
		},
	}, {
		name: "backfilled page over the bound",
		serve: func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/stream") {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, "id: 3\nevent: item.delta\ndata: %s\n\n", encodedEvent(t, 3, 300))
				return
			}
			if got := r.URL.Query().Get("limit"); got != "1" {
				t.Errorf("the backfill asks for pages of %s events, want 1 (MaxInnerAnswer/MaxInnerEvent)", got)
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"events":[%s],"has_more":true,"next_after":1}%s`, encodedEvent(t, 1, 300),
				strings.Repeat(" ", MaxInnerAnswer+MaxInnerEvent))
		},
		run:   streamOne,
		check: tooLarge,
	}, {
		name: "answer over the bound",
		serve: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"ses_inner","status":"idle","metadata":{"pad":"%s"}}`, strings.Repeat("x", MaxInnerAnswer))
		},
		run: func(ctx context.Context, c *client.Client) (any, error) {
			return c.GetSession(ctx, "ses_inner")
		},
		check: tooLarge,
	}, {
		name: "answer within the bound",
		serve: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"ses_inner","status":"idle","metadata":{"pad":"%s"}}`, strings.Repeat("x", MaxInnerAnswer/2))
		},
		run: func(ctx context.Context, c *client.Client) (any, error) {
			return c.GetSession(ctx, "ses_inner")
		},
		check: func(t *testing.T, got any, err error) {
			if s, ok := got.(client.Session); err != nil || !ok || s.ID != "ses_inner" {
				t.Fatalf("GetSession = %v, %v", got, err)
			}
		},
	}, {
		name: "problem over the bound",
		serve: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			b, _ := json.Marshal(map[string]any{"type": client.ProblemBusy, "status": 409, "detail": strings.Repeat("d", 2*MaxInnerProblem)})
			_, _ = w.Write(b)
		},
		run: func(ctx context.Context, c *client.Client) (any, error) {
			return c.SendMessage(ctx, "ses_inner", client.SendMessage{Text: "hi"})
		},
		check: func(t *testing.T, _ any, err error) {
			var ae *client.APIError
			if !errors.As(err, &ae) || ae.Status != http.StatusConflict {
				t.Fatalf("SendMessage: %v, want a 409 APIError", err)
			}
			if len(ae.Detail) > MaxInnerProblem || len(err.Error()) > MaxInnerProblem+1024 {
				t.Fatalf("a problem of %d bytes became a detail of %d bytes, an error of %d: want at most MaxInnerProblem (%d)",
					2*MaxInnerProblem, len(ae.Detail), len(err.Error()), MaxInnerProblem)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.serve)
			t.Cleanup(srv.Close)
			c, err := innerClient(srv.URL, "token")
			if err != nil {
				t.Fatal(err)
			}
			got, err := tt.run(t.Context(), c)
			tt.check(t, got, err)
		})
	}
}

// streamOne reads the first event of the inner session's stream as the
// pump does.
func streamOne(ctx context.Context, c *client.Client) (any, error) {
	st := c.Stream(ctx, "ses_inner", 0, client.WithMaxAttempts(1))
	defer func() { _ = st.Close() }()
	if st.Next() {
		return st.Event(), nil
	}
	return nil, st.Err()
}

func tooLarge(t *testing.T, got any, err error) {
	t.Helper()
	if !errors.Is(err, client.ErrTooLarge) {
		t.Fatalf("got %T, %v; want an error wrapping client.ErrTooLarge", got, err)
	}
}

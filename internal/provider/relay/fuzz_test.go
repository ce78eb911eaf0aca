package relay

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

// FuzzHandle: whatever event the inner daemon sends (any type, source,
// seq and data), the relay does not panic; a forwarded one reaches the
// host with its data unchanged and its inner seq; an end is an error
// unless it says completed, and the inner daemon's idle stop is none; the turns' results and the requests being
// asked stay within their bounds.
func FuzzHandle(f *testing.F) {
	f.Add("item.delta", "agent", int64(7), "turn_1", []byte(`{"item_id":"i","delta":{"text":"x"}}`))
	f.Add("turn.completed", "daemon", int64(8), "turn_1", []byte(`{"turn_id":"turn_1","stop_reason":"end_turn"}`))
	f.Add("turn.completed", "daemon", int64(9), "", []byte(`{"turn_id":7}`))
	f.Add("permission.requested", "daemon", int64(10), "turn_1", []byte(`{"id":"perm_1","tool":"bash"}`))
	f.Add("question.requested", "daemon", int64(11), "turn_1", []byte(`{"id":"q_1","question":"?"}`))
	f.Add("session.ended", "daemon", int64(12), "", []byte(`{"reason":"completed","message":"m"}`))
	f.Add("session.ended", "daemon", int64(13), "", []byte(`{"reason":"interrupted"}`))
	f.Add("session.ended", "daemon", int64(14), "", []byte(`{"reason":"idle"}`))
	f.Add("session.ended", "daemon", int64(-1), "", []byte(`null`))
	f.Add("item.started", "daemon", int64(1), "", []byte(`{`))
	f.Add("", "", int64(0), "", []byte(nil))
	f.Fuzz(func(t *testing.T, typ, source string, seq int64, turnID string, data []byte) {
		h := &recordingHost{}
		s := fuzzSession(t, h)
		ev := event.Event{Type: event.Type(typ), Source: event.Source(source), Seq: seq, TurnID: turnID, Data: data}
		var ended *event.SessionEnded
		for range maxUnclaimed + maxAsking + 2 { // the same event again and again, as a hostile daemon may
			ended = s.handle(t.Context(), ev)
		}
		s.wg.Wait()
		switch Classify(ev) {
		case Forward:
			if len(h.emitted) == 0 {
				t.Fatalf("a forwarded %q event did not reach the host", typ)
			}
			out := h.emitted[0]
			if string(out.Data) != string(data) || out.Type != ev.Type || out.Source != ev.Source {
				t.Fatalf("forwarded as %s %s %q, want %s %s %q", out.Type, out.Source, out.Data, typ, source, data)
			}
			if got, ok := InnerSeq(out.Raw); (seq > 0) != ok || (ok && got != seq) {
				t.Fatalf("the host's copy names inner seq %d (%v), want %d", got, ok, seq)
			}
		case End:
			var e event.SessionEnded
			if json.Unmarshal(data, &e) == nil && e.Reason == event.EndIdle {
				if ended != nil {
					t.Fatalf("the inner daemon's idle stop ended the session: %+v", ended)
				}
				break
			}
			if ended == nil || (ended.Reason != event.EndCompleted && ended.Reason != event.EndError) ||
				!strings.HasPrefix(ended.Message, "the session in the sandbox ended: ") {
				t.Fatalf("the inner session's end became %+v", ended)
			}
		default:
			if len(h.emitted) != 0 || ended != nil {
				t.Fatalf("a %q event was forwarded (%d) or ended the session (%v)", typ, len(h.emitted), ended)
			}
		}
		if len(s.results) > maxUnclaimed || h.asked > maxUnclaimed+maxAsking+2 {
			t.Fatalf("%d unclaimed results, %d requests asked", len(s.results), h.asked)
		}
	})
}

// fuzzSession is a relay session handing events to h, with no inner
// daemon behind it (handle reaches it only to answer a request, which h
// refuses).
func fuzzSession(t *testing.T, h agent.Host) *session {
	r := newRelay(t, make([]byte, 32))
	return &session{a: &adapter{r: r}, host: h, hostID: "ses_host", done: make(chan struct{}),
		results: map[string]agent.Result{}, waiters: map[string]chan agent.Result{}, asking: make(chan struct{}, maxAsking)}
}

// recordingHost records what the relay hands the host; it refuses
// requests (the session is ending), so nothing is forwarded back.
type recordingHost struct {
	mu      sync.Mutex
	emitted []event.Event
	asked   int
}

func (h *recordingHost) Emit(_ context.Context, evs ...event.Event) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.emitted = append(h.emitted, evs...)
	return nil
}

func (h *recordingHost) RequestPermission(context.Context, agent.PermissionRequest) (agent.PermissionAnswer, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.asked++
	return agent.PermissionAnswer{}, errors.New("the session ended")
}

func (h *recordingHost) AskQuestion(context.Context, agent.Question) (agent.Answer, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.asked++
	return agent.Answer{}, errors.New("the session ended")
}

func (*recordingHost) SetNativeSessionID(context.Context, string) error { return nil }

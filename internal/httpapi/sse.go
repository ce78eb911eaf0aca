package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/agentbox/agentbox/event"
)

type streamInput struct {
	ID          string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	LastEventID string `header:"Last-Event-ID" maxLength:"32" doc:"Resume after this seq: the id of the last event received. Sent by EventSource clients on reconnect; wins over after."`
	After       string `query:"after" maxLength:"32" doc:"Resume after this seq (a decimal integer, 0 or more) when there is no Last-Event-ID. Default 0: from the start."`
	AccessToken string `query:"access_token" doc:"The bearer token, for clients that cannot set an Authorization header (EventSource). Accepted on this route only; prefer the header, since URLs end up in logs."`

	from int64
}

// Resolve parses the resume point; the header wins over the query.
func (in *streamInput) Resolve(huma.Context) []error {
	loc, v := "query.after", in.After
	if in.LastEventID != "" {
		loc, v = "header.Last-Event-ID", in.LastEventID
	}
	if v == "" {
		return nil
	}
	n, err := parseSeq(v)
	if err != nil {
		return []error{&huma.ErrorDetail{Location: loc, Message: err.Error(), Value: v}}
	}
	in.from = n
	return nil
}

var (
	errSeqSyntax = errors.New("expected a decimal integer, 0 or more")
	errSeqRange  = errors.New("seq out of range")
)

// parseSeq parses an event seq as clients send it back: ASCII digits only
// (no sign, no spaces), at most int64.
func parseSeq(s string) (int64, error) {
	if s == "" || len(s) > 32 {
		return 0, errSeqSyntax
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errSeqSyntax
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errSeqRange
	}
	return n, nil
}

func (s *server) registerStream(api huma.API) {
	reg := api.OpenAPI().Components.Schemas
	eventRef := reg.Schema(reflect.TypeFor[event.Event](), true, "Event")
	types := make([]any, len(event.Types))
	for i, t := range event.Types {
		types[i] = string(t)
	}
	op := huma.Operation{
		OperationID: "streamEvents", Method: http.MethodGet, Path: "/v1/sessions/{id}/events/stream", Tags: []string{"events"},
		Summary: "Follow a session's events (SSE)",
		Description: "A Server-Sent Events stream of the session's events: first those after the resume point, " +
			"then live ones as they happen, without gaps or repeats. Each event is sent as\n\n" +
			"    id: <seq>\n    event: <type>\n    data: <the event as JSON, on one line>\n\n" +
			"The stream starts with a `retry:` hint and carries `: ping` comment lines while idle. " +
			"It stays open (also after the session ends) until the client disconnects; to resume, reconnect " +
			"with Last-Event-ID (EventSource does this by itself) or ?after= set to the last seq received.",
		Errors: errs(http.StatusNotFound),
		Responses: map[string]*huma.Response{
			"200": {
				Description: "The event stream.",
				Headers: map[string]*huma.Header{
					"Cache-Control":     {Schema: &huma.Schema{Type: huma.TypeString, Examples: []any{"no-cache"}}},
					"X-Accel-Buffering": {Schema: &huma.Schema{Type: huma.TypeString, Examples: []any{"no"}}},
				},
				Content: map[string]*huma.MediaType{
					"text/event-stream": {Schema: &huma.Schema{
						Title:       "Server-Sent Events",
						Description: "The stream as a sequence of messages, each serialized as UTF-8 text per the SSE specification.",
						Type:        huma.TypeArray,
						Items: &huma.Schema{
							Type: huma.TypeObject,
							Properties: map[string]*huma.Schema{
								"id":    {Type: huma.TypeInteger, Format: "int64", Description: "The event's seq."},
								"event": {Type: huma.TypeString, Enum: types, Description: "The event's type."},
								"data":  eventRef,
							},
							Required: []string{"id", "event", "data"},
						},
					}},
				},
			},
		},
	}
	huma.Register(api, op, s.streamEvents)
}

func (s *server) streamEvents(ctx context.Context, in *streamInput) (*huma.StreamResponse, error) {
	// The subscription lives as long as the stream body below runs.
	sctx, cancel := context.WithCancel(ctx)
	ch, err := s.eng.Subscribe(sctx, in.ID, in.from)
	if err != nil {
		cancel()
		return nil, s.fail(ctx, err)
	}
	return &huma.StreamResponse{Body: func(hctx huma.Context) {
		defer cancel()
		_, w := humago.Unwrap(hctx)
		s.stream(sctx, w, ch, in.from)
	}}, nil
}

// stream writes events from ch until ctx ends (the client went away), ch
// closes or a write fails. last is the resume point: events at or below it
// are never sent, so a misbehaving source cannot make a client see an event
// twice.
func (s *server) stream(ctx context.Context, w http.ResponseWriter, ch <-chan event.Event, last int64) {
	rc := http.NewResponseController(w)
	// Leave no deadline behind for a later request on this connection.
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	send := func(b []byte) bool {
		if err := rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return false
		}
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}

	if !send([]byte("retry: " + strconv.FormatInt(s.cfg.Retry.Milliseconds(), 10) + "\n\n")) {
		return
	}
	ping := time.NewTicker(s.cfg.Heartbeat)
	defer ping.Stop()
	var buf bytes.Buffer
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			if !send([]byte(": ping\n\n")) {
				return
			}
		case ev, ok := <-ch:
			if !ok {
				return
			}
			if ev.Seq <= last {
				continue
			}
			buf.Reset()
			if err := writeSSE(&buf, ev); err != nil {
				logFor(ctx).ErrorContext(ctx, "cannot encode event; sending it without data",
					"session", ev.SessionID, "seq", ev.Seq, "err", err)
				ev.Data, ev.Raw = json.RawMessage("null"), nil
				buf.Reset()
				if err := writeSSE(&buf, ev); err != nil {
					return
				}
			}
			if !send(buf.Bytes()) {
				return
			}
			last = ev.Seq
			ping.Reset(s.cfg.Heartbeat)
		}
	}
}

// writeSSE appends one event in SSE framing.
func writeSSE(buf *bytes.Buffer, ev event.Event) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	buf.WriteString("id: ")
	buf.WriteString(strconv.FormatInt(ev.Seq, 10))
	buf.WriteByte('\n')
	if t := sseField(string(ev.Type)); t != "" {
		buf.WriteString("event: ")
		buf.WriteString(t)
		buf.WriteByte('\n')
	}
	// json.Marshal output has no raw newlines; split anyway so a future
	// encoder cannot break the framing.
	for line := range strings.SplitSeq(string(data), "\n") {
		buf.WriteString("data: ")
		buf.WriteString(strings.TrimSuffix(line, "\r"))
		buf.WriteByte('\n')
	}
	buf.WriteByte('\n')
	return nil
}

// sseField drops the characters that would end an SSE field.
func sseField(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return -1
		}
		return r
	}, s)
}

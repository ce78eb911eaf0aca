package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/event"
)

type streamInput struct {
	ID string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	ResumeParams
	AccessToken string `query:"access_token" doc:"The bearer token, for clients that cannot set an Authorization header (EventSource). Accepted on this route only; prefer the header, since URLs end up in logs."`
}

// ResumeParams is the resume point of every resumable event stream. It is
// exported so that its fields are parameters where it is embedded (huma,
// which documents the operations, skips unexported embedded structs).
type ResumeParams struct {
	LastEventID string `header:"Last-Event-ID" maxLength:"32" doc:"Resume after this seq: the id of the last event received. Sent by EventSource clients on reconnect; wins over after."`
	After       string `query:"after" maxLength:"32" doc:"Resume after this seq (a decimal integer, 0 or more) when there is no Last-Event-ID. Default 0: from the oldest event still held."`

	from int64
}

// check parses the resume point; the header wins over the query.
func (in *ResumeParams) check() []error {
	loc, v := "query.after", in.After
	if in.LastEventID != "" {
		loc, v = "header.Last-Event-ID", in.LastEventID
	}
	if v == "" {
		return nil
	}
	n, err := parseSeq(v)
	if err != nil {
		return []error{&fieldError{Location: loc, Message: err.Error(), Value: v}}
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

var streamEventsOp = &op[streamInput, streamOutput]{h: (*server).streamEvents, opSpec: opSpec{
	ID: "streamEvents", Method: http.MethodGet, Path: "/v1/sessions/{id}/events/stream", Tag: "events",
	Summary: "Follow a session's events (SSE)",
	Description: "A Server-Sent Events stream of the session's events: first those after the resume point, " +
		"then live ones as they happen, without gaps or repeats. Each event is sent as\n\n" +
		"    id: <seq>\n    event: <type>\n    data: <the event as JSON, on one line>\n\n" +
		"The stream starts with a `retry:` hint and carries `: ping` comment lines while idle. " +
		"It stays open (also after the session ends) until the client disconnects; to resume, reconnect " +
		"with Last-Event-ID (EventSource does this by itself) or ?after= set to the last seq received.",
	Errors: errs(http.StatusNotFound),
	Stream: streamEvents,
}}

func (s *server) streamEvents(ctx context.Context, in *streamInput) (*streamOutput, error) {
	return resumableStream(ctx, s, func(sctx context.Context) (<-chan event.Event, error) {
		return s.eng.Subscribe(sctx, in.ID, in.from)
	}, func(sctx context.Context, c *sseWriter, ch <-chan event.Event) {
		pumpEvents(sctx, c, ch, in.from)
	})
}

// resumableStream answers a stream that follows a subscription: it
// subscribes first, so that a subscription error is an ordinary problem
// answer, then opens the stream (headers, retry hint, heartbeat) and hands
// it to pump. The subscription lives as long as the stream body runs.
func resumableStream[E any](ctx context.Context, s *server,
	subscribe func(context.Context) (<-chan E, error),
	pump func(context.Context, *sseWriter, <-chan E),
) (*streamOutput, error) {
	sctx, cancel := context.WithCancel(ctx)
	ch, err := subscribe(sctx)
	if err != nil {
		cancel()
		return nil, s.fail(ctx, err)
	}
	return &streamOutput{Body: func(w http.ResponseWriter) {
		defer cancel()
		c := s.newSSE(w)
		defer c.finish()
		if c.begin(s.cfg.Retry) {
			pump(sctx, c, ch)
		}
	}}, nil
}

// pumpEvents writes events from ch until ctx ends (the client went away),
// ch closes or a write fails. last is the resume point: events at or below
// it are never sent, so a misbehaving source cannot make a client see an
// event twice.
func pumpEvents(ctx context.Context, c *sseWriter, ch <-chan event.Event, last int64) {
	var buf bytes.Buffer
	for {
		select {
		case <-ctx.Done():
			return
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
			if !c.write(buf.Bytes()) {
				return
			}
			last = ev.Seq
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

// sseWriter is the one writer of the API's event streams (session events,
// process output, exec output): it sends the headers, bounds every write by
// the server's write timeout, flushes each message, sends a `: ping` comment
// while the stream is idle, and after a failed write (the client went away,
// a broken pipe) drops everything. Several goroutines may write to it.
type sseWriter struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	timeout   time.Duration
	heartbeat time.Duration

	mu      sync.Mutex
	started bool
	broken  bool
	ping    *time.Ticker // nil until begin
	buf     bytes.Buffer
	stop    chan struct{}
	done    sync.WaitGroup
}

func (s *server) newSSE(w http.ResponseWriter) *sseWriter {
	return &sseWriter{
		w: w, rc: http.NewResponseController(w),
		timeout: s.cfg.WriteTimeout, heartbeat: s.cfg.Heartbeat,
		stop: make(chan struct{}),
	}
}

// begin sends the headers, then the reconnection delay when retry is not
// 0, and starts the heartbeat; only the first call does. It reports whether
// the stream is usable.
func (c *sseWriter) begin(retry time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return !c.broken
	}
	c.started = true
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	c.w.WriteHeader(http.StatusOK)
	if retry != 0 {
		if !c.writeLocked([]byte("retry: " + strconv.FormatInt(retry.Milliseconds(), 10) + "\n\n")) {
			return false
		}
	} else if !c.flushLocked() {
		return false
	}
	c.ping = time.NewTicker(c.heartbeat)
	c.done.Add(1)
	go c.pings()
	return true
}

// begun reports whether begin has sent the headers.
func (c *sseWriter) begun() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started
}

func (c *sseWriter) pings() {
	defer c.done.Done()
	for {
		select {
		case <-c.stop:
			return
		case <-c.ping.C:
			c.mu.Lock()
			c.writeLocked([]byte(": ping\n\n"))
			c.mu.Unlock()
		}
	}
}

// event writes one message whose data is v as JSON (null if v has none);
// id may be empty.
func (c *sseWriter) event(id, typ string, v any) bool {
	data, err := json.Marshal(v)
	if err != nil {
		data = []byte("null")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Reset()
	if id != "" {
		c.buf.WriteString("id: " + id + "\n")
	}
	c.buf.WriteString("event: " + sseField(typ) + "\n")
	// json.Marshal output has no raw newlines.
	c.buf.WriteString("data: ")
	c.buf.Write(data)
	c.buf.WriteString("\n\n")
	return c.writeLocked(c.buf.Bytes())
}

// write sends b, one or more whole SSE messages.
func (c *sseWriter) write(b []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writeLocked(b)
}

func (c *sseWriter) writeLocked(b []byte) bool {
	if c.broken || !c.started {
		return false
	}
	if err := c.rc.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		c.broken = true
		return false
	}
	if _, err := c.w.Write(b); err != nil {
		c.broken = true
		return false
	}
	if !c.flushLocked() {
		return false
	}
	if c.ping != nil {
		// Pings are for idle streams: the next one is due a heartbeat
		// after this message.
		c.ping.Reset(c.heartbeat)
	}
	return true
}

func (c *sseWriter) flushLocked() bool {
	if err := c.rc.Flush(); err != nil {
		c.broken = true
	}
	return !c.broken
}

// finish stops the heartbeat and clears the write deadline, so that none
// is left behind for a later request on the connection.
func (c *sseWriter) finish() {
	close(c.stop)
	c.done.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ping != nil {
		c.ping.Stop()
	}
	_ = c.rc.SetWriteDeadline(time.Time{})
}

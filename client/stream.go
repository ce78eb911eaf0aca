package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/event"
)

// Stream defaults. The idle timeout must exceed the server's heartbeat
// interval by a wide margin; reconnecting costs one request and loses
// nothing, so erring short is cheap.
const (
	DefaultMinBackoff  = 250 * time.Millisecond
	DefaultMaxBackoff  = 15 * time.Second
	DefaultIdleTimeout = 90 * time.Second
)

// errIdle cancels a connection on which nothing arrived for too long.
var errIdle = errors.New("event stream idle for too long")

// ErrSessionEnded is returned (wrapped) by WaitTurn when the session ends
// before the turn completes.
var ErrSessionEnded = errors.New("session ended")

// StreamOption configures Stream and WaitTurn.
type StreamOption func(*streamConfig)

type streamConfig struct {
	minBackoff, maxBackoff time.Duration
	idle                   time.Duration
	maxAttempts            int
	until                  func(event.Event) bool
	onReconnect            func(attempt int, err error, delay time.Duration)
}

// WithBackoff sets the bounds of the jittered exponential delay between
// reconnection attempts. A retry field sent by the server replaces the lower
// bound (clamped to the upper one).
func WithBackoff(lo, hi time.Duration) StreamOption {
	return func(c *streamConfig) {
		c.minBackoff, c.maxBackoff = max(lo, time.Millisecond), max(hi, lo, time.Millisecond)
	}
}

// WithIdleTimeout reconnects when nothing, not even a heartbeat, arrived for
// d. Zero disables the check.
func WithIdleTimeout(d time.Duration) StreamOption {
	return func(c *streamConfig) { c.idle = d }
}

// WithMaxAttempts ends the stream with the last error after n consecutive
// failures (a connection that drops before delivering an event counts as
// one). Zero, the default, retries until the context ends.
func WithMaxAttempts(n int) StreamOption {
	return func(c *streamConfig) { c.maxAttempts = n }
}

// Until ends the stream, without error, right after the first event for
// which stop returns true has been delivered.
func Until(stop func(event.Event) bool) StreamOption {
	return func(c *streamConfig) { c.until = stop }
}

// OnReconnect calls fn before each reconnection with the number of the
// attempt (1 for the first after a drop), the error that caused it and the
// delay about to be waited. fn runs on the goroutine calling Next.
func OnReconnect(fn func(attempt int, err error, delay time.Duration)) StreamOption {
	return func(c *streamConfig) { c.onReconnect = fn }
}

// EndOfTurn returns a predicate, for Until, that matches the turn.completed
// event of turnID and any session.ended event (after which no turn can
// complete).
func EndOfTurn(turnID string) func(event.Event) bool {
	return func(ev event.Event) bool {
		return ev.Type == event.TypeSessionEnded || (ev.Type == event.TypeTurnCompleted && turnOf(ev) == turnID)
	}
}

// turnOf returns the turn id of an event, from the envelope or, failing
// that, from a turn payload.
func turnOf(ev event.Event) string {
	if ev.TurnID != "" {
		return ev.TurnID
	}
	var p struct {
		TurnID string `json:"turn_id"`
	}
	_ = json.Unmarshal(ev.Data, &p)
	return p.TurnID
}

// Stream follows a session's events through the SSE endpoint. It delivers
// every event with seq greater than the starting point exactly once and in
// seq order, whatever happens to the connection:
//
//   - after any disconnect (network error, server closing, idle timeout,
//     5xx, 429) it reconnects with jittered exponential backoff, resuming
//     with Last-Event-ID set to the last seq delivered;
//   - events with a seq already delivered are dropped;
//   - when seq jumps ahead, the missing range is read with Events first.
//
// It ends on the context's end, a permanent error (401, 404, any other 4xx,
// a malformed stream), WithMaxAttempts, Until or Close.
//
// A Stream is used from one goroutine: Next, Event, Err, LastSeq, All and
// Close must not be called concurrently. To stop a Next blocked on the
// network from elsewhere, cancel its context.
type Stream struct {
	c   *Client
	ctx context.Context
	id  string
	cfg streamConfig

	last     int64 // seq of the last event delivered (or the starting point)
	cur      event.Event
	queue    []event.Event // backfilled events waiting to be delivered
	stopNext bool          // Until matched: end before the next event
	done     bool
	err      error

	// The current connection, if any.
	body      io.ReadCloser
	parser    *sseParser
	connCtx   context.Context
	cancel    context.CancelCauseFunc
	idleTimer *time.Timer
	connected time.Time

	failures    int           // consecutive failed attempts
	lastErr     error         // why the last attempt failed
	serverRetry time.Duration // from the stream's retry field, 0 if none
}

// Stream returns a Stream of the session's events with seq greater than
// after. Nothing is sent until the first call to Next.
func (c *Client) Stream(ctx context.Context, sessionID string, after int64, opts ...StreamOption) *Stream {
	cfg := streamConfig{minBackoff: DefaultMinBackoff, maxBackoff: DefaultMaxBackoff, idle: DefaultIdleTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	return &Stream{c: c, ctx: ctx, id: sessionID, cfg: cfg, last: max(after, 0)}
}

// Event returns the event the last successful Next moved to.
func (s *Stream) Event() event.Event { return s.cur }

// LastSeq returns the seq of the last event delivered, or the starting
// point before the first.
func (s *Stream) LastSeq() int64 { return s.last }

// Err returns what ended the stream: nil after Close or Until, the
// context's error when it ended, or a permanent error (often an *APIError).
func (s *Stream) Err() error { return s.err }

// Close ends the stream and releases its connection. It is idempotent.
func (s *Stream) Close() error {
	s.stop()
	return nil
}

// stop is Close, for callers inside the package: it cannot fail.
func (s *Stream) stop() {
	s.done = true
	s.disconnect()
}

// All returns the stream as an iterator of (event, nil) pairs, ending with
// one (zero event, err) pair when the stream ends with an error. Breaking out
// of the loop closes the stream.
func (s *Stream) All() iter.Seq2[event.Event, error] {
	return func(yield func(event.Event, error) bool) {
		defer s.stop()
		for s.Next() {
			if !yield(s.Event(), nil) {
				return
			}
		}
		if err := s.Err(); err != nil {
			yield(event.Event{}, err)
		}
	}
}

// Next advances to the next event, connecting or reconnecting as needed. It
// returns false when the stream has ended; Err then says why.
func (s *Stream) Next() bool {
	if s.done {
		return false
	}
	if s.stopNext {
		s.finish(nil)
		return false
	}
	for {
		if len(s.queue) > 0 {
			ev := s.queue[0]
			s.queue = s.queue[1:]
			if ev.Seq <= s.last {
				continue
			}
			return s.deliver(ev)
		}
		if err := s.ctx.Err(); err != nil {
			s.finish(err)
			return false
		}
		if s.body == nil {
			if !s.reconnect() {
				return false
			}
			continue
		}
		msg, err := s.parser.Next()
		if d, ok := s.parser.Retry(); ok {
			s.serverRetry = d
		}
		if err != nil {
			switch {
			case errors.Is(err, errSSETooLong):
				s.finish(fmt.Errorf("session %s: %w", s.id, err))
				return false
			case errors.Is(context.Cause(s.connCtx), errIdle):
				err = errIdle
			case errors.Is(err, io.EOF):
				err = io.ErrUnexpectedEOF // the server never ends a stream on purpose
			}
			s.drop(err)
			continue
		}
		ev, ok, err := decodeSSEEvent(msg)
		if err != nil {
			s.finish(fmt.Errorf("session %s: %w", s.id, err))
			return false
		}
		switch {
		case !ok, ev.Seq <= s.last:
			continue // not an event, or a duplicate of one already delivered
		case ev.Seq > s.last+1:
			if err := s.backfill(ev); err != nil {
				if !isRetryable(err) {
					s.finish(err)
					return false
				}
				s.drop(err)
			}
			continue
		}
		return s.deliver(ev)
	}
}

// deliver makes ev the current event.
func (s *Stream) deliver(ev event.Event) bool {
	s.last, s.cur, s.failures = ev.Seq, ev, 0
	if s.cfg.until != nil && s.cfg.until(ev) {
		s.stopNext = true
	}
	return true
}

// finish ends the stream with err.
func (s *Stream) finish(err error) {
	s.done, s.err, s.queue = true, err, nil
	s.disconnect()
}

// drop closes the current connection after it failed with err; the next
// call to reconnect waits out the backoff first.
func (s *Stream) drop(err error) {
	if time.Since(s.connected) >= s.cfg.maxBackoff {
		s.failures = 0 // a long-lived connection was healthy: back off afresh
	}
	s.disconnect()
	s.failures++
	s.lastErr = err
}

// disconnect releases the current connection, if any.
func (s *Stream) disconnect() {
	if s.idleTimer != nil {
		s.idleTimer.Stop()
		s.idleTimer = nil
	}
	if s.body != nil {
		_ = s.body.Close()
		s.body, s.parser = nil, nil
	}
	if s.cancel != nil {
		s.cancel(nil)
		s.cancel = nil
	}
}

// reconnect waits out the backoff when the last attempt failed, then
// connects, repeating while the failures are temporary. It returns false
// when the stream has ended.
func (s *Stream) reconnect() bool {
	for {
		if s.failures > 0 {
			if s.cfg.maxAttempts > 0 && s.failures >= s.cfg.maxAttempts {
				s.finish(fmt.Errorf("session %s: event stream: giving up after %d attempts: %w", s.id, s.failures, s.lastErr))
				return false
			}
			d := s.backoff()
			if s.cfg.onReconnect != nil {
				s.cfg.onReconnect(s.failures, s.lastErr, d)
			}
			t := time.NewTimer(d)
			select {
			case <-s.ctx.Done():
				t.Stop()
				s.finish(s.ctx.Err())
				return false
			case <-t.C:
			}
		}
		err := s.connect()
		if err == nil {
			return true
		}
		if ctxErr := s.ctx.Err(); ctxErr != nil {
			s.finish(ctxErr)
			return false
		}
		if !isRetryable(err) {
			s.finish(err)
			return false
		}
		s.failures++
		s.lastErr = err
	}
}

// backoff returns the delay before the next attempt: exponential in the
// number of consecutive failures, from the server's retry (or the minimum)
// up to the maximum, with the upper half jittered.
func (s *Stream) backoff() time.Duration {
	d := s.cfg.minBackoff
	if s.serverRetry > 0 {
		d = s.serverRetry
	}
	for i := 1; i < s.failures && d < s.cfg.maxBackoff; i++ {
		d *= 2
	}
	d = min(d, s.cfg.maxBackoff)
	return d/2 + rand.N(d/2+1)
}

// connect opens the SSE connection from the last seq delivered.
func (s *Stream) connect() error {
	p, err := sessionPath(s.id, "events", "stream")
	if err != nil {
		return permanentError{err}
	}
	q := url.Values{}
	if s.last > 0 {
		q.Set("after", strconv.FormatInt(s.last, 10))
	}
	ctx, cancel := context.WithCancelCause(s.ctx)
	req, err := s.c.newRequest(ctx, http.MethodGet, p, q, nil)
	if err != nil {
		cancel(nil)
		return permanentError{err}
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	if s.last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(s.last, 10))
	}
	resp, err := s.c.hc.Do(req)
	if err != nil {
		cancel(nil)
		return fmt.Errorf("GET %s: %w", p, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		err := s.c.readAPIError(resp, http.MethodGet, p)
		drainClose(resp)
		cancel(nil)
		return err
	}
	ct := resp.Header.Get("Content-Type")
	if mt, _, _ := mime.ParseMediaType(ct); resp.StatusCode != http.StatusOK || mt != "text/event-stream" {
		drainClose(resp)
		cancel(nil)
		return permanentError{fmt.Errorf("GET %s: answer is %d %q, not 200 text/event-stream", p, resp.StatusCode, ct)}
	}
	s.body, s.cancel, s.connCtx, s.connected = resp.Body, cancel, ctx, time.Now()
	var r io.Reader = resp.Body
	if s.cfg.idle > 0 {
		s.idleTimer = time.AfterFunc(s.cfg.idle, func() { cancel(errIdle) })
		r = &idleReader{r: r, t: s.idleTimer, d: s.cfg.idle}
	}
	s.parser = s.c.newSSEParser(r)
	return nil
}

// backfill reads the events missing between the last delivered and ev from
// the log and queues them, followed by ev. A range the log cannot fill is
// skipped: the server promises there is none.
func (s *Stream) backfill(ev event.Event) error {
	from := s.last
	var got []event.Event
	for from < ev.Seq-1 {
		page, err := s.c.Events(s.ctx, s.id, from, int(min(ev.Seq-1-from, int64(s.c.backfillPage()))))
		if err != nil {
			return err
		}
		n := 0
		for _, e := range page.Events {
			if e.Seq > from && e.Seq < ev.Seq {
				got = append(got, e)
				from = e.Seq
				n++
			}
		}
		if n == 0 {
			break
		}
	}
	s.queue = append(append(s.queue, got...), ev)
	return nil
}

// decodeSSEEvent decodes one SSE message into an event. ok is false, with no
// error, for a message that is not a universal event (an SSE event name this
// client does not know), so that the server may add message kinds.
func decodeSSEEvent(msg sseMessage) (ev event.Event, ok bool, err error) {
	known := msg.Event == "message" || slices.Contains(event.Types, event.Type(msg.Event))
	if err := json.Unmarshal([]byte(msg.Data), &ev); err != nil || ev.Seq <= 0 {
		if !known {
			return ev, false, nil
		}
		if err == nil {
			err = errors.New("no seq")
		}
		return ev, false, fmt.Errorf("event stream: bad %q event (id %q): %w", msg.Event, msg.ID, err)
	}
	return ev, true, nil
}

// permanentError marks a stream error that reconnecting cannot cure.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

// isRetryable reports whether reconnecting may cure err.
func isRetryable(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Temporary()
	}
	var pe permanentError
	return !errors.As(err, &pe)
}

// idleReader pushes the idle deadline back whenever bytes arrive.
type idleReader struct {
	r io.Reader
	t *time.Timer
	d time.Duration
}

func (ir *idleReader) Read(p []byte) (int, error) {
	n, err := ir.r.Read(p)
	if n > 0 {
		ir.t.Reset(ir.d)
	}
	return n, err
}

// WaitTurn follows the session's events after the given seq, calls fn (when
// not nil) for each, and returns the payload of turnID's turn.completed. It
// returns fn's error if fn fails, and an error wrapping ErrSessionEnded if
// the session ends first. Pass after = LastSeq (taken before SendMessage) so
// that no event of the turn is missed and no older one is seen.
func (c *Client) WaitTurn(ctx context.Context, sessionID, turnID string, after int64, fn func(event.Event) error, opts ...StreamOption) (event.TurnCompleted, error) {
	st := c.Stream(ctx, sessionID, after, append(opts, Until(EndOfTurn(turnID)))...)
	defer st.stop()
	for st.Next() {
		ev := st.Event()
		if fn != nil {
			if err := fn(ev); err != nil {
				return event.TurnCompleted{}, err
			}
		}
		switch ev.Type {
		case event.TypeTurnCompleted:
			if turnOf(ev) != turnID {
				continue
			}
			var tc event.TurnCompleted
			if err := json.Unmarshal(ev.Data, &tc); err != nil {
				return tc, fmt.Errorf("session %s: turn.completed seq %d: %w", sessionID, ev.Seq, err)
			}
			return tc, nil
		case event.TypeSessionEnded:
			var se event.SessionEnded
			_ = json.Unmarshal(ev.Data, &se)
			msg := string(se.Reason)
			if se.Message != "" {
				msg += ": " + se.Message
			}
			return event.TurnCompleted{}, fmt.Errorf("session %s: turn %s: %w (%s)", sessionID, turnID, ErrSessionEnded, msg)
		}
	}
	if err := st.Err(); err != nil {
		return event.TurnCompleted{}, err
	}
	return event.TurnCompleted{}, fmt.Errorf("session %s: event stream ended before turn %s completed", sessionID, turnID)
}

package acpwire

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Handler serves the peer's requests and notifications. For a request,
// its result (or error) is the answer; for a notification both are
// dropped. ctx ends when the peer cancels the request ($/cancel_request)
// or the connection ends.
type Handler func(ctx context.Context, method string, params json.RawMessage) (any, *RequestError)

// Limits bound what a peer can make a Conn hold. Zero fields take the
// defaults.
type Limits struct {
	// MaxMessage is the size of one incoming message (one line) in bytes:
	// a longer one ends the connection.
	MaxMessage int
	// MaxInbound is the peer's requests handled at once: more are
	// answered with an error at once.
	MaxInbound int
	// MaxPending is this side's requests awaiting an answer: more fail.
	MaxPending int
	// MaxQueued is the notifications received and not yet handled: more
	// end the connection (they are handled one at a time, in order).
	MaxQueued int
}

// Default limits. 10 MiB a message and 1024 queued notifications are
// those of the reference implementation agents are tested against.
const (
	DefaultMaxMessage = 10 << 20
	DefaultMaxInbound = 128
	DefaultMaxPending = 1024
	DefaultMaxQueued  = 1024
)

func (l Limits) withDefaults() Limits {
	if l.MaxMessage <= 0 {
		l.MaxMessage = DefaultMaxMessage
	}
	if l.MaxInbound <= 0 {
		l.MaxInbound = DefaultMaxInbound
	}
	if l.MaxPending <= 0 {
		l.MaxPending = DefaultMaxPending
	}
	if l.MaxQueued <= 0 {
		l.MaxQueued = DefaultMaxQueued
	}
	return l
}

// Options configure a Conn.
type Options struct {
	Limits Limits
	// Logger gets protocol trouble (never a message's content); nil
	// discards it.
	Logger *slog.Logger
}

var (
	// ErrMessageTooLarge ends a connection whose peer sent a message
	// over Limits.MaxMessage.
	ErrMessageTooLarge = errors.New("acpwire: message too large")
	// ErrQueueFull ends a connection whose peer sent notifications faster
	// than they are handled, beyond Limits.MaxQueued.
	ErrQueueFull = errors.New("acpwire: notification queue full")
)

// drainTimeout bounds how long notifications received before the peer
// disconnected keep their context.
const drainTimeout = 5 * time.Second

// message is any JSON-RPC 2.0 message.
type message struct {
	JSONRPC string           `json:"jsonrpc"`
	ID      *json.RawMessage `json:"id,omitempty"`
	Method  string           `json:"method,omitempty"`
	Params  json.RawMessage  `json:"params,omitempty"`
	Result  json.RawMessage  `json:"result,omitempty"`
	Error   *RequestError    `json:"error,omitempty"`
}

const cancelMethod = "$/cancel_request"

type cancelParams struct {
	RequestID json.RawMessage `json:"requestId"`
}

type response struct {
	msg       message
	watermark uint64 // notifications received before it
}

// Conn is a JSON-RPC 2.0 connection over newline-delimited JSON, both
// ways: it sends requests and notifications and serves the peer's with a
// Handler. The peer's requests are handled concurrently, its
// notifications one at a time in the order received, and the answer to a
// request is returned only once the notifications received before it are
// handled (an agent's session/update notifications come before its
// answer to session/prompt). Conn reads until the peer's output ends.
type Conn struct {
	w       io.Writer
	r       io.Reader
	handler Handler
	lim     Limits
	log     *slog.Logger

	writeMu sync.Mutex
	nextID  atomic.Uint64

	mu       sync.Mutex
	pending  map[string]chan response           // our requests by id key
	inflight map[string]context.CancelCauseFunc // the peer's requests by id key

	// ctx ends when the peer's output ends (Done); inbound is the
	// notifications' context, which outlives it until they are drained.
	ctx           context.Context
	cancel        context.CancelCauseFunc
	inbound       context.Context
	inboundCancel context.CancelCauseFunc

	queue    chan queued
	drained  chan struct{} // closed once the queue is closed and handled
	nmu      sync.Mutex
	enqueued uint64
	handled  uint64
	progress chan struct{} // closed (and replaced) when handled grows
}

type queued struct {
	seq uint64
	msg message
}

// NewConn starts a connection that writes to the peer's input and reads
// the peer's output.
func NewConn(h Handler, peerInput io.Writer, peerOutput io.Reader, opts Options) *Conn {
	c := &Conn{
		w: peerInput, r: peerOutput, handler: h, lim: opts.Limits.withDefaults(), log: opts.Logger,
		pending:  map[string]chan response{},
		inflight: map[string]context.CancelCauseFunc{},
		drained:  make(chan struct{}),
		progress: make(chan struct{}),
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.queue = make(chan queued, c.lim.MaxQueued)
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	c.inbound, c.inboundCancel = context.WithCancelCause(context.Background())
	go c.receive()
	go c.notifications()
	return c
}

// Done is closed when the peer's output has ended (or the connection
// failed: context.Cause of Err says why).
func (c *Conn) Done() <-chan struct{} { return c.ctx.Done() }

// Err is why the connection ended (nil while it runs).
func (c *Conn) Err() error { return context.Cause(c.ctx) }

// readMessage reads one line of at most max bytes (newline excluded).
func readMessage(br *bufio.Reader, max int, buf []byte) ([]byte, error) {
	buf = buf[:0]
	for {
		chunk, err := br.ReadSlice('\n')
		n := len(chunk)
		if err == nil {
			n-- // the newline
		}
		if len(buf)+n > max {
			return nil, fmt.Errorf("%w (more than %d bytes)", ErrMessageTooLarge, max)
		}
		buf = append(buf, chunk...)
		switch {
		case err == nil:
			return buf, nil
		case errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF) && len(buf) > 0:
			return buf, nil // the last message, without a newline
		default:
			return nil, err
		}
	}
}

func (c *Conn) receive() {
	br := bufio.NewReaderSize(c.r, 64<<10)
	var buf []byte
	for {
		line, err := readMessage(br, c.lim.MaxMessage, buf)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("peer connection closed")
			}
			c.shutdown(err)
			return
		}
		// Decoding copies what it keeps: the buffer is reused, unless a
		// large message grew it.
		buf = line[:0]
		if cap(buf) > 1<<20 {
			buf = nil
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var msg message
		if err := json.Unmarshal(line, &msg); err != nil {
			c.log.Error("acp: a message that is not JSON-RPC", "bytes", len(line), "err", err)
			continue
		}
		switch {
		case msg.ID == nil && msg.Method == cancelMethod:
			c.cancelInbound(msg.Params)
		case msg.ID != nil && msg.Method == "":
			c.answer(msg)
		case msg.ID != nil:
			c.serve(msg)
		case msg.Method != "":
			if err := c.enqueue(msg); err != nil {
				c.shutdown(err)
				return
			}
		default:
			c.log.Error("acp: a message with neither id nor method", "bytes", len(line))
		}
	}
}

// shutdown ends the connection; only receive calls it, once.
func (c *Conn) shutdown(cause error) {
	c.cancel(cause)
	close(c.queue)
	// Notifications already received are still handled, with a context
	// that lasts until they are (or drainTimeout, should one block on it).
	go func() {
		t := time.NewTimer(drainTimeout)
		defer t.Stop()
		select {
		case <-c.drained:
		case <-t.C:
		}
		c.inboundCancel(cause)
	}()
	c.log.Debug("acp: connection closed", "cause", cause.Error())
}

// idKey is a request id as a map key: numbers and strings in one
// canonical form, so that 1, 1.0 and 1e0 are one id.
func idKey(raw json.RawMessage) string {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return ""
	}
	switch {
	case t[0] == '"':
		var s string
		if json.Unmarshal(t, &s) == nil {
			b, _ := json.Marshal(s)
			return string(b)
		}
	case t[0] == '-' || '0' <= t[0] && t[0] <= '9':
		if f, err := strconv.ParseFloat(string(t), 64); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return strconv.FormatInt(int64(f), 10)
		}
	}
	return string(t)
}

// answer hands a response to the request waiting for it.
func (c *Conn) answer(msg message) {
	key := idKey(*msg.ID)
	c.mu.Lock()
	ch := c.pending[key]
	delete(c.pending, key)
	c.mu.Unlock()
	if ch == nil {
		return // not ours, or already given up
	}
	c.nmu.Lock()
	w := c.enqueued
	c.nmu.Unlock()
	ch <- response{msg: msg, watermark: w} // buffered, one answer
}

// serve handles one of the peer's requests on its own goroutine.
func (c *Conn) serve(msg message) {
	key := idKey(*msg.ID)
	reply := message{JSONRPC: "2.0", ID: msg.ID}
	c.mu.Lock()
	switch {
	case len(c.inflight) >= c.lim.MaxInbound:
		c.mu.Unlock()
		reply.Error = NewInternalError(map[string]any{"error": fmt.Sprintf("more than %d requests at once", c.lim.MaxInbound)})
		_ = c.write(reply)
		return
	case c.inflight[key] != nil:
		c.mu.Unlock()
		reply.Error = NewInvalidRequest(map[string]any{"error": "the request id is already in use"})
		_ = c.write(reply)
		return
	}
	ctx, cancel := context.WithCancelCause(c.ctx)
	c.inflight[key] = cancel
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			delete(c.inflight, key)
			c.mu.Unlock()
			cancel(nil)
		}()
		result, rerr := c.handler(ctx, msg.Method, msg.Params)
		if rerr != nil {
			reply.Error = rerr
		} else if b, err := json.Marshal(result); err != nil {
			reply.Error = NewInternalError(map[string]any{"error": err.Error()})
		} else {
			reply.Result = b
		}
		_ = c.write(reply)
	}()
}

// cancelInbound cancels the peer's request named by $/cancel_request.
func (c *Conn) cancelInbound(params json.RawMessage) {
	var p cancelParams
	if json.Unmarshal(params, &p) != nil || len(bytes.TrimSpace(p.RequestID)) == 0 {
		c.log.Error("acp: a $/cancel_request without a requestId")
		return
	}
	c.mu.Lock()
	cancel := c.inflight[idKey(p.RequestID)]
	c.mu.Unlock()
	if cancel != nil {
		cancel(context.Canceled)
	}
}

func (c *Conn) enqueue(msg message) error {
	c.nmu.Lock()
	defer c.nmu.Unlock()
	select {
	case c.queue <- queued{seq: c.enqueued + 1, msg: msg}:
		c.enqueued++
		return nil
	default:
		return fmt.Errorf("%w (%d notifications)", ErrQueueFull, cap(c.queue))
	}
}

// notifications handles the peer's notifications in order.
func (c *Conn) notifications() {
	defer close(c.drained)
	for n := range c.queue {
		if _, rerr := c.handler(c.inbound, n.msg.Method, n.msg.Params); rerr != nil &&
			(rerr.Code != CodeMethodNotFound || !strings.HasPrefix(n.msg.Method, "_")) {
			c.log.Error("acp: a notification failed", "method", n.msg.Method, "code", rerr.Code)
		}
		c.nmu.Lock()
		c.handled = n.seq
		close(c.progress)
		c.progress = make(chan struct{})
		c.nmu.Unlock()
	}
}

// waitHandled waits until the notifications up to seq are handled.
func (c *Conn) waitHandled(ctx context.Context, seq uint64) error {
	for {
		c.nmu.Lock()
		done, progress := c.handled >= seq, c.progress
		c.nmu.Unlock()
		if done {
			return nil
		}
		select {
		case <-progress:
		case <-c.drained:
			c.nmu.Lock()
			done = c.handled >= seq
			c.nmu.Unlock()
			if done {
				return nil
			}
			return NewInternalError(map[string]any{"error": "peer disconnected while waiting for pre-response notifications"})
		case <-ctx.Done():
			return ToRequestError(context.Cause(ctx))
		}
	}
}

func (c *Conn) write(msg message) error {
	msg.JSONRPC = "2.0"
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_, err = c.w.Write(b)
	return err
}

// Notify sends a notification.
func (c *Conn) Notify(ctx context.Context, method string, params any) error {
	if err := ctx.Err(); err != nil {
		return NewInternalError(map[string]any{"error": err.Error()})
	}
	msg := message{Method: method}
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			return NewInvalidParams(map[string]any{"error": err.Error()})
		}
		msg.Params = b
	}
	if err := c.write(msg); err != nil {
		return NewInternalError(map[string]any{"error": err.Error()})
	}
	return nil
}

// Call sends a request and returns its raw result. It fails with a
// *RequestError: the peer's, or one saying why there is no answer (ctx
// ended: the peer is sent $/cancel_request; the peer disconnected).
func (c *Conn) Call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	idRaw := json.RawMessage(strconv.FormatUint(c.nextID.Add(1), 10))
	key := string(idRaw)
	msg := message{ID: &idRaw, Method: method}
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			return nil, NewInvalidParams(map[string]any{"error": err.Error()})
		}
		msg.Params = b
	}
	ch := make(chan response, 1)
	c.mu.Lock()
	if len(c.pending) >= c.lim.MaxPending {
		c.mu.Unlock()
		return nil, NewInternalError(map[string]any{"error": fmt.Sprintf("more than %d requests awaiting an answer", c.lim.MaxPending)})
	}
	c.pending[key] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pending, key)
		c.mu.Unlock()
	}
	if err := c.write(msg); err != nil {
		forget()
		return nil, NewInternalError(map[string]any{"error": err.Error()})
	}
	disconnected := NewInternalError(map[string]any{"error": "peer disconnected before response"})
	var resp response
	select {
	case resp = <-ch:
	case <-ctx.Done():
		forget()
		select {
		case <-c.Done():
			return nil, disconnected
		default:
		}
		// Best effort, off the caller's path: a peer that does not read
		// must not hold it. One per abandoned request, so bounded by
		// MaxPending.
		go func() { _ = c.Notify(context.Background(), cancelMethod, cancelParams{RequestID: idRaw}) }()
		return nil, ToRequestError(context.Cause(ctx))
	case <-c.Done():
		forget()
		return nil, disconnected
	}
	if err := c.waitHandled(ctx, resp.watermark); err != nil {
		return nil, err
	}
	if resp.msg.Error != nil {
		return nil, resp.msg.Error
	}
	return resp.msg.Result, nil
}

// Request sends a request and decodes its result into a T.
func Request[T any](ctx context.Context, c *Conn, method string, params any) (T, error) {
	var v T
	raw, err := c.Call(ctx, method, params)
	if err != nil {
		return v, err
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &v); err != nil {
			return v, NewInternalError(map[string]any{"error": err.Error()})
		}
	}
	return v, nil
}

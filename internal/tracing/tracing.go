// Package tracing records the daemon's OpenTelemetry trace spans and exports
// them over OTLP/HTTP: W3C trace context (traceparent), sampling, spans with
// attributes, events and a status, and a bounded batching exporter that
// writes the OTLP protobuf encoding itself (otlp.go), so that no OTel SDK,
// protobuf or gRPC module is linked into the binary. A nil *Tracer, and the
// nil *Span it returns, record nothing: tracing that is not configured costs
// a nil check, no goroutine and no allocation.
package tracing

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"
)

// TraceID and SpanID are W3C trace context ids; the zero value is invalid.
type (
	TraceID [16]byte
	SpanID  [8]byte
)

func (t TraceID) String() string { return hex.EncodeToString(t[:]) }
func (s SpanID) String() string  { return hex.EncodeToString(s[:]) }

// SpanContext is what a span passes to its children and to other
// processes: its trace, its own id and whether it is sampled.
type SpanContext struct {
	TraceID TraceID
	SpanID  SpanID
	// Flags are the W3C trace flags; bit 0 is "sampled".
	Flags byte
	// Remote is true for a context that came from another process.
	Remote bool
}

// IsValid reports whether both ids are set.
func (sc SpanContext) IsValid() bool { return sc.TraceID != TraceID{} && sc.SpanID != SpanID{} }

// Sampled reports whether the sampled flag is set.
func (sc SpanContext) Sampled() bool { return sc.Flags&flagSampled != 0 }

const flagSampled = 0x01

// Kind is a span's OTLP kind.
type Kind uint8

// The span kinds agentbox uses (OTLP Span.SpanKind values).
const (
	KindInternal Kind = 1
	KindServer   Kind = 2
	KindClient   Kind = 3
)

// StatusCode is a span's OTLP status code.
type StatusCode uint8

// OTLP Status.StatusCode values.
const (
	StatusUnset StatusCode = 0
	StatusOK    StatusCode = 1
	StatusError StatusCode = 2
)

// Bounds on what one span holds (the OTel SDK's defaults for the counts);
// more is counted as dropped. Values longer than maxValue bytes are cut.
const (
	maxAttrs  = 128
	maxEvents = 128
	maxValue  = 1024
)

type attrKind uint8

const (
	attrString attrKind = iota
	attrInt
	attrBool
)

// attr is one attribute: a key and a string, int or bool value.
type attr struct {
	key  string
	kind attrKind
	s    string
	n    int64
}

type spanEvent struct {
	at   int64 // unix nanoseconds
	name string
}

// Span is one operation of a trace. Its methods are safe on a nil *Span
// (tracing off) and on a span that is not sampled, and do nothing there;
// they are safe for concurrent use. A span is exported once End is called;
// it changes no more after that.
type Span struct {
	t            *Tracer
	sc           SpanContext
	parent       SpanID
	parentRemote bool
	kind         Kind
	start        int64

	mu        sync.Mutex
	name      string
	end       int64
	ended     bool
	attrs     []attr
	events    []spanEvent
	status    StatusCode
	statusMsg string
	// dropped counts attributes and events over the bounds.
	droppedAttrs, droppedEvents uint32
}

// Context returns the span's context (the zero value for a nil span).
func (s *Span) Context() SpanContext {
	if s == nil {
		return SpanContext{}
	}
	return s.sc
}

// recording reports whether the span's data is kept.
func (s *Span) recording() bool { return s != nil && s.sc.Sampled() }

func (s *Span) setAttr(a attr) {
	if !s.recording() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	for i := range s.attrs {
		if s.attrs[i].key == a.key {
			s.attrs[i] = a
			return
		}
	}
	if len(s.attrs) >= maxAttrs {
		s.droppedAttrs++
		return
	}
	s.attrs = append(s.attrs, a)
}

// SetString sets a string attribute (cut to maxValue bytes).
func (s *Span) SetString(key, v string) {
	if s.recording() {
		s.setAttr(attr{key: key, kind: attrString, s: clean(v)})
	}
}

// SetInt sets an integer attribute.
func (s *Span) SetInt(key string, v int64) { s.setAttr(attr{key: key, kind: attrInt, n: v}) }

// SetBool sets a boolean attribute.
func (s *Span) SetBool(key string, v bool) {
	var n int64
	if v {
		n = 1
	}
	s.setAttr(attr{key: key, kind: attrBool, n: n})
}

// SetName renames the span.
func (s *Span) SetName(name string) {
	if !s.recording() {
		return
	}
	s.mu.Lock()
	if !s.ended {
		s.name = clean(name)
	}
	s.mu.Unlock()
}

// SetStatus sets the span's status; msg is kept for StatusError only, as
// OTLP asks.
func (s *Span) SetStatus(code StatusCode, msg string) {
	if !s.recording() {
		return
	}
	if code != StatusError {
		msg = ""
	}
	s.mu.Lock()
	if !s.ended {
		s.status, s.statusMsg = code, clean(msg)
	}
	s.mu.Unlock()
}

// AddEvent records a named point in time of the span.
func (s *Span) AddEvent(name string) {
	if !s.recording() {
		return
	}
	now := time.Now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	if len(s.events) >= maxEvents {
		s.droppedEvents++
		return
	}
	s.events = append(s.events, spanEvent{at: now, name: clean(name)})
}

// End ends the span and hands it to the exporter; later calls do nothing.
func (s *Span) End() {
	if !s.recording() {
		return
	}
	now := time.Now().UnixNano()
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended, s.end = true, now
	s.mu.Unlock()
	s.t.exp.enqueue(s)
}

// clean makes v valid UTF-8 (OTLP strings must be) of at most maxValue
// bytes.
func clean(v string) string {
	if len(v) > maxValue {
		i := maxValue
		for i > 0 && !utf8.RuneStart(v[i]) {
			i--
		}
		v = v[:i]
	}
	if !utf8.ValidString(v) {
		v = string([]rune(v)) // each invalid byte becomes U+FFFD
	}
	return v
}

// Tracer makes spans and exports them. A nil *Tracer is tracing off.
type Tracer struct {
	sampler sampler
	exp     *exporter
}

// New returns the tracer cfg describes, with its exporter running, or nil
// (tracing off: no goroutine) when cfg has no endpoint or samples nothing.
// log gets the exporter's failures; it never sees a header value.
func New(cfg Config, log *slog.Logger) (*Tracer, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	smp, err := parseSampler(cfg.Sampler, cfg.SamplerArg)
	if err != nil {
		return nil, err
	}
	exp, err := newExporter(cfg, log)
	if err != nil {
		return nil, err
	}
	return &Tracer{sampler: smp, exp: exp}, nil
}

// Start starts a span named name, the child of the span in ctx (if any),
// and returns it with a context that carries it. On a nil Tracer it
// returns ctx and a nil span.
func (t *Tracer) Start(ctx context.Context, name string, kind Kind) (context.Context, *Span) {
	if t == nil {
		return ctx, nil
	}
	s := t.StartChild(FromContext(ctx).Context(), name, kind)
	return WithSpan(ctx, s), s
}

// StartChild starts a span whose parent is parent (a root span when
// parent is not valid).
func (t *Tracer) StartChild(parent SpanContext, name string, kind Kind) *Span {
	if t == nil {
		return nil
	}
	s := &Span{t: t, kind: kind, name: clean(name), start: time.Now().UnixNano()}
	if parent.IsValid() {
		s.sc.TraceID, s.parent, s.parentRemote = parent.TraceID, parent.SpanID, parent.Remote
	} else {
		s.sc.TraceID = newTraceID()
	}
	s.sc.SpanID = newSpanID()
	if t.sampler.sample(parent, s.sc.TraceID) {
		s.sc.Flags = flagSampled
	}
	return s
}

// Dropped is the number of spans dropped: the queue was full, or the
// tracer had been shut down.
func (t *Tracer) Dropped() uint64 {
	if t == nil {
		return 0
	}
	return t.exp.dropped.Load()
}

// Flush sends the spans ended so far and waits until they are sent (or
// ctx ends).
func (t *Tracer) Flush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.exp.Flush(ctx)
}

// Shutdown exports what is queued, within ctx's deadline, and stops the
// exporter; spans ended afterwards are dropped. Safe on a nil Tracer and
// to call twice.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.exp.shutdown(ctx)
}

func newTraceID() TraceID {
	var id TraceID
	for id == (TraceID{}) {
		_, _ = rand.Read(id[:])
	}
	return id
}

func newSpanID() SpanID {
	var id SpanID
	for id == (SpanID{}) {
		_, _ = rand.Read(id[:])
	}
	return id
}

type spanKey struct{}

// WithSpan returns ctx carrying s; ctx itself when s is nil.
func WithSpan(ctx context.Context, s *Span) context.Context {
	if s == nil {
		return ctx
	}
	return context.WithValue(ctx, spanKey{}, s)
}

// FromContext returns the span ctx carries, or nil.
func FromContext(ctx context.Context) *Span {
	s, _ := ctx.Value(spanKey{}).(*Span)
	return s
}

// Carry returns to with the span from carries, if any: a context detached
// from a request (a turn, a session's start) keeps the request's trace.
func Carry(to, from context.Context) context.Context {
	return WithSpan(to, FromContext(from))
}

// SetError marks s failed with err's message; nothing when err is nil.
func (s *Span) SetError(err error) {
	if err == nil || !s.recording() {
		return
	}
	s.SetStatus(StatusError, err.Error())
}

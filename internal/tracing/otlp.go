package tracing

import (
	"encoding/binary"
	"slices"
)

// The OTLP protobuf encoding of an export request, written by hand with a
// tiny wire writer. Field numbers are those of opentelemetry-proto
// (collector/trace/v1/trace_service.proto, trace/v1/trace.proto,
// common/v1/common.proto, resource/v1/resource.proto); the tests decode
// what this writes with the official Go types.

// Wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

// Field numbers.
const (
	// ExportTraceServiceRequest
	fReqResourceSpans = 1
	// ResourceSpans
	fRSResource   = 1
	fRSScopeSpans = 2
	// Resource
	fResAttributes = 1
	// ScopeSpans
	fSSScope = 1
	fSSSpans = 2
	// InstrumentationScope
	fScopeName    = 1
	fScopeVersion = 2
	// Span
	fSpanTraceID       = 1
	fSpanSpanID        = 2
	fSpanParentSpanID  = 4
	fSpanName          = 5
	fSpanKind          = 6
	fSpanStart         = 7
	fSpanEnd           = 8
	fSpanAttributes    = 9
	fSpanDroppedAttrs  = 10
	fSpanEvents        = 11
	fSpanDroppedEvents = 12
	fSpanStatus        = 15
	fSpanFlags         = 16
	// Span.Event
	fEventTime = 1
	fEventName = 2
	// Status
	fStatusMessage = 2
	fStatusCode    = 3
	// KeyValue
	fKVKey   = 1
	fKVValue = 2
	// AnyValue
	fAnyString = 1
	fAnyBool   = 2
	fAnyInt    = 3
)

// SpanFlags bits (trace.proto): the low byte is the W3C trace flags.
const (
	spanFlagsHasIsRemote = 0x100
	spanFlagsIsRemote    = 0x200
)

// wire appends protobuf fields to b.
type wire struct{ b []byte }

func (w *wire) tag(field, typ int) { w.b = binary.AppendUvarint(w.b, uint64(field)<<3|uint64(typ)) }

func (w *wire) uvarint(field int, v uint64) {
	if v == 0 {
		return // proto3 default
	}
	w.tag(field, wireVarint)
	w.b = binary.AppendUvarint(w.b, v)
}

func (w *wire) fixed64(field int, v uint64) {
	if v == 0 {
		return
	}
	w.tag(field, wireFixed64)
	w.b = binary.LittleEndian.AppendUint64(w.b, v)
}

func (w *wire) fixed32(field int, v uint32) {
	if v == 0 {
		return
	}
	w.tag(field, wireFixed32)
	w.b = binary.LittleEndian.AppendUint32(w.b, v)
}

func (w *wire) bytes(field int, v []byte) {
	if len(v) == 0 {
		return
	}
	w.tag(field, wireBytes)
	w.b = binary.AppendUvarint(w.b, uint64(len(v)))
	w.b = append(w.b, v...)
}

func (w *wire) str(field int, v string) {
	if v == "" {
		return
	}
	w.tag(field, wireBytes)
	w.b = binary.AppendUvarint(w.b, uint64(len(v)))
	w.b = append(w.b, v...)
}

// begin starts an embedded message (field number field); end closes it.
// The message is written in place and its length put in front of it
// afterwards, moving it by the length's few bytes.
func (w *wire) begin(field int) int {
	w.tag(field, wireBytes)
	return len(w.b)
}

func (w *wire) end(start int) {
	n := uint64(len(w.b) - start)
	var l [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(l[:], n)
	w.b = slices.Insert(w.b, start, l[:k]...)
}

// kv writes one KeyValue (as field field).
func (w *wire) kv(field int, a attr) {
	m := w.begin(field)
	w.str(fKVKey, a.key)
	v := w.begin(fKVValue)
	switch a.kind {
	case attrString:
		// An empty string is still a string value: written explicitly.
		w.tag(fAnyString, wireBytes)
		w.b = binary.AppendUvarint(w.b, uint64(len(a.s)))
		w.b = append(w.b, a.s...)
	case attrBool:
		w.tag(fAnyBool, wireVarint)
		w.b = binary.AppendUvarint(w.b, uint64(a.n))
	case attrInt:
		w.tag(fAnyInt, wireVarint)
		w.b = binary.AppendUvarint(w.b, uint64(a.n))
	}
	w.end(v)
	w.end(m)
}

// resource is what every request says of the process: its resource
// attributes and the instrumentation scope.
type resource struct {
	attrs                   []attr
	scopeName, scopeVersion string
}

// encodeRequest appends the ExportTraceServiceRequest of spans (ended
// spans: they no longer change) to b.
func encodeRequest(b []byte, res *resource, spans []*Span) []byte {
	w := wire{b: b}
	rs := w.begin(fReqResourceSpans)
	r := w.begin(fRSResource)
	for _, a := range res.attrs {
		w.kv(fResAttributes, a)
	}
	w.end(r)
	ss := w.begin(fRSScopeSpans)
	sc := w.begin(fSSScope)
	w.str(fScopeName, res.scopeName)
	w.str(fScopeVersion, res.scopeVersion)
	w.end(sc)
	for _, s := range spans {
		w.span(s)
	}
	w.end(ss)
	w.end(rs)
	return w.b
}

func (w *wire) span(s *Span) {
	m := w.begin(fSSSpans)
	w.bytes(fSpanTraceID, s.sc.TraceID[:])
	w.bytes(fSpanSpanID, s.sc.SpanID[:])
	if s.parent != (SpanID{}) {
		w.bytes(fSpanParentSpanID, s.parent[:])
	}
	w.str(fSpanName, s.name)
	w.uvarint(fSpanKind, uint64(s.kind))
	w.fixed64(fSpanStart, uint64(s.start))
	w.fixed64(fSpanEnd, uint64(s.end))
	for _, a := range s.attrs {
		w.kv(fSpanAttributes, a)
	}
	w.uvarint(fSpanDroppedAttrs, uint64(s.droppedAttrs))
	for _, e := range s.events {
		ev := w.begin(fSpanEvents)
		w.fixed64(fEventTime, uint64(e.at))
		w.str(fEventName, e.name)
		w.end(ev)
	}
	w.uvarint(fSpanDroppedEvents, uint64(s.droppedEvents))
	if s.status != StatusUnset {
		st := w.begin(fSpanStatus)
		w.str(fStatusMessage, s.statusMsg)
		w.uvarint(fStatusCode, uint64(s.status))
		w.end(st)
	}
	flags := uint32(s.sc.Flags) | spanFlagsHasIsRemote
	if s.parentRemote {
		flags |= spanFlagsIsRemote
	}
	w.fixed32(fSpanFlags, flags)
	w.end(m)
}

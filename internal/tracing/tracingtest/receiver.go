// Package tracingtest is test support for traces: a real OTLP/HTTP receiver
// on 127.0.0.1 that decodes what it gets with the official OpenTelemetry
// protobuf types (go.opentelemetry.io/proto/otlp), so a test checks the
// spans a collector would see. Only tests import it.
package tracingtest

import (
	"bytes"
	"compress/gzip"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span with the resource it came with.
type Span struct {
	*tracev1.Span
	Resource map[string]string
	Scope    string
}

// Attr returns the attribute key of s as a string ("" when absent): a
// string value, an int in decimal, a bool as true/false.
func (s Span) Attr(key string) string { return attrString(s.Attributes, key) }

func attrString(kvs []*commonv1.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.Key != key {
			continue
		}
		switch v := kv.Value.GetValue().(type) {
		case *commonv1.AnyValue_StringValue:
			return v.StringValue
		case *commonv1.AnyValue_IntValue:
			return itoa(v.IntValue)
		case *commonv1.AnyValue_BoolValue:
			if v.BoolValue {
				return "true"
			}
			return "false"
		}
	}
	return ""
}

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	neg := n < 0
	if neg {
		n = -n
	}
	var b []byte
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	if neg {
		b = append([]byte{'-'}, b...)
	}
	return string(b)
}

// Receiver is an OTLP/HTTP trace receiver.
type Receiver struct {
	// URL is its base endpoint (for OTEL_EXPORTER_OTLP_ENDPOINT);
	// spans are POSTed to URL/v1/traces.
	URL string
	// CertPEM is the certificate of a TLS receiver (NewTLSReceiver), to
	// trust it with.
	CertPEM []byte

	t  testing.TB
	mu sync.Mutex
	// changed is closed and replaced whenever spans arrive.
	changed  chan struct{}
	spans    []Span
	requests []*http.Request
	// Status, when set, is the answer to every request (an error from
	// the collector); Block, when set, holds each request until closed.
	status int
	block  chan struct{}
}

// NewReceiver starts a receiver, closed when the test ends.
func NewReceiver(t testing.TB) *Receiver { return newReceiver(t, false) }

// NewTLSReceiver starts a receiver that speaks HTTPS, with a certificate
// of its own (CertPEM).
func NewTLSReceiver(t testing.TB) *Receiver { return newReceiver(t, true) }

func newReceiver(t testing.TB, useTLS bool) *Receiver {
	r := &Receiver{t: t, changed: make(chan struct{})}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	if useTLS {
		srv.StartTLS()
		r.CertPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	} else {
		srv.Start()
	}
	t.Cleanup(func() {
		r.mu.Lock()
		if r.block != nil {
			select {
			case <-r.block:
			default:
				close(r.block)
			}
		}
		r.mu.Unlock()
		srv.Close()
	})
	r.URL = srv.URL
	return r
}

// Fail makes the receiver answer every request with status.
func (r *Receiver) Fail(status int) {
	r.mu.Lock()
	r.status = status
	r.mu.Unlock()
}

// Block holds every request until the returned function is called.
func (r *Receiver) Block() (release func()) {
	ch := make(chan struct{})
	r.mu.Lock()
	r.block = ch
	r.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	block, status := r.block, r.status
	r.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-req.Context().Done():
			return
		}
	}
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "want POST /v1/traces", http.StatusNotFound)
		r.t.Errorf("receiver: %s %s", req.Method, req.URL.Path)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "bad content type", http.StatusUnsupportedMediaType)
		r.t.Errorf("receiver: Content-Type %q", ct)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			r.t.Errorf("receiver: gzip: %v", err)
			http.Error(w, "bad gzip", http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	// TracesData is, on the wire, the same message as the collector's
	// ExportTraceServiceRequest (field 1: repeated ResourceSpans); the
	// collector package would pull gRPC into the tests.
	var data tracev1.TracesData
	if err := (proto.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(raw, &data); err != nil {
		r.t.Errorf("receiver: the body does not decode as OTLP: %v", err)
		http.Error(w, "bad protobuf", http.StatusBadRequest)
		return
	}
	if len(data.ProtoReflect().GetUnknown()) > 0 {
		r.t.Errorf("receiver: unknown fields in the request")
	}
	var got []Span
	for _, rs := range data.ResourceSpans {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.Key] = attrString(rs.Resource.Attributes, kv.Key)
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				got = append(got, Span{Span: s, Resource: res, Scope: ss.GetScope().GetName()})
			}
		}
	}
	r.mu.Lock()
	r.requests = append(r.requests, req.Clone(req.Context()))
	if status == 0 {
		r.spans = append(r.spans, got...)
	}
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	if status != 0 {
		http.Error(w, "failing on purpose", status)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Requests returns the export requests received so far (their headers).
func (r *Receiver) Requests() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*http.Request(nil), r.requests...)
}

// Wait waits until until holds for the spans received, and returns them;
// the test fails when its context ends first.
func (r *Receiver) Wait(until func([]Span) bool) []Span {
	r.t.Helper()
	for {
		r.mu.Lock()
		spans, ch := append([]Span(nil), r.spans...), r.changed
		r.mu.Unlock()
		if until(spans) {
			return spans
		}
		select {
		case <-ch:
		case <-r.t.Context().Done():
			r.t.Fatalf("receiver: gave up waiting; got %d spans: %v", len(spans), Names(spans))
		}
	}
}

// Named returns the spans named name.
func Named(spans []Span, name string) []Span {
	var out []Span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Names lists the spans' names.
func Names(spans []Span) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name
	}
	return out
}

// Has reports whether some span is named name.
func Has(name string) func([]Span) bool {
	return func(spans []Span) bool { return len(Named(spans, name)) > 0 }
}

// ByID indexes spans by span id.
func ByID(spans []Span) map[string]Span {
	m := map[string]Span{}
	for _, s := range spans {
		m[string(s.SpanId)] = s
	}
	return m
}

// ParentOf returns the parent of s among spans.
func ParentOf(spans []Span, s Span) (Span, bool) {
	p, ok := ByID(spans)[string(s.ParentSpanId)]
	return p, ok && bytes.Equal(p.TraceId, s.TraceId)
}

package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/tracing"
	"github.com/agentbox/agentbox/internal/tracing/tracingtest"
)

// TestTracingMiddleware: each request is one server span named by its
// route pattern (or its method alone when no route matches), never by its
// path; a valid traceparent is the span's parent, a malformed or repeated
// one starts a new trace; the response carries the span's traceparent.
func TestTracingMiddleware(t *testing.T) {
	rcv := tracingtest.NewReceiver(t)
	tr, err := tracing.New(tracing.Config{Endpoint: rcv.URL + "/v1/traces"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, Config{Tracer: tr})
	const trace, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	valid := "00-" + trace + "-" + parent + "-01"
	for _, tc := range []struct {
		method, path string
		traceparent  []string
		name         string
		status       string
		child        bool // of the valid traceparent
	}{
		{"GET", "/v1/health", []string{valid}, "GET /v1/health", "200", true},
		{"GET", "/v1/sessions/ses_doesnotexist", nil, "GET /v1/sessions/{id}", "404", false},
		{"GET", "/v1/sessions/ses_other", []string{strings.ToUpper(valid)}, "GET /v1/sessions/{id}", "404", false},
		{"GET", "/v1/sessions/ses_third", []string{valid, valid}, "GET /v1/sessions/{id}", "404", false},
		{"GET", "/no/such/route/123", nil, "GET", "404", false},
		{"BREW", "/v1/health", nil, "HTTP", "405", false},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), tc.method, h.srv.URL+tc.path, nil)
		for _, v := range tc.traceparent {
			req.Header.Add("Traceparent", v)
		}
		resp, err := h.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		tp, ok := tracing.ParseTraceparent(resp.Header.Get("Traceparent"))
		if !ok {
			t.Fatalf("%s %s: response traceparent %q", tc.method, tc.path, resp.Header.Get("Traceparent"))
		}
		if got := tp.TraceID.String() == trace; got != tc.child {
			t.Errorf("%s %s %q: in the client's trace %v, want %v", tc.method, tc.path, tc.traceparent, got, tc.child)
		}
	}
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Spans()
	if len(spans) != 6 {
		t.Fatalf("%d spans: %q", len(spans), tracingtest.Names(spans))
	}
	// Ended in any order: found by method and path.
	byReq := map[string]tracingtest.Span{}
	for _, s := range spans {
		byReq[s.Attr("http.request.method")+" "+s.Attr("url.path")] = s
	}
	for i, want := range []struct{ req, name string }{
		{"GET /v1/health", "GET /v1/health"},
		{"GET /v1/sessions/ses_doesnotexist", "GET /v1/sessions/{id}"},
		{"GET /v1/sessions/ses_other", "GET /v1/sessions/{id}"},
		{"GET /v1/sessions/ses_third", "GET /v1/sessions/{id}"},
		{"GET /no/such/route/123", "GET"},
		{"OTHER /v1/health", "HTTP"},
	} {
		s, ok := byReq[want.req]
		if !ok || s.Name != want.name || s.Kind != 2 {
			t.Errorf("%s: span %q kind %v, want %q", want.req, s.Name, s.Kind, want.name)
			continue
		}
		child := fmt.Sprintf("%x", s.ParentSpanId) == parent
		if child != (i == 0) {
			t.Errorf("span %q: parent %x", s.Name, s.ParentSpanId)
		}
	}
	spans[1] = byReq["GET /v1/sessions/ses_doesnotexist"]
	if got := spans[1].Attr("http.response.status_code"); got != "404" {
		t.Errorf("status attribute %q", got)
	}
	if got := spans[1].Attr("url.path"); got != "/v1/sessions/ses_doesnotexist" {
		t.Errorf("url.path %q", got)
	}
}

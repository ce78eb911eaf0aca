package vendortest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHandlerRefuses: a request or an answer the document does not allow
// fails the test; an allowed one does not.
func TestHandlerRefuses(t *testing.T) {
	spec := LoadSpec(t, "../e2b/testdata/openapi.yml", "Error")
	created := `{"templateID":"base","sandboxID":"i1","clientID":"c","envdVersion":"0.4.0"}`
	for _, tc := range []struct {
		name, method, path, body, answer string
		status                           int
		fail                             string // what the report says; empty when none
	}{
		{"valid", "POST", "/sandboxes", `{"templateID":"base","timeout":60}`, created, 201, ""},
		{"missing required field", "POST", "/sandboxes", `{"timeout":60}`, created, 201, "a request the document does not allow"},
		{"negative timeout", "POST", "/sandboxes", `{"templateID":"base","timeout":-1}`, created, 201, "a request the document does not allow"},
		{"wrong type", "POST", "/sandboxes", `{"templateID":"base","metadata":{"a":1}}`, created, 201, "a request the document does not allow"},
		{"limit above the maximum", "GET", "/v2/sandboxes?limit=1000", "", `[]`, 200, "a request the document does not allow"},
		{"unknown state", "GET", "/v2/sandboxes?state=dead", "", `[]`, 200, "a request the document does not allow"},
		{"unknown operation", "POST", "/sandboxes/i1/explode", "", "", 200, "no such operation"},
		{"answer misses a required field", "POST", "/sandboxes", `{"templateID":"base"}`, `{"sandboxID":"i1"}`, 201, "an answer the document does not allow"},
		{"undocumented status", "POST", "/sandboxes", `{"templateID":"base"}`, `{"code":418,"message":"x"}`, 418, "an answer the document does not allow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &Recorder{TB: t}
			h := spec.Handler(rec, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.answer))
			}))
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			req.Header.Set("X-API-Key", "k")
			h.ServeHTTP(httptest.NewRecorder(), req)
			got := rec.Reports()
			if tc.fail == "" && got != "" {
				t.Errorf("reported: %s", got)
			}
			if tc.fail != "" && !strings.Contains(got, tc.fail) {
				t.Errorf("reported %q, want %q", got, tc.fail)
			}
		})
	}
}

// TestFaultBody: an injected fault may have any status, but its body must
// be the document's error.
func TestFaultBody(t *testing.T) {
	spec := LoadSpec(t, "../e2b/testdata/openapi.yml", "Error")
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{"code":429,"message":"slow down"}`, true},
		{`{"message":"slow down"}`, false},
		{`slow down`, false},
	} {
		rec := &Recorder{TB: t}
		h := spec.Handler(rec, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			MarkFault(r)
			w.WriteHeader(429)
			_, _ = w.Write([]byte(tc.body))
		}))
		req := httptest.NewRequest("GET", "/sandboxes/i1", nil)
		h.ServeHTTP(httptest.NewRecorder(), req)
		if ok := rec.Reports() == ""; ok != tc.ok {
			t.Errorf("fault body %s: reports %v", tc.body, rec.Reports())
		}
	}
}

func TestBoxPath(t *testing.T) {
	b := &Box{Root: "/r", Home: "/home/user"}
	for _, tc := range []struct{ in, want string }{
		{"agentbox", "/r/agentbox"},
		{"/home/user/.agentbox/token", "/r/.agentbox/token"},
		{"/etc/passwd", ""},
		{"../x", ""},
		{"a/../../x", ""},
		{"/home/user/../x", ""},
		{"", ""},
	} {
		got, err := b.Path(tc.in)
		if (err != nil) != (tc.want == "") || (err == nil && got != tc.want) {
			t.Errorf("Path(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// TestBoxPorts: an address inside the box, loopback or any, becomes the
// box's loopback host port for the same sandbox port.
func TestBoxPorts(t *testing.T) {
	b, err := NewBox("/home/user")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Kill)
	hp, err := b.Port(49999)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("serve --listen 127.0.0.1:%d; curl 127.0.0.1:%d x", hp, hp)
	for _, in := range []string{"serve --listen 0.0.0.0:49999; curl 127.0.0.1:49999 x", "serve --listen 127.0.0.1:49999; curl 0.0.0.0:49999 x"} {
		if got, err := b.rewritePorts(in); err != nil || got != want {
			t.Errorf("rewritePorts(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := b.rewritePorts("0.0.0.0:70000"); err == nil {
		t.Error("port 70000 accepted")
	}
}

package vendorapi

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/provider"
)

func TestStatusError(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   error
		msg    string
	}{
		{401, `{"code":401,"message":"Invalid API key"}`, provider.ErrCredentials, "Invalid API key"},
		{403, `{"statusCode":403,"message":["cpu too large","memory too large"]}`, provider.ErrCredentials, "cpu too large; memory too large"},
		{429, `{"code":429,"message":"you have reached the maximum number of concurrent E2B sandboxes (20)"}`, provider.ErrQuota, "maximum number of concurrent"},
		{404, `{"message":"sandbox not found"}`, provider.ErrGone, "sandbox not found"},
		{502, `<html>bad gateway</html>`, provider.ErrUnavailable, "<html>bad gateway</html>"},
		{400, `{"message":"template 'x' not found"}`, nil, "template 'x' not found"},
		{500, ``, provider.ErrUnavailable, "(no message)"},
		{429, `{"error":{"code":"too_many_requests","message":"Rate limit exceeded"}}`, provider.ErrQuota, "Rate limit exceeded (too_many_requests)"},
		{404, `{"error":{"message":"Sandbox not found"}}`, provider.ErrGone, "Sandbox not found"},
		{400, `{"statusCode":400,"message":"bad input","error":"Bad Request"}`, nil, "bad input"},
		{400, `{"error":"Bad Request"}`, nil, `{"error":"Bad Request"}`},
	} {
		err := StatusError("vendor", tc.status, []byte(tc.body))
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%d: %v, want %v", tc.status, err, tc.want)
		}
		if tc.want == nil {
			for _, s := range []error{provider.ErrCredentials, provider.ErrQuota, provider.ErrGone, provider.ErrUnavailable} {
				if errors.Is(err, s) {
					t.Errorf("%d: %v is %v", tc.status, err, s)
				}
			}
		}
		if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%d: %v, want the message %q", tc.status, err, tc.msg)
		}
	}
}

// FuzzStatusError: any error answer maps to a bounded, printable text
// with the status's sentinel.
func FuzzStatusError(f *testing.F) {
	f.Add(429, []byte(`{"code":429,"message":"slow down"}`))
	f.Add(400, []byte(`{"statusCode":400,"message":["a","b"]}`))
	f.Add(573, []byte("\xff\xfe\x00\x1b[31m"))
	f.Add(429, []byte(`{"error":{"code":"x\u001b","message":"slow\ndown"}}`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if status < 400 || status > 599 {
			return
		}
		err := StatusError("vendor", status, body)
		msg := err.Error()
		if utf8.RuneCountInString(msg) > 400 || strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			t.Fatalf("message %q", msg)
		}
		if status == 429 && !errors.Is(err, provider.ErrQuota) {
			t.Fatalf("429: %v", err)
		}
		if status >= 500 && !errors.Is(err, provider.ErrUnavailable) {
			t.Fatalf("%d: %v", status, err)
		}
	})
}

func TestBaseURL(t *testing.T) {
	for _, tc := range []struct{ raw, want, err string }{
		{raw: "", want: "https://api.example.com"},
		{raw: "http://127.0.0.1:8080//", want: "http://127.0.0.1:8080"},
		{raw: "https://self.hosted/api/", want: "https://self.hosted/api"},
		{raw: "ftp://api.example.com", err: `v: API URL "ftp://api.example.com": want http(s)://host`},
		{raw: "https://", err: "want http(s)://host"},
		{raw: "api.example.com", err: "want http(s)://host"},
		{raw: "http://[::1", err: "want http(s)://host"},
	} {
		got, err := BaseURL("v", tc.raw, "https://api.example.com/")
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("BaseURL(%q) = %q, %v; want an error with %q", tc.raw, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("BaseURL(%q) = %q, %v; want %q", tc.raw, got, err, tc.want)
		}
	}
}

// TestServeScript: the scripts the vendors' sandboxes run are the ones
// each provider ran before they shared them.
func TestServeScript(t *testing.T) {
	for _, tc := range []struct {
		serve Serve
		want  string
	}{
		{Serve{Dir: "$HOME", Cd: true, Listen: "127.0.0.1"},
			`cd "$HOME" && chmod 755 agentbox && chmod 700 .agentbox && chmod 600 .agentbox/token && exec ./agentbox serve --listen 127.0.0.1:49999 --allowed-hosts '*' --data-dir "$HOME/.agentbox"`},
		{Serve{Dir: "$PWD", Listen: "0.0.0.0", TokenEnv: true},
			`chmod 755 agentbox && chmod 700 .agentbox && chmod 600 .agentbox/token && AGENTBOX_TOKEN="$(cat .agentbox/token)" exec ./agentbox serve --listen 0.0.0.0:49999 --allowed-hosts '*' --data-dir "$PWD/.agentbox"`},
	} {
		if got := tc.serve.Script(); got != tc.want {
			t.Errorf("%+v:\n got %s\nwant %s", tc.serve, got, tc.want)
		}
	}
}

func TestRequire(t *testing.T) {
	for _, tc := range []struct {
		settings []Setting
		want     string
	}{
		{[]Setting{{"A", "a"}, {"B", "b"}}, ""},
		{[]Setting{{"A", ""}, {"B", "b"}}, "A is not set"},
		{[]Setting{{"A", ""}, {"B", "b"}, {"C", ""}}, "A, C are not set"},
	} {
		err := Require(tc.settings...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Require(%v) = %v", tc.settings, err)
		case tc.want != "" && (!errors.Is(err, provider.ErrCredentials) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Require(%v) = %v, want ErrCredentials with %q", tc.settings, err, tc.want)
		}
	}
}

// TestDo: a request carries the client's credential and scope and its own
// query, header and body; the answer's status, size and JSON are checked;
// an Endpoint carries none of the client's credential or scope.
func TestDo(t *testing.T) {
	var seen *http.Request
	var seenBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen, seenBody = r, string(b)
		switch r.URL.Path {
		case "/ok":
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"id":"x"}`))
		case "/empty":
			w.WriteHeader(http.StatusOK)
		case "/quota":
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"message":"slow down"}`))
		case "/large":
			_, _ = w.Write([]byte(strings.Repeat(" ", MaxAnswer+1)))
		}
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient("v", Settings{APIURL: srv.URL + "/", DefaultAPIURL: "https://unused"}, http.Header{"X-Api-Key": {"secret"}})
	if err != nil {
		t.Fatal(err)
	}
	c.Query = map[string]string{"teamId": "t"}
	if c.RequestTimeout != DefaultRequestTimeout || c.HTTP == nil || c.BaseURL != srv.URL {
		t.Fatalf("defaults: %+v", c)
	}
	var out struct{ ID string }
	err = c.Do(t.Context(), Request{Method: http.MethodPost, Path: "/ok", Query: map[string]string{"a": "1"}, Header: http.Header{"x-one": {"1"}}, JSON: map[string]int{"n": 1}, Want: http.StatusCreated, Out: &out})
	if err != nil || out.ID != "x" {
		t.Fatalf("Do = %v, %+v", err, out)
	}
	if seen.URL.RawQuery != "a=1&teamId=t" || seen.Header.Get("X-Api-Key") != "secret" || seen.Header.Get("X-One") != "1" ||
		seen.Header.Get("Content-Type") != "application/json" || seenBody != `{"n":1}` {
		t.Errorf("request: query %q, header %v, body %q", seen.URL.RawQuery, seen.Header, seenBody)
	}
	for _, tc := range []struct {
		name  string
		req   Request
		empty bool
		want  error
		msg   string
	}{
		{"another status than the one wanted", Request{Method: http.MethodGet, Path: "/ok", Want: http.StatusOK}, false, nil, "v answered 201"},
		{"any 2xx", Request{Method: http.MethodGet, Path: "/ok"}, false, nil, ""},
		{"an error answer", Request{Method: http.MethodGet, Path: "/quota"}, false, provider.ErrQuota, "v answered 429: slow down"},
		{"an answer too large", Request{Method: http.MethodGet, Path: "/large"}, false, provider.ErrUnavailable, "answer larger than"},
		{"an empty answer", Request{Method: http.MethodGet, Path: "/empty", Out: &out}, false, provider.ErrUnavailable, "not the documented JSON"},
		{"an empty answer allowed", Request{Method: http.MethodGet, Path: "/empty", Out: &out}, true, nil, ""},
		{"an empty answer unread", Request{Method: http.MethodGet, Path: "/empty"}, false, nil, ""},
	} {
		c.EmptyAnswer = tc.empty
		err := c.Do(t.Context(), tc.req)
		switch {
		case tc.msg == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.msg != "" && (err == nil || !strings.Contains(err.Error(), tc.msg) || (tc.want != nil && !errors.Is(err, tc.want))):
			t.Errorf("%s: %v, want %v with %q", tc.name, err, tc.want, tc.msg)
		}
	}
	e := c.Endpoint("inner", srv.URL+"/", http.Header{"X-Access-Token": {"tok"}})
	if err := e.Do(t.Context(), Request{Method: http.MethodGet, Path: "/ok"}); err != nil {
		t.Fatal(err)
	}
	if seen.Header.Get("X-Api-Key") != "" || seen.URL.Query().Has("teamId") || seen.Header.Get("X-Access-Token") != "tok" {
		t.Errorf("an endpoint's request: query %q, header %v", seen.URL.RawQuery, seen.Header)
	}
	if err := e.Do(t.Context(), Request{Method: http.MethodGet, Path: "/quota"}); err == nil || !strings.HasPrefix(err.Error(), provider.ErrQuota.Error()+": inner answered 429") {
		t.Errorf("an endpoint's error: %v", err)
	}
}

// TestDoTimeout: a request that gets no answer within the bound is
// ErrUnavailable, saying it timed out.
func TestDoTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	c, err := NewClient("v", Settings{APIURL: srv.URL, RequestTimeout: 50 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Do(t.Context(), Request{Method: http.MethodGet, Path: "/"}); !errors.Is(err, provider.ErrUnavailable) || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("Do = %v, want ErrUnavailable, timed out", err)
	}
}

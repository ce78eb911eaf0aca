package httpapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/logging"
	"github.com/agentbox/agentbox/internal/metrics"
)

// newJSONLogHarness is a harness whose server logs JSON lines at debug.
func newJSONLogHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t, eng: newFakeEngine(), m: metrics.New(), logs: &syncBuffer{}, tok: cfg.Token}
	log, err := logging.New(h.logs, "json", slog.LevelDebug)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = httptest.NewServer(New(cfg, h.eng, h.m, log))
	h.hc = &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() {
		h.hc.CloseIdleConnections()
		h.srv.Close()
	})
	return h
}

var generatedID = regexp.MustCompile(`^[0-9a-f]{16}$`)

// TestRequestLogs: every line a request logs is a JSON object with the
// request's id, which the response carries as X-Request-Id; a sane inbound
// id is kept; each request has one access line with its route pattern, not
// its path or query; the token is in no line, whether sent as a header or
// in a query.
func TestRequestLogs(t *testing.T) {
	h := newJSONLogHarness(t, Config{Token: testToken})
	ids := map[string]bool{}
	check := func(r response) {
		t.Helper()
		id := r.Header.Get("X-Request-Id")
		if id == "" {
			t.Fatalf("%s %s: no X-Request-Id", r.Request.Method, r.Request.URL)
		}
		ids[id] = true
	}
	check(h.do("GET", "/v1/health", ""))
	s := h.createSession()
	_ = s
	check(h.do("GET", "/v1/sessions/ses_nope?access_token="+testToken, ""))
	check(h.do("GET", "/v1/agents?access_token="+testToken, "", "Authorization", ""))
	check(h.do("GET", "/no/such/route", ""))
	r := h.do("GET", "/v1/health", "", "X-Request-Id", "0190a5e4-7c3b-7d2e-9f00-1a2b3c4d5e6f")
	if got := r.Header.Get("X-Request-Id"); got != "0190a5e4-7c3b-7d2e-9f00-1a2b3c4d5e6f" {
		t.Fatalf("a sane inbound X-Request-Id became %q", got)
	}
	check(r)
	h.eng.failWith = errors.New("boom in the engine")
	r = h.do("GET", "/v1/sessions/ses_1", "")
	check(r)
	var p struct{ Instance string }
	if err := json.Unmarshal(r.body, &p); err != nil || p.Instance != "urn:agentbox:request:"+r.Header.Get("X-Request-Id") {
		t.Fatalf("500 problem instance %q (%v), want the request id %q", p.Instance, err, r.Header.Get("X-Request-Id"))
	}

	logs := h.logs.String()
	if strings.Contains(logs, testToken) {
		t.Fatalf("the token is in the log:\n%s", logs)
	}
	access := map[string]int{}
	sawError := false
	for line := range strings.Lines(logs) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %v\n%s", err, line)
		}
		id, _ := rec[logging.RequestIDKey].(string)
		if id == "" {
			t.Fatalf("log line without %s: %s", logging.RequestIDKey, line)
		}
		switch rec["msg"] {
		case "http request":
			access[id]++
			if route, _ := rec["route"].(string); strings.Contains(route, "ses_") || strings.Contains(route, "?") {
				t.Errorf("access line has the path, not the route pattern: %s", line)
			}
			for _, k := range []string{"method", "route", "status", "duration"} {
				if _, ok := rec[k]; !ok {
					t.Errorf("access line without %s: %s", k, line)
				}
			}
		case "internal error":
			sawError = true
			if id != r.Header.Get("X-Request-Id") {
				t.Errorf("error line has id %s, the request %s", id, r.Header.Get("X-Request-Id"))
			}
		}
	}
	if !sawError {
		t.Fatalf("no internal error line:\n%s", logs)
	}
	for id := range ids {
		if access[id] != 1 {
			t.Errorf("request %s has %d access lines, want 1", id, access[id])
		}
	}
}

// TestHostileRequestID: an inbound X-Request-Id that is too long or has a
// character outside the allowlist (escape sequences, spaces, quotes,
// non-ASCII) is replaced, never echoed nor logged; raw TCP, since Go's
// client refuses to send most of them.
func TestHostileRequestID(t *testing.T) {
	h := newJSONLogHarness(t, Config{})
	for _, id := range []string{
		"\x1b[31mred\x1b[0m",
		"\x1b]52;c;aGk=\x07",
		strings.Repeat("a", 10<<10),
		strings.Repeat("b", logging.MaxRequestIDLen+1),
		"two words",
		`"quoted"`,
		"k=v",
		"id\u202e",
		"ⅰd",
		"a\tb",
		"nul\x00",
	} {
		conn, err := net.Dial("tcp", h.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-Id: %s\r\nConnection: close\r\n\r\n", id)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%q: %v", id, err)
		}
		resp.Body.Close()
		conn.Close()
		got := resp.Header.Get("X-Request-Id")
		if resp.StatusCode == http.StatusOK && !generatedID.MatchString(got) {
			t.Errorf("X-Request-Id %q answered with %q, want a new id", id, got)
		}
		if got != "" && (got == id || strings.Contains(id, got)) {
			t.Errorf("X-Request-Id %q echoed as %q", id, got)
		}
	}
	logs := h.logs.String()
	for _, bad := range []string{"\x1b", "red", "aGk", strings.Repeat("a", 100), strings.Repeat("b", logging.MaxRequestIDLen+1), "two words", "ⅰd", "\u202e", `\u202e`} {
		if strings.Contains(logs, bad) {
			t.Errorf("the log has %q:\n%s", bad, logs)
		}
	}
}

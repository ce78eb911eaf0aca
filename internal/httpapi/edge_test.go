package httpapi

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// rawResponse sends req as raw bytes over a new TCP connection to the
// harness's server (half-closing it when closeWrite, as a client that
// stops sending does) and reads one response.
func (h *harness) raw(req string, closeWrite bool) (*http.Response, []byte) {
	h.t.Helper()
	conn, err := net.Dial("tcp", h.srv.Listener.Addr().String())
	if err != nil {
		h.t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	req = strings.Replace(req, "Host: HOST", "Host: "+h.srv.Listener.Addr().String(), 1)
	if _, err := io.WriteString(conn, req); err != nil {
		h.t.Fatal(err)
	}
	if closeWrite {
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			h.t.Fatal(err)
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		h.t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// checkProblem asserts a problem+json answer of status and type.
func checkProblem(t *testing.T, resp *http.Response, body []byte, status int, typ string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d; headers %v; body: %s", resp.StatusCode, status, resp.Header, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != problemContentType {
		t.Fatalf("Content-Type %q, want %s; body: %s", ct, problemContentType, body)
	}
	var p client.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("decode problem %s: %v", body, err)
	}
	if p.Type != typ || p.Status != status {
		t.Fatalf("problem = %+v, want type %s status %d", p, typ, status)
	}
}

// TestBrokenBodies: a body that ends before its Content-Length, or whose
// chunked framing is malformed, is the client's fault: 400, and nothing at
// error level in the log.
func TestBrokenBodies(t *testing.T) {
	const head = "POST /v1/sessions HTTP/1.1\r\nHost: HOST\r\nContent-Type: application/json\r\n"
	body := `{"agent":"mock"}`
	tests := []struct {
		name       string
		req        string
		closeWrite bool
	}{
		{"short body", head + "Content-Length: 100\r\n\r\n" + body, true},
		{"bad chunk size", head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n" + body + "\r\n0\r\n\r\n", false},
		{"chunk longer than said", head + "Transfer-Encoding: chunked\r\n\r\n3\r\n" + body + "\r\n0\r\n\r\n", false},
		{"cut inside a chunk", head + "Transfer-Encoding: chunked\r\n\r\n40\r\n" + body, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Config{})
			resp, b := h.raw(tc.req, tc.closeWrite)
			defer resp.Body.Close()
			checkProblem(t, resp, b, http.StatusBadRequest, client.ProblemBadRequest)
			if logs := h.logs.String(); strings.Contains(logs, "level=ERROR") {
				t.Fatalf("a client's broken body was logged as an error:\n%s", logs)
			}
		})
	}
	// A whole body still works over the same raw client.
	h := newHarness(t, Config{})
	resp, b := h.raw(head+"Content-Length: "+strconv.Itoa(len(body))+"\r\nConnection: close\r\n\r\n"+body, false)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("whole body: status %d: %s", resp.StatusCode, b)
	}
}

// TestInvalidUTF8Refused: a JSON body with bytes that are not UTF-8 (which
// encoding/json would silently turn into U+FFFD) is refused with 422, on
// every route that takes a body.
func TestInvalidUTF8Refused(t *testing.T) {
	h := newHarness(t, Config{})
	tests := []struct{ name, method, path, body string }{
		{"create", "POST", "/v1/sessions", "{\"agent\":\"mock\",\"metadata\":{\"k\":\"a\xffb\"}}"},
		{"in a key", "POST", "/v1/sessions", "{\"agent\":\"mock\",\"metadata\":{\"\xff\":\"v\"}}"},
		{"message", "POST", "/messages", "{\"text\":\"hi \xc3\x28 there\"}"},
		{"truncated rune at the end of a string", "POST", "/messages", "{\"text\":\"\xe2\x82\"}"},
		{"surrogate half encoded as UTF-8", "POST", "/messages", "{\"text\":\"\xed\xa0\x80\"}"},
		{"update", "PATCH", "", "{\"model\":\"\xfe\"}"},
		{"exec", "POST", "/v1/exec", "{\"argv\":[\"echo\",\"\xff\"]}"},
		{"escaped lone high surrogate", "POST", "/messages", `{"text":"a\ud800b"}`},
		{"escaped high surrogate at the end", "POST", "/messages", `{"text":"a\uD83D"}`},
		{"escaped high surrogate then another escape", "POST", "/messages", `{"text":"\ud83d\n"}`},
		{"escaped lone low surrogate", "POST", "/messages", `{"text":"\udc00"}`},
		{"escaped lone surrogate in a key", "POST", "/v1/sessions", `{"agent":"mock","metadata":{"\udfff":"v"}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if !strings.HasPrefix(path, "/v1/") {
				path = "/v1/sessions/" + h.createSession().ID + path
			}
			r := h.do(tc.method, path, tc.body)
			p := r.problem(t, http.StatusUnprocessableEntity, client.ProblemValidation)
			if !strings.Contains(p.Detail, "UTF-8") && !strings.Contains(p.Detail, "surrogate") {
				t.Fatalf("detail %q does not say why", p.Detail)
			}
		})
	}
	// Valid multi-byte UTF-8 passes, and so do escaped surrogate pairs, an
	// escaped backslash before "ud800", and U+FFFD itself.
	for _, body := range []string{
		`{"agent":"mock","metadata":{"k":"héllo ✓ 𝄞"}}`,
		`{"agent":"mock","metadata":{"k":"\ud834\udd1e \uD83D\uDE00"}}`,
		`{"agent":"mock","metadata":{"k":"\\ud800"}}`,
		`{"agent":"mock","metadata":{"k":"\ufffd �"}}`,
	} {
		h.do("POST", "/v1/sessions", body).ok(t, 201, nil)
	}
}

// TestUncleanPathsAreProblems: a path with empty, "." or ".." segments
// (raw or percent-encoded) gets a problem, never net/http's HTML redirect.
func TestUncleanPathsAreProblems(t *testing.T) {
	h := newHarness(t, Config{})
	paths := []string{
		"/v1/sessions/../../etc/passwd",
		"/v1/sessions/../health",
		"/v1/../v1/health",
		"/v1//sessions",
		"//v1/sessions",
		"/v1/./sessions",
		"/v1/sessions/.",
		"/v1/sessions/%2e%2e/%2e%2e/etc/passwd",
		"/v1/sessions/%2E./x",
		"/v1/sessions/x/..",
	}
	for _, p := range paths {
		for _, method := range []string{"GET", "POST"} {
			t.Run(method+" "+p, func(t *testing.T) {
				req := method + " " + p + " HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\n"
				if method == "POST" {
					req += "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
				} else {
					req += "\r\n"
				}
				resp, b := h.raw(req, false)
				defer resp.Body.Close()
				if resp.Header.Get("Location") != "" {
					t.Fatalf("redirect to %q", resp.Header.Get("Location"))
				}
				checkProblem(t, resp, b, http.StatusBadRequest, client.ProblemBadRequest)
			})
		}
	}
	// Clean paths still route.
	resp, b := h.raw("GET /v1/health HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\n\r\n", false)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("health: %d %s", resp.StatusCode, b)
	}
}

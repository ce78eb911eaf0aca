package egress

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestAbortedRequestsAudited: every request the proxy started on a route
// ends up in the audit, with the credential it added, also when its
// client goes away mid-request, as a killed agent's does, or the sandbox
// closes under it: then with outcome aborted. (ReverseProxy aborts the
// handler with a panic when the client stops reading mid-answer: before,
// the records written after the response were lost.)
func TestAbortedRequestsAudited(t *testing.T) {
	for _, c := range []struct {
		name string
		// headers: the upstream answers its headers and a first line
		// before it stalls; otherwise it stalls before answering.
		headers bool
		// end ends the request from the sandbox's side.
		end  func(h *harness, conn interface{ Close() error })
		want string
	}{
		{"agent killed mid-answer", true, func(_ *harness, c interface{ Close() error }) { _ = c.Close() }, OutcomeAborted},
		{"agent killed before the answer", false, func(_ *harness, c interface{ Close() error }) { _ = c.Close() }, OutcomeAborted},
		{"sandbox closed mid-answer", true, func(h *harness, _ interface{ Close() error }) { _ = h.gate.Close() }, OutcomeAborted},
		{"completed", true, nil, OutcomeCompleted},
	} {
		t.Run(c.name, func(t *testing.T) {
			arrived, release := make(chan struct{}, 1), make(chan struct{})
			ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				if c.headers {
					_, _ = fmt.Fprint(w, "first\n")
					w.(http.Flusher).Flush()
				}
				if c.end == nil {
					return
				}
				select { // stalls until the proxy gives up on it, or the test ends
				case <-r.Context().Done():
				case <-release:
				}
			}))
			t.Cleanup(ts.Close)
			t.Cleanup(func() { close(release) }) // before ts.Close
			u, err := url.Parse(ts.URL)
			if err != nil {
				t.Fatal(err)
			}
			h := newHarness(t, harnessOpts{opts: Options{RootCAs: rootsOf(ts)}, cfg: Config{Routes: []Route{{Name: "openai", Upstream: u,
				Credentials: []Secret{{Name: "openai-api-key", Value: "real-key", Header: "Authorization", Format: "Bearer {value}"}}}}}})
			conn := h.dial(t)
			if _, err := fmt.Fprintf(conn, "POST /llm/openai/v1/chat HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 2\r\n\r\n{}",
				Placeholder("openai-api-key")); err != nil {
				t.Fatal(err)
			}
			<-arrived
			if c.headers {
				br := bufio.NewReader(conn)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				if line, err := bufio.NewReader(resp.Body).ReadString('\n'); line != "first\n" {
					t.Fatalf("first line %q, %v", line, err)
				}
			}
			if c.end != nil {
				c.end(h, conn)
			}
			recs := h.rec.waitRecords(t, 1, func(r Record) bool { return r.Type == "egress" && r.Via == "route" })
			if r := recs[0]; r.Decision != "allow" || r.Outcome != c.want || r.Route != "openai" {
				t.Errorf("route record %+v, want allow with outcome %s", r, c.want)
			}
			secrets := h.rec.waitRecords(t, 1, func(r Record) bool { return r.Type == "secret" })
			if secrets[0].Secret != "openai-api-key" {
				t.Errorf("secret record %+v", secrets[0])
			}
			for _, r := range h.rec.Records() {
				if strings.Contains(fmt.Sprintf("%+v", r), "real-key") {
					t.Errorf("a record holds the key: %+v", r)
				}
			}
		})
	}
}

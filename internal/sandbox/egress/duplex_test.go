package egress

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestAnswerBeforeBodyEOF: an upstream may answer, and flush its headers,
// as soon as it has read a request's whole body, before the proxy's own
// transport has seen that body's end (its next read, which returns EOF).
// The proxy's server must not take the body away then: it used to read it
// to the end and close it on the first flush of the answer, so that the
// transport's last read failed, its connection closed under the answer,
// and the agent saw its model's stream cut ("terminated", ECONNRESET). A
// large body followed by a streamed answer, as every model request is,
// hit it about one request in a hundred on a loaded machine; here the
// upstream flushes at once, and every answer must arrive whole.
func TestAnswerBeforeBodyEOF(t *testing.T) {
	const lines = 3
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.CopyN(io.Discard, r.Body, r.ContentLength); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range lines {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(up.Close)
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{cfg: Config{Routes: []Route{{Name: "model", Upstream: u}}}})
	c := &http.Client{Transport: &http.Transport{}} // keep-alive, origin-form: as an agent's SDK
	body := bytes.Repeat([]byte("x"), 256<<10)
	want := ""
	for i := range lines {
		want += fmt.Sprintf("data: %d\n\n", i)
	}
	for i := range 300 {
		resp, err := c.Post("http://"+h.addr+RoutePrefix+"model/v1/stream", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || string(got) != want {
			t.Fatalf("request %d: status %d, answer %q (%v), want %q whole", i, resp.StatusCode, got, err, strings.TrimSpace(want))
		}
	}
}

package relay

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/provider"
)

// endless is a body that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// TestServeFiles: a files request of a provider process reaches the
// inner daemon's route for its process with the sandbox's token alone
// (the caller's credentials, cookies and access_token never passed on),
// and the inner daemon's answer comes back with its allowed headers only
// and its body bounded, however much it sends.
func TestServeFiles(t *testing.T) {
	inner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") != "Bearer sandbox-token":
			t.Errorf("authorization %q", r.Header.Get("Authorization"))
		case r.Header.Get("Cookie") != "" || r.URL.Query().Has("access_token"):
			t.Errorf("the caller's credentials reached the inner daemon: %v %q", r.Header, r.URL.RawQuery)
		case r.URL.Path != "/v1/processes/prc_inner/files/content" || r.URL.Query().Get("path") != "a.txt":
			t.Errorf("request for %s?%s", r.URL.Path, r.URL.RawQuery)
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Set-Cookie", "inner=1")
		w.Header().Set("X-Inner", "1")
		_, _ = io.Copy(w, endless{})
	}))
	defer inner.Close()
	rp := &remoteProc{r: &Relay{cfg: Config{Log: slog.New(slog.DiscardHandler)}}, name: "p", id: "prc_inner", token: "sandbox-token",
		sb: provider.Sandbox{ID: "sb-1", Address: inner.URL}}
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rp.ServeFiles(w, r, strings.TrimPrefix(r.URL.Path, "/v1/processes/prc_host/files"))
	}))
	defer host.Close()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, host.URL+"/v1/processes/prc_host/files/content?path=a.txt&access_token=host-token", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer host-token")
	req.Header.Set("Cookie", "session=host")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != 200 || resp.Header.Get("Set-Cookie") != "" || resp.Header.Get("X-Inner") != "" || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("answer %d with headers %v", resp.StatusCode, resp.Header)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	if n != maxFilesAnswer {
		t.Fatalf("passed on %d bytes of an endless answer, want %d", n, maxFilesAnswer)
	}

	// An inner daemon that is gone is the provider's 502.
	inner.Close()
	resp2, err := http.Get(host.URL + "/v1/processes/prc_host/files/content?path=a.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp2.Body)
	_ = resp2.Body.Close()
	if resp2.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "provider-unavailable") || !strings.Contains(string(b), "sb-1") {
		t.Fatalf("answer %d %s; want 502 provider-unavailable naming the sandbox", resp2.StatusCode, b)
	}
}

package agentbox_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/yamldoc/yamldoctest"
)

// TestPolicyBombRefused sends each bomb as policy_source (and the JSON one
// as an inline policy) to POST /v1/exec and POST /v1/sessions of a real
// embedded daemon: each is refused with a 422 problem naming the limit, and
// the daemon's memory does not move.
func TestPolicyBombRefused(t *testing.T) {
	const token = "t0ken-for-tests"
	srv := start(t, agentbox.Options{Token: token})

	type request struct{ name, bomb, path, body string }
	var reqs []request
	for name, bomb := range yamldoctest.PolicyBombs() {
		src, _ := json.Marshal(map[string]string{"name": "bomb.yaml", "text": bomb})
		reqs = append(reqs,
			request{name + " to exec", name, "/v1/exec", `{"argv":["true"],"policy_source":` + string(src) + `}`},
			request{name + " to sessions", name, "/v1/sessions", `{"agent":"mock","policy_source":` + string(src) + `}`})
		if strings.HasPrefix(bomb, "{") && json.Valid([]byte(bomb)) {
			reqs = append(reqs,
				request{name + " inline to exec", name, "/v1/exec", `{"argv":["true"],"policy":` + bomb + `}`},
				request{name + " inline to sessions", name, "/v1/sessions", `{"agent":"mock","policy":` + bomb + `}`})
		}
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, r := range reqs {
		req, err := http.NewRequestWithContext(t.Context(), "POST", srv.URL()+r.path, strings.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var p struct{ Type, Detail string }
		_ = json.Unmarshal(body, &p)
		if resp.StatusCode != http.StatusUnprocessableEntity || resp.Header.Get("Content-Type") != "application/problem+json" ||
			!strings.HasSuffix(p.Type, "/policy") || !strings.Contains(p.Detail, "more than") && !yamldoctest.Invalid[r.bomb] {
			t.Errorf("%s: %d %s %s", r.name, resp.StatusCode, resp.Header.Get("Content-Type"), trim(body))
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("%d requests: %d MiB allocated, heap %+d KiB", len(reqs), (after.TotalAlloc-before.TotalAlloc)>>20, (int64(after.HeapAlloc)-int64(before.HeapAlloc))>>10)
	// Each request carries up to a megabyte, which the JSON decoder reads
	// a few times over (about a megabyte allocated per request in all);
	// the parse of one bomb alone took gigabytes.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20*uint64(len(reqs)) {
		t.Errorf("%d requests allocated %d MiB", len(reqs), grew>>20)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 32<<20 {
		t.Errorf("the heap grew by %d MiB", grew>>20)
	}
	if _, err := srv.Client().Health(t.Context()); err != nil {
		t.Fatalf("the daemon no longer answers: %v", err)
	}
}

func trim(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// BenchmarkPolicyBombRefused is how long the daemon takes to refuse the
// 200 KB bracket policy sent to POST /v1/exec.
func BenchmarkPolicyBombRefused(b *testing.B) {
	srv := start(b, agentbox.Options{Token: "t"})
	src, _ := json.Marshal(map[string]string{"name": "bomb.yaml", "text": strings.Repeat("[", 200_000)})
	body := `{"argv":["true"],"policy_source":` + string(src) + `}`
	for b.Loop() {
		req, _ := http.NewRequestWithContext(b.Context(), "POST", srv.URL()+"/v1/exec", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer t")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnprocessableEntity {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// TestEmbeddedToken: an embedded daemon given no token makes one, hands it
// to its client in-process, and refuses requests without it; with
// InsecureNoAuth it asks for none.
func TestEmbeddedToken(t *testing.T) {
	get := func(srv *agentbox.Server, token string) int {
		req, err := http.NewRequestWithContext(t.Context(), "GET", srv.URL()+"/v1/sessions", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	dir := t.TempDir()
	srv := start(t, agentbox.Options{DataDir: dir})
	if len(srv.Token()) < 20 {
		t.Fatalf("token %q", srv.Token())
	}
	if _, err := srv.Client().ListSessions(t.Context(), client.ListOptions{}); err != nil {
		t.Fatalf("the embedded client: %v", err)
	}
	if got := get(srv, ""); got != http.StatusUnauthorized {
		t.Errorf("without the token: %d", got)
	}
	if got := get(srv, srv.Token()); got != http.StatusOK {
		t.Errorf("with the token: %d", got)
	}
	if _, err := os.Stat(filepath.Join(dir, client.TokenFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("embedded mode wrote a token file: %v", err)
	}
	open := start(t, agentbox.Options{InsecureNoAuth: true})
	if got := get(open, ""); got != http.StatusOK || open.Token() != "" {
		t.Errorf("InsecureNoAuth: %d, token %q", got, open.Token())
	}
}

package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/metrics"
)

// TestHealthFastPath checks that the plain handler serving GET /v1/health
// answers what the operation documented in the OpenAPI spec answers, served
// by the adapter and by huma: the same status, content type and body (the
// uptime aside), for versions that need escaping.
func TestHealthFastPath(t *testing.T) {
	uptime := regexp.MustCompile(`"uptime_ms":[0-9]+`)
	for _, version := range []string{"1.2.3", "dev", `v"1"<b>&\é` + "\x01"} {
		t.Run(version, func(t *testing.T) {
			s := newServer(Config{Token: testToken, Version: version, Started: time.Now().Add(-time.Hour)}, newFakeEngine(), nil, nil)
			get := func(h http.Handler) *httptest.ResponseRecorder {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "http://127.0.0.1/v1/health", nil))
				return w
			}
			fast := get(s) // the whole chain, which takes the fast path
			for name, h := range map[string]http.Handler{"adapter": s.mux, "huma": humaAPI(s, http.NewServeMux()).Adapter()} {
				t.Run(name, func(t *testing.T) { compareHealth(t, uptime, fast, get(h)) })
			}
		})
	}
}

func compareHealth(t *testing.T, uptime *regexp.Regexp, fast, other *httptest.ResponseRecorder) {
	t.Helper()
	if fast.Code != http.StatusOK || fast.Code != other.Code {
		t.Fatalf("status: fast path %d, operation %d", fast.Code, other.Code)
	}
	if a, b := fast.Header().Get("Content-Type"), other.Header().Get("Content-Type"); a != b {
		t.Fatalf("content type: fast path %q, operation %q", a, b)
	}
	a := uptime.ReplaceAllString(fast.Body.String(), `"uptime_ms":N`)
	b := uptime.ReplaceAllString(other.Body.String(), `"uptime_ms":N`)
	if a != b || a == fast.Body.String() {
		t.Fatalf("body:\nfast path %q\noperation %q", fast.Body.String(), other.Body.String())
	}
}

// TestHealthFastPathEquivalent sends GET /v1/health, plain and in every
// way that must not take the fast path (a Host that names no daemon, a
// browser's Origin or Sec-Fetch-Site, a query, a body, HEAD, a path that
// is not canonical), to the daemon's chain and to the same chain without
// the fast path, over real sockets: both answer with the same status, the
// same body (the uptime aside) and the same headers (X-Request-Id's value
// and the length aside, which both set), and both count the request in
// the metrics.
func TestHealthFastPathEquivalent(t *testing.T) {
	uptime := regexp.MustCompile(`"uptime_ms":[0-9]+`)
	cfg := Config{Token: testToken, Version: "1.2.3", CORSOrigins: []string{"https://ok.example"}}
	type answer struct {
		status int
		body   string
		header http.Header
	}
	serve := func(fast bool) (url string, m *metrics.Metrics) {
		m = metrics.New()
		s := newServer(cfg, newFakeEngine(), m, nil)
		s.noHealthFast = !fast
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		return srv.URL, m
	}
	fastURL, fastM := serve(true)
	slowURL, slowM := serve(false)
	do := func(base, method, path, body string, hdr ...string) answer {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body == "" {
			req.Body, req.ContentLength = http.NoBody, 0
		}
		for i := 0; i < len(hdr); i += 2 {
			if hdr[i] == "Host" {
				req.Host = hdr[i+1]
			} else {
				req.Header.Set(hdr[i], hdr[i+1])
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("%s %s %q: no X-Request-Id", method, path, hdr)
		}
		h := resp.Header.Clone()
		for _, k := range []string{"X-Request-Id", "Date", "Content-Length"} { // the uptime's digits vary
			h.Del(k)
		}
		return answer{resp.StatusCode, uptime.ReplaceAllString(string(b), `"uptime_ms":N`), h}
	}
	for _, tt := range []struct {
		method, path, body string
		hdr                []string
		status             int
	}{
		{"GET", "/v1/health", "", nil, 200},
		{"GET", "/v1/health", "", []string{"Host", "evil.example"}, 403},
		{"GET", "/v1/health", "", []string{"Host", "localhost:1"}, 403},
		{"GET", "/v1/health", "", []string{"Origin", "https://evil.example"}, 403},
		{"GET", "/v1/health", "", []string{"Origin", "https://ok.example"}, 200},
		{"GET", "/v1/health", "", []string{"Sec-Fetch-Site", "cross-site"}, 403},
		{"GET", "/v1/health?x=1", "", nil, 0},
		{"GET", "/v1/health", "{}", []string{"Content-Type", "application/json"}, 0},
		{"HEAD", "/v1/health", "", nil, 200},
		{"GET", "/v1//health", "", nil, 400},
		{"GET", "/v1/./health", "", nil, 0},
		{"GET", "/v1/%68ealth", "", nil, 0},
		{"POST", "/v1/health", "", nil, 0},
	} {
		fast := do(fastURL, tt.method, tt.path, tt.body, tt.hdr...)
		slow := do(slowURL, tt.method, tt.path, tt.body, tt.hdr...)
		if tt.status != 0 && fast.status != tt.status {
			t.Errorf("%s %s %q: %d, want %d", tt.method, tt.path, tt.hdr, fast.status, tt.status)
		}
		if fast.status != slow.status || fast.body != slow.body {
			t.Errorf("%s %s %q:\nfast path %d %q\nwithout   %d %q", tt.method, tt.path, tt.hdr, fast.status, fast.body, slow.status, slow.body)
		}
		if !reflect.DeepEqual(fast.header, slow.header) {
			t.Errorf("%s %s %q: headers\nfast path %v\nwithout   %v", tt.method, tt.path, tt.hdr, fast.header, slow.header)
		}
	}
	count := func(m *metrics.Metrics) string {
		var b strings.Builder
		rec := httptest.NewRecorder()
		m.Registry.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		for line := range strings.Lines(rec.Body.String()) {
			if strings.HasPrefix(line, "agentbox_http_request_duration_seconds_count") {
				b.WriteString(line)
			}
		}
		return b.String()
	}
	if a, b := count(fastM), count(slowM); a != b || !strings.Contains(a, `route="/v1/health"`) {
		t.Errorf("request counts:\nfast path %s\nwithout   %s", a, b)
	}
}

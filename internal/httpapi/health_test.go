package httpapi

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"
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

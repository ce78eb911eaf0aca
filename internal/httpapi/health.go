package httpapi

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/event"
)

// GET /v1/health is served by this plain handler, not by the operation
// adapter (operation.go): it is the route polled most (load balancers,
// readiness probes, clients waiting for the daemon) and the one whose
// latency is compared with other daemons, and the generic path (input
// parsing and validation, a reflective JSON encoding) costs several times
// the work itself. The operation stays in the table, which documents it in
// api/openapi.json; TestHealthFastPath checks that this handler, the
// adapter and huma (which generates the document, in tests) agree. A
// request with a query or a body goes to the adapter, which validates it.
//
// The plain request is served first thing in ServeHTTP (serveHealthFast),
// before the general middleware, with only what applies to it: the Host
// check (DNS rebinding), a request id (X-Request-Id) and the request's
// metrics. What it leaves out cannot apply: it takes only a GET of exactly
// /v1/health (so the mux's route, a canonical path), with no query, no
// body, no Origin or Sec-Fetch-Site header (so no browser check or CORS
// answer to give) and no token to check (health needs none); it takes no
// request whose Host check fails, and none while debug logging is on (the
// access line and the request's context are the general path's). Every
// other request, health included, takes the general path, which answers it
// as before. TestHealthFastPathEquivalent checks that both answer alike.

// healthPrefix returns the constant start of the health body, up to the
// uptime's value.
func healthPrefix(version string) []byte {
	// As the adapter encodes: no HTML escaping.
	var v bytes.Buffer
	enc := json.NewEncoder(&v)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(version) // a string always encodes
	b := []byte(`{"status":"ok","version":`)
	b = append(b, bytes.TrimSuffix(v.Bytes(), []byte("\n"))...)
	b = append(b, `,"schema_version":`...)
	b = strconv.AppendInt(b, int64(event.SchemaVersion), 10)
	return append(b, `,"uptime_ms":`...)
}

// serveHealth writes the client.Health document, as the adapter would.
func (s *server) serveHealth(w http.ResponseWriter) {
	b := make([]byte, 0, len(s.healthPrefix)+24)
	b = append(b, s.healthPrefix...)
	b = strconv.AppendInt(b, time.Since(s.cfg.Started).Milliseconds(), 10)
	b = append(b, "}\n"...)
	w.Header()["Content-Type"] = []string{"application/json"}
	_, _ = w.Write(b)
}

// serveHealthFast serves a plain GET /v1/health (see above) and reports
// whether it did; when it did not, r is untouched and the general path
// serves it.
func (s *server) serveHealthFast(w http.ResponseWriter, r *http.Request) bool {
	if s.noHealthFast || r.Method != http.MethodGet || r.URL.Path != "/v1/health" || r.URL.RawPath != "" ||
		r.URL.RawQuery != "" || r.ContentLength != 0 || len(r.TransferEncoding) != 0 ||
		r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != "" ||
		s.log.Enabled(r.Context(), slog.LevelDebug) || s.checkHost(r) != nil {
		return false
	}
	start := time.Now()
	w.Header()["X-Request-Id"] = []string{requestID(r)}
	s.serveHealth(w)
	if s.healthObserver != nil {
		s.healthObserver().Observe(time.Since(start).Seconds())
	}
	return true
}

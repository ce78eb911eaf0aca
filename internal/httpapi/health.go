package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/event"
)

// GET /v1/health is served by this plain handler, not by huma: it is the
// route polled most (load balancers, readiness probes, clients waiting for
// the daemon) and the one whose latency is compared with other daemons, and
// huma's generic path (input parsing, response negotiation, a reflective
// JSON encoding) costs several times the work itself. The operation stays
// registered with huma, which documents it in the OpenAPI spec;
// TestHealthFastPath checks that both agree. A request with a query or a
// body goes to huma, which validates it. The middleware in ServeHTTP
// (Host, Origin, CORS and path checks, metrics, logging) runs as for every
// route.

// healthPrefix returns the constant start of the health body, up to the
// uptime's value.
func healthPrefix(version string) []byte {
	// As huma encodes: no HTML escaping.
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

// serveHealth writes the client.Health document, as huma would.
func (s *server) serveHealth(w http.ResponseWriter) {
	b := make([]byte, 0, len(s.healthPrefix)+24)
	b = append(b, s.healthPrefix...)
	b = strconv.AppendInt(b, time.Since(s.cfg.Started).Milliseconds(), 10)
	b = append(b, "}\n"...)
	w.Header()["Content-Type"] = []string{"application/json"}
	_, _ = w.Write(b)
}

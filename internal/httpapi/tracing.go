package httpapi

import (
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/internal/tracing"
)

// traced wraps the API handler with a server span per request: named by
// the route pattern (never the raw path, so ids do not multiply span
// names), the child of the request's traceparent when it has a valid one,
// carried in the request's context for the engine's spans below it, and
// announced to the client in a traceparent response header. Without a
// tracer the handler is returned as it is: tracing off costs nothing per
// request.
func traced(next http.Handler, t *tracing.Tracer, route func(*http.Request) string) http.Handler {
	if t == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The client's traceparent is untrusted: ParseTraceparent is
		// strict, and one that does not parse starts a new trace.
		parent, _ := tracing.FromHeader(r.Header)
		method := methodLabel(r.Method)
		pattern := route(r)
		name, path := method, ""
		if pattern != "" {
			path = pattern
			if i := strings.IndexByte(pattern, ' '); i >= 0 {
				path = pattern[i+1:]
			}
			name = method + " " + path
		} else if method == "OTHER" {
			name = "HTTP"
		}
		span := t.StartChild(parent, name, tracing.KindServer)
		defer span.End()
		span.SetString("http.request.method", method)
		if path != "" {
			span.SetString("http.route", path)
		}
		// Only the path: the query may hold an access token.
		span.SetString("url.path", r.URL.Path)
		w.Header().Set("Traceparent", span.Context().Traceparent())
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(tracing.WithSpan(r.Context(), span)))
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		span.SetInt("http.response.status_code", int64(status))
		if status >= 500 {
			span.SetStatus(tracing.StatusError, "")
			span.SetString("error.type", http.StatusText(status))
		}
	})
}

// route returns the pattern of the route r goes to ("" when none).
func (s *server) route(r *http.Request) string {
	_, pattern := s.mux.Handler(r)
	return pattern
}

package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/logging"
	"github.com/agentbox/agentbox/internal/metrics"
)

// Route patterns the middleware treats specially.
const (
	patternHealth = "GET /v1/health"
	patternStream = "GET /v1/sessions/{id}/events/stream"
	// The inspector's page and its assets (Config.UI): public.
	patternUI       = "GET /ui"
	patternUIAssets = "GET /ui/"
)

type server struct {
	cfg     Config
	eng     Engine
	metrics *metrics.Metrics
	log     *slog.Logger
	mux     *http.ServeMux
	// healthPrefix is the constant start of GET /v1/health's body (health.go).
	healthPrefix []byte
	// healthObserver is the duration series of GET /v1/health's 200s,
	// made on first use (health.go); nil without metrics.
	healthObserver func() metrics.Observer
	// noHealthFast turns serveHealthFast off: tests only, to compare.
	noHealthFast bool
	// uploads bounds the memory of concurrent uploads (uploads.go).
	uploads *uploadBudget
}

// New returns the API handler. eng may be nil when only the routes that do
// not use it are served (exec, processes, the OpenAPI document); m and log
// may be nil.
func New(cfg Config, eng Engine, m *metrics.Metrics, log *slog.Logger) http.Handler {
	s := newServer(cfg, eng, m, log)
	return traced(s, cfg.Tracer, s.route)
}

func newServer(cfg Config, eng Engine, m *metrics.Metrics, log *slog.Logger) *server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Records logged with a request's context carry its id (req_id).
	log = slog.New(logging.Handler(log.Handler()))
	s := &server{cfg: cfg.withDefaults(), eng: eng, metrics: m, log: log, mux: http.NewServeMux()}
	s.healthPrefix = healthPrefix(s.cfg.Version)
	s.uploads = &uploadBudget{free: s.cfg.MaxUploadBytes}
	if m != nil {
		s.healthObserver = sync.OnceValue(func() metrics.Observer {
			return m.HTTPDuration.WithLabelValues(http.MethodGet, "/v1/health", "200")
		})
	}
	for _, o := range operations() {
		sp := o.spec()
		s.mux.Handle(sp.Method+" "+sp.Path, o.handler(s))
	}
	// The committed contract, as built into the binary: compressed to a
	// client that takes gzip (every HTTP library), else decompressed.
	s.mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/openapi+json")
		h.Set("Vary", "Accept-Encoding")
		if api.AcceptsGzip(r.Header.Values("Accept-Encoding")) {
			h.Set("Content-Encoding", "gzip")
			_, _ = w.Write(api.OpenAPIGzip)
			return
		}
		_, _ = w.Write(api.OpenAPI())
	})
	if cfg.ACP != nil {
		// A plain route, not an operation of the table: the handler
		// hijacks the connection after the upgrade.
		s.mux.Handle("GET /v1/acp", cfg.ACP)
	}
	if cfg.UI != nil {
		s.mux.Handle(patternUI, cfg.UI)
		s.mux.Handle(patternUIAssets, cfg.UI)
	}
	if m != nil {
		s.mux.Handle("GET /metrics", m.Registry)
	}
	return s
}

// reqInfo is the request-scoped state the middleware hands down. The
// request's context also carries the id for the logger
// (logging.WithRequestID): log with the *Context methods and every line
// has it, here and in the engine.
type reqInfo struct {
	id  string
	log *slog.Logger // the server's, shared: no per-request copy
}

type reqInfoKey struct{}

func infoFrom(ctx context.Context) *reqInfo {
	ri, _ := ctx.Value(reqInfoKey{}).(*reqInfo)
	return ri
}

// logFor returns the request's logger, or a discarding one.
func logFor(ctx context.Context) *slog.Logger {
	if ri := infoFrom(ctx); ri != nil {
		return ri.log
	}
	return slog.New(slog.DiscardHandler)
}

// requestID is the id of r: the client's X-Request-Id when it is a sane
// one (logging.ValidRequestID: bounded, a strict character set; it is
// attacker-controlled and ends up in logs and terminals), else a new
// random one.
func requestID(r *http.Request) string {
	if v := r.Header.Get("X-Request-Id"); v != "" && logging.ValidRequestID(v) {
		return v
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ServeHTTP runs the cross-cutting steps in order: request id, metrics and
// logging, panic recovery, the Host and Origin checks, CORS, the path check
// and the body checkpoint (body.go), authentication, then routing (with problem answers for unknown routes
// and methods).
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A plain GET /v1/health first, with only the steps that apply to
	// it (health.go).
	if s.serveHealthFast(w, r) {
		return
	}
	start := time.Now()
	h, pattern := s.mux.Handler(r)
	ri := &reqInfo{id: requestID(r), log: s.log}
	r = r.WithContext(context.WithValue(logging.WithRequestID(r.Context(), ri.id), reqInfoKey{}, ri))
	sw := &statusWriter{ResponseWriter: w}
	sw.Header().Set("X-Request-Id", ri.id)

	defer func() {
		if v := recover(); v != nil {
			// A handler aborting its response (http.ErrAbortHandler,
			// perhaps wrapped) is not a bug: let net/http abort it.
			if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(v)
			}
			ri.log.ErrorContext(r.Context(), "panic in handler", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if !sw.wrote {
				writeProblem(sw, internalProblem(r.Context()))
			}
		}
		s.observe(r, pattern, sw, start)
	}()

	if p := s.checkHost(r); p != nil {
		writeProblem(sw, p)
		return
	}
	if p := s.checkOrigin(r); p != nil {
		writeProblem(sw, p)
		return
	}
	if s.cors(sw, r) {
		return
	}
	if p := checkPath(r); p != nil {
		writeProblem(sw, p)
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &requestBody{ReadCloser: r.Body}
	}
	if pattern == patternHealth {
		// Needs no token. The plain request takes a plain handler
		// (health.go); anything else gets the operation's validation.
		if r.URL.RawQuery == "" && r.ContentLength == 0 {
			s.serveHealth(sw)
			return
		}
	} else if pattern != patternUI && pattern != patternUIAssets {
		if p := s.authenticate(r, pattern == patternStream); p != nil {
			writeProblem(sw, p)
			return
		}
	}
	if pattern != "" && (s.forward(sw, r, pattern) || s.forwardProcessFiles(sw, r, pattern)) {
		return
	}
	if pattern == "" {
		// Not found, method not allowed, or a path-cleaning redirect:
		// let the mux decide, and turn its plain-text errors into problems.
		h.ServeHTTP(&muxErrorWriter{statusWriter: sw}, r)
		return
	}
	s.mux.ServeHTTP(sw, r)
}

func (s *server) observe(r *http.Request, pattern string, sw *statusWriter, start time.Time) {
	d := time.Since(start)
	status := sw.status
	if status == 0 {
		status = http.StatusOK
	}
	if r.Context().Err() != nil && !sw.wrote {
		status = statusClientClosed
	}
	route := "unmatched"
	if pattern != "" {
		route = pattern
		if i := strings.IndexByte(pattern, ' '); i >= 0 {
			route = pattern[i+1:]
		}
	}
	if s.metrics != nil {
		s.metrics.HTTPDuration.WithLabelValues(methodLabel(r.Method), route, strconv.Itoa(status)).Observe(d.Seconds())
	}
	// The access line: the route pattern, not the path (whose segments are
	// the client's) nor the query (which may hold an access token); no
	// header value. Debug: one line per request, health checks included.
	// Enabled first, so that a disabled line costs no allocation.
	if ri := infoFrom(r.Context()); ri != nil && ri.log.Enabled(r.Context(), slog.LevelDebug) {
		ri.log.DebugContext(r.Context(), "http request",
			"method", methodLabel(r.Method), "route", route, "status", status,
			"bytes", sw.bytes, "duration", d, "remote", r.RemoteAddr)
	}
}

// methodLabel bounds the cardinality of the method label.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
		http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return m
	}
	return "OTHER"
}

// statusWriter records the status and size of a response. It keeps
// Flush, and Unwrap for http.ResponseController (write deadlines).
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Flush() { _ = w.FlushError() }

// FlushError is what http.ResponseController.Flush calls.
func (w *statusWriter) FlushError() error {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// muxErrorWriter replaces the mux's text/plain 404 and 405 answers, and
// its HTML redirects (which checkPath leaves it no reason to send), with
// problems.
type muxErrorWriter struct {
	*statusWriter
	swallow bool
}

func (w *muxErrorWriter) WriteHeader(code int) {
	switch code {
	case http.StatusNotFound:
		w.swallow = true
		writeProblem(w.statusWriter, newProblem(code, client.ProblemNotFound, "No such route."))
	case http.StatusMethodNotAllowed:
		w.swallow = true
		writeProblem(w.statusWriter, newProblem(code, client.ProblemMethodNotAllowed, "The route does not allow this method."))
	case http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		w.swallow = true
		w.Header().Del("Location")
		writeProblem(w.statusWriter, newProblem(http.StatusNotFound, client.ProblemNotFound, "No such route."))
	default:
		w.statusWriter.WriteHeader(code)
	}
}

func (w *muxErrorWriter) Write(b []byte) (int, error) {
	if w.swallow {
		return len(b), nil
	}
	return w.statusWriter.Write(b)
}

// isJSON reports whether a Content-Type is application/json or
// application/<anything>+json, with any parameters.
func isJSON(ct string) bool {
	mt := ct
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = mt[:i]
	}
	mt = strings.ToLower(strings.TrimSpace(mt))
	if mt == "application/json" {
		return true
	}
	sub, ok := strings.CutPrefix(mt, "application/")
	return ok && len(sub) > len("+json") && strings.HasSuffix(sub, "+json") && !strings.ContainsAny(sub, "/ ")
}

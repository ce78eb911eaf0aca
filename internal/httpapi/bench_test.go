package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/metrics"
)

// discardWriter is a ResponseWriter that keeps nothing but the header map,
// reset between requests, so that the benchmark measures the handler.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkHealthHandler is the cost of GET /v1/health inside the daemon,
// without the network: the whole middleware chain (request id, logging,
// metrics, Host/Origin/CORS/path checks) and the route, as the daemon builds
// them (metrics on, an info-level logger). "floor" is a plain net/http
// handler writing the same JSON: what any Go server pays. Middleware added
// to the chain shows here as added ns/op and allocs/op.
//
//	go test ./internal/httpapi -run '^$' -bench HealthHandler -benchmem
func BenchmarkHealthHandler(b *testing.B) {
	log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	started := time.Now()
	handlers := []struct {
		name string
		h    http.Handler
	}{
		{"agentbox", New(Config{Token: "tok", Version: "bench"}, newFakeEngine(), metrics.New(), log)},
		{"floor", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := json.Marshal(client.Health{Status: "ok", Version: "bench", SchemaVersion: event.SchemaVersion,
				UptimeMS: time.Since(started).Milliseconds()})
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(body)
		})},
	}
	for _, hc := range handlers {
		b.Run(hc.name, func(b *testing.B) {
			req := httptest.NewRequest("GET", "http://127.0.0.1:4000/v1/health", nil)
			req.RemoteAddr = "127.0.0.1:50000"
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				hc.h.ServeHTTP(w, req)
			}
		})
	}
}

// BenchmarkNew is the cost of building the API at start: the routes of the
// operation table (the contract is read on the first request that needs it,
// not here). "huma" is what building it with huma cost (reflection on every
// operation's types), as the daemon did before the adapter.
func BenchmarkNew(b *testing.B) {
	b.Run("adapter", func(b *testing.B) {
		for b.Loop() {
			_ = newServer(Config{}, nil, nil, nil)
		}
	})
	b.Run("huma", func(b *testing.B) {
		for b.Loop() {
			humaAPI(newServer(Config{}, nil, nil, nil), http.NewServeMux())
		}
	})
}

// BenchmarkValidatedRequest is one request with a body and parameters that
// the validator checks (POST /v1/sessions/{id}/messages, answered by the
// engine with 404), served by the adapter and by huma.
func BenchmarkValidatedRequest(b *testing.B) {
	s := newServer(Config{Token: testToken}, newFakeEngine(), nil, nil)
	oracle := http.NewServeMux()
	humaAPI(s, oracle)
	body := []byte(`{"content":[{"type":"text","text":"hello"},{"type":"image","uri":"file:///x.png"}]}`)
	for name, h := range map[string]http.Handler{"adapter": s.mux, "huma": oracle} {
		b.Run(name, func(b *testing.B) {
			w := &discardWriter{h: http.Header{}}
			for b.Loop() {
				clear(w.h)
				r := httptest.NewRequest("POST", "http://127.0.0.1/v1/sessions/nope/messages", bytes.NewReader(body))
				r.Header.Set("Content-Type", "application/json")
				h.ServeHTTP(w, r)
			}
		})
	}
}

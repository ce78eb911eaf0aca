package httpapi

import (
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

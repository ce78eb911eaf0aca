package daemon_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/daemon"
)

// BenchmarkForwardLatency measures what forwarding adds to a request for a
// session another daemon drives: two daemons on one PostgreSQL database
// (AGENTBOX_TEST_POSTGRES), a session driven by the first, and the same
// cheap agent-bound request (an interrupt with no turn running, answered
// 409 no-turn by the driving daemon) sent to the driving daemon directly
// (via=owner) and to the other, which forwards it (via=other). Reported:
// p50 and p99 of the round trip.
func BenchmarkForwardLatency(b *testing.B) {
	dsn := os.Getenv("AGENTBOX_TEST_POSTGRES")
	if dsn == "" {
		b.Skip("AGENTBOX_TEST_POSTGRES is not set: no PostgreSQL server (scripts/bench starts one with scripts/postgres)")
	}
	schema := fmt.Sprintf("agentbox_fwd_%d_%d", os.Getpid(), time.Now().UnixNano())
	admin := withSearchPath(b, dsn, "public")
	execSQL(b, admin, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema)
	b.Cleanup(func() { execSQL(b, admin, "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	store := withSearchPath(b, dsn, schema)
	const token = "forward-bench-token-0123456789abcdef"
	start := func() *client.Client {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		d, err := daemon.New(b.Context(), daemon.Config{
			Listen: addr, Advertise: "http://" + addr, DataDir: b.TempDir(), Token: token, Store: store,
			Log: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Serve(ctx) }()
		b.Cleanup(func() {
			sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
			defer scancel()
			_ = d.Shutdown(sctx)
			cancel()
			<-done
		})
		c, err := client.New(d.URL(), client.WithToken(token))
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	owner, other := start(), start()
	s, err := owner.CreateSession(b.Context(), client.CreateSession{Agent: "mock"})
	if err != nil {
		b.Fatal(err)
	}
	for _, via := range []struct {
		name string
		c    *client.Client
	}{{"owner", owner}, {"other", other}} {
		b.Run("via="+via.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				_, err := via.c.Interrupt(b.Context(), s.ID)
				lat = append(lat, time.Since(t0))
				if !client.IsNoTurn(err) {
					b.Fatalf("Interrupt through %s: %v; want the owner's no-turn", via.name, err)
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Nanoseconds()), "p99-ns")
		})
	}
}

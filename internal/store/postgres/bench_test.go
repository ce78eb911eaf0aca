package postgres

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlite"
)

// The benchmarks run each figure on both stores in the same run
// (store=sqlite, store=postgres), the SQLite one with its defaults
// (synchronous=FULL), the PostgreSQL one on the server of
// AGENTBOX_TEST_POSTGRES (scripts/postgres: fsync on, on the same disk).

type benchStore struct {
	name string
	open func(b *testing.B) store.Store
}

var benchStores = []benchStore{
	{"sqlite", func(b *testing.B) store.Store {
		s, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "agentbox.db"), sqlite.Options{})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}},
	{"postgres", func(b *testing.B) store.Store {
		return open(b, database(b, b.TempDir()), Options{})
	}},
}

// openBench opens a store with sessions sessions, named by benchSession.
func openBench(b *testing.B, bs benchStore, sessions int) store.Store {
	b.Helper()
	s := bs.open(b)
	b.Cleanup(func() { s.Close() })
	for i := range sessions {
		if err := s.CreateSession(b.Context(), store.Session{ID: benchSession(i), Agent: "mock", Status: store.StatusRunning}); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

func benchSession(i int) string { return fmt.Sprintf("ses_%04d", i) }

// benchEvent is a typical streamed text delta (about 150 bytes of data).
func benchEvent() event.Event {
	e := event.New(event.SourceAgent, &event.ItemDelta{
		ItemID: "item_0198f3a2c1b47e6f9a0b1c2d3e4f5a6b",
		Field:  event.DeltaText,
		Delta:  "The quick brown fox jumps over the lazy dog; then it reads the file and runs the tests again.",
	})
	e.TurnID = "turn_0198f3a2c1b47e6f9a0b1c2d3e4f5a6b"
	return e
}

// benchParallelism makes b.RunParallel start 64 appenders per CPU.
const benchParallelism = 64

// BenchmarkAppendParallel is many appenders over 16 sessions, one event per
// call; group commit batches them.
func BenchmarkAppendParallel(b *testing.B) {
	for _, bs := range benchStores {
		b.Run("store="+bs.name, func(b *testing.B) {
			s := openBench(b, bs, 16)
			var next atomic.Int64
			b.SetParallelism(benchParallelism)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				id := benchSession(int(next.Add(1)) % 16)
				e := benchEvent()
				for pb.Next() {
					if _, err := s.Append(b.Context(), id, e); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		})
	}
}

// BenchmarkAppendPublishLatency runs the appenders of BenchmarkAppendParallel
// with one subscriber per session and measures, per event, the time from
// just before Append to its delivery to the subscriber: through the same
// store, and (cross) from one PostgreSQL store to a subscriber of another
// on the same database, as between two daemons.
func BenchmarkAppendPublishLatency(b *testing.B) {
	for _, bs := range benchStores {
		b.Run("store="+bs.name, func(b *testing.B) {
			s := openBench(b, bs, 16)
			benchLatency(b, s, s, 16)
		})
	}
	b.Run("store=postgres-cross", func(b *testing.B) {
		dsn := database(b, b.TempDir())
		w, r := open(b, dsn, Options{}), open(b, dsn, Options{})
		b.Cleanup(func() { w.Close(); r.Close() })
		for i := range 16 {
			if err := w.CreateSession(b.Context(), store.Session{ID: benchSession(i), Agent: "mock", Status: store.StatusRunning}); err != nil {
				b.Fatal(err)
			}
		}
		benchLatency(b, w, r, 16)
	})
}

func benchLatency(b *testing.B, w, r store.Store, sessions int) {
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	var received atomic.Int64
	all := make(chan struct{})
	latencies := make([][]time.Duration, sessions)
	var subs sync.WaitGroup
	for i := range sessions {
		ch, err := r.Subscribe(ctx, benchSession(i), 0)
		if err != nil {
			b.Fatal(err)
		}
		subs.Go(func() {
			for e := range ch {
				latencies[i] = append(latencies[i], time.Since(e.Time))
				if received.Add(1) == int64(b.N) {
					close(all)
				}
			}
		})
	}
	var next atomic.Int64
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		id := benchSession(int(next.Add(1)) % sessions)
		e := benchEvent()
		for pb.Next() {
			e.Time = time.Now() // kept by the store: the subscriber measures from here
			if _, err := w.Append(ctx, id, e); err != nil {
				b.Error(err)
				return
			}
		}
	})
	select {
	case <-all:
	case <-time.After(time.Minute):
		b.Fatalf("subscribers received %d of %d events", received.Load(), b.N)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	subs.Wait()
	var lat []time.Duration
	for _, l := range latencies {
		lat = append(lat, l...)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
}

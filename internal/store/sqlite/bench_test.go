package sqlite

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
)

// openBench opens a store on a fresh file with sessions sessions, named by
// benchSession.
func openBench(b *testing.B, sessions int) *Store {
	b.Helper()
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), "agentbox.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
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

func reportRate(b *testing.B, n int, d time.Duration) {
	b.ReportMetric(float64(n)/d.Seconds(), "events/s")
}

// BenchmarkAppend is one appender, one event per call: every call waits for
// its own commit.
func BenchmarkAppend(b *testing.B) {
	s := openBench(b, 1)
	ctx := b.Context()
	e := benchEvent()
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		if _, err := s.Append(ctx, benchSession(0), e); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N, time.Since(start))
}

// benchSessionCounts are the numbers of sessions the parallel benchmarks
// spread their appenders over. With the events' primary key, every session a
// commit touched dirtied at least one page of the write-ahead log, so many
// sessions with one event each per commit cost more than a few sessions with
// several; since the log is kept in append order and indexed in bulk
// (index.go), a commit's pages follow its bytes, and the sessions count once
// per bulk.
var benchSessionCounts = []int{1, 16, 128}

// benchParallelism makes b.RunParallel start 64 appenders per CPU.
const benchParallelism = 64

// BenchmarkAppendParallel is many appenders over many sessions, one event per
// call, each appender on one session; group commit batches them.
func BenchmarkAppendParallel(b *testing.B) {
	for _, sessions := range benchSessionCounts {
		b.Run(fmt.Sprintf("sessions=%d", sessions), func(b *testing.B) {
			s := openBench(b, sessions)
			ctx := b.Context()
			var next atomic.Int64
			b.SetParallelism(benchParallelism)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				id := benchSession(int(next.Add(1)) % sessions)
				e := benchEvent()
				for pb.Next() {
					if _, err := s.Append(ctx, id, e); err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportRate(b, b.N, time.Since(start))
		})
	}
}

// BenchmarkAppendPublishLatency runs the appenders of BenchmarkAppendParallel
// with one subscriber per session and measures, per event, the time from
// just before Append to its delivery to the subscriber.
func BenchmarkAppendPublishLatency(b *testing.B) {
	for _, sessions := range benchSessionCounts {
		b.Run(fmt.Sprintf("sessions=%d", sessions), func(b *testing.B) {
			benchPublishLatency(b, sessions)
		})
	}
}

func benchPublishLatency(b *testing.B, sessions int) {
	s := openBench(b, sessions)
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()

	var received atomic.Int64
	all := make(chan struct{})
	latencies := make([][]time.Duration, sessions)
	var subs sync.WaitGroup
	for i := range sessions {
		ch, err := s.Subscribe(ctx, benchSession(i), 0)
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
			if _, err := s.Append(ctx, id, e); err != nil {
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
	reportRate(b, b.N, elapsed)
}

// BenchmarkEvents reads a session's events from the database, as a
// subscriber behind the ring or a client resuming does: a page of up to
// pageSize events after a seq. The log holds 16 sessions' events
// interleaved as concurrent appends leave them (4096 each); from=middle
// reads a page in the middle of a session, from=end the last few events,
// appended after the rest.
func BenchmarkEvents(b *testing.B) {
	const sessions, perSession, perCall = 16, 4096, 4
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), "agentbox.db"), Options{Sync: SyncNormal})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	ctx := b.Context()
	var wg sync.WaitGroup
	for i := range sessions {
		if err := s.CreateSession(ctx, store.Session{ID: benchSession(i), Agent: "mock", Status: store.StatusRunning}); err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			evs := slices.Repeat([]event.Event{benchEvent()}, perCall)
			for range perSession / perCall {
				if _, err := s.Append(ctx, benchSession(i), evs...); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, tc := range []struct {
		name  string
		after int64
	}{{"middle", perSession / 2}, {"end", perSession - 8}} {
		b.Run("from="+tc.name, func(b *testing.B) {
			n, i := 0, 0
			for b.Loop() {
				evs, err := s.Events(ctx, benchSession(i%sessions), tc.after, pageSize)
				if err != nil || len(evs) == 0 {
					b.Fatal(len(evs), err)
				}
				n += len(evs)
				i++
			}
			b.ReportMetric(float64(n)/float64(b.N), "events/op")
		})
	}
}

package process

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// reportMedian adds the median of durations as a metric: the goals are
// medians (cold ≤ 8 ms, warm ≤ 1 ms), and ns/op is a mean.
func reportMedian(b *testing.B, d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	if len(d) > 0 {
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "median-ms")
	}
}

// BenchmarkColdTrue is Create + Start + Wait of /bin/true (+ Close, not
// timed: it happens after the result is known).
func BenchmarkColdTrue(b *testing.B) {
	needRoot(b)
	rt := New(Options{})
	spec := baseSpec(b)
	ctx := context.Background()
	var d []time.Duration
	for b.Loop() {
		t0 := time.Now()
		sb, err := rt.Create(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		p, err := sb.Start(ctx, sandbox.Cmd{Args: []string{"/bin/true"}})
		if err != nil {
			b.Fatal(err)
		}
		if e, _ := p.Wait(); e.Code != 0 {
			b.Fatalf("true: %+v", e)
		}
		d = append(d, time.Since(t0))
		b.StopTimer()
		sb.Close(ctx)
		b.StartTimer()
	}
	reportMedian(b, d)
}

// BenchmarkWarmTrue is Start + Wait of /bin/true in a pre-created sandbox.
func BenchmarkWarmTrue(b *testing.B) {
	sb, _ := newBox(b, nil)
	ctx := context.Background()
	var d []time.Duration
	for b.Loop() {
		t0 := time.Now()
		p, err := sb.Start(ctx, sandbox.Cmd{Args: []string{"/bin/true"}})
		if err != nil {
			b.Fatal(err)
		}
		if e, _ := p.Wait(); e.Code != 0 {
			b.Fatalf("true: %+v", e)
		}
		d = append(d, time.Since(t0))
	}
	reportMedian(b, d)
}

package procs

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestDecide: one P gives way to the default as soon as a window's use
// reaches raiseAt; the default gives way to one P only after the use has
// stayed under lowerBelow for lowerAfter, and any window above it starts
// that count again.
func TestDecide(t *testing.T) {
	w := interval
	steps := func(n int, use float64) []float64 {
		s := make([]float64, n)
		for i := range s {
			s[i] = use
		}
		return s
	}
	for _, tc := range []struct {
		name string
		one  bool
		uses []float64
		want []string // "", "lower" or "raise" per window
	}{
		{"one P, light load stays", true, []float64{0, 0.3, 0.79}, []string{"", "", ""}},
		{"one P, saturated raises", true, []float64{0.2, 0.8}, []string{"", "raise"}},
		{"one P, kernel time past a CPU raises", true, []float64{1.3}, []string{"raise"}},
		{"default, busy stays", false, steps(40, 0.9), make([]string, 40)},
		{"default, quiet lowers after lowerAfter", false, steps(int(lowerAfter/w), 0.1),
			append(make([]string, int(lowerAfter/w)-1), "lower")},
		{"default, one busy window starts the count again", false,
			append(append(steps(int(lowerAfter/w)-1, 0.1), 0.5), steps(int(lowerAfter/w), 0.1)...),
			append(make([]string, 2*int(lowerAfter/w)-1), "lower")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &governor{one: tc.one}
			for i, use := range tc.uses {
				got := ""
				if g.decide(use, w) {
					got = map[bool]string{true: "lower", false: "raise"}[g.one]
				}
				if got != tc.want[i] {
					t.Fatalf("window %d (use %.2f): %q, want %q", i, use, got, tc.want[i])
				}
			}
		})
	}
}

// meter is a CPU meter for the governor whose process uses rate CPUs.
type meter struct {
	mu   sync.Mutex
	rate float64
	cpu  time.Duration
	last time.Time
}

func (m *meter) set(rate float64) {
	m.read()
	m.mu.Lock()
	m.rate = rate
	m.mu.Unlock()
}

func (m *meter) read() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if !m.last.IsZero() {
		m.cpu += time.Duration(m.rate * float64(now.Sub(m.last)))
	}
	m.last = now
	return m.cpu
}

// TestGovern runs the governor's loop on this process's scheduler, with a
// CPU meter the test sets (on a loaded host the process's real CPU use is
// whatever the host leaves it): one P once it starts, the default while
// the process uses a CPU, one P again lowerAfter after it stops, and the
// default when the governor ends.
func TestGovern(t *testing.T) {
	dflt := runtime.GOMAXPROCS(0)
	if dflt < 2 {
		t.Skip("one CPU: nothing to govern")
	}
	m := &meter{}
	g := &governor{
		log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		setOne:  func() { runtime.GOMAXPROCS(1) },
		setDflt: func() { runtime.GOMAXPROCS(dflt) },
		cpuTime: m.read,
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		runtime.GOMAXPROCS(dflt)
	})
	waitProcs := func(what string, want int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for runtime.GOMAXPROCS(0) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: GOMAXPROCS still %d after 20 s, want %d", what, runtime.GOMAXPROCS(0), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitProcs("started", 1)
	m.set(1)
	waitProcs("busy", dflt)
	m.set(0)
	quiet := time.Now()
	waitProcs("quiet again", 1)
	if d := time.Since(quiet); d < lowerAfter {
		t.Errorf("one P again %v after the load ended, before lowerAfter (%v)", d, lowerAfter)
	}
	cancel()
	<-done
	if n := runtime.GOMAXPROCS(0); n != dflt {
		t.Errorf("after the governor ended: GOMAXPROCS %d, want the default %d", n, dflt)
	}
}

// TestGovernLeavesASetVariable: GOMAXPROCS in the environment is the
// operator's choice.
func TestGovernLeavesASetVariable(t *testing.T) {
	t.Setenv("GOMAXPROCS", strconv.Itoa(runtime.GOMAXPROCS(0)))
	before := runtime.GOMAXPROCS(0)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	Govern(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if ctx.Err() != nil {
		t.Fatal("Govern ran with GOMAXPROCS set; it should return at once")
	}
	if n := runtime.GOMAXPROCS(0); n != before {
		t.Errorf("GOMAXPROCS %d, want %d untouched", n, before)
	}
}

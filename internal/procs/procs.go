// Package procs sizes the Go scheduler's parallelism (GOMAXPROCS) to the
// daemon's load: one P while its work fits in one, the runtime's default
// (every CPU the process may use) while it does not.
//
// Why. A lightly loaded daemon answers one request at a time. With two or
// more Ps, the Go scheduler wakes a thread for an idle P whenever a
// goroutine becomes runnable (net/http starts one per request to watch the
// connection), and that thread steals the goroutine: on a virtualised host
// each such wake-up is a context switch and an inter-processor interrupt.
// Measured on the 2-core VM, a GET /v1/health with one P took 2.0 context
// switches and 68 µs of CPU against 3.6 and 89 µs with two (docs/ARCHITECTURE.md,
// "GET /v1/health"). Under load (many sessions appending, fan-out to
// subscribers, concurrent requests) one P is a bottleneck: durable appends
// lost a fifth of their throughput with GOMAXPROCS=1.
//
// How. Govern samples the process's CPU time (user and system, all its
// threads) every interval. At one P, a window in which the process used at
// least raiseAt of a CPU means work is queueing for the P: it goes back to
// the runtime's default at once. At the default, the process must use less
// than lowerBelow of a CPU for lowerAfter before it drops to one P again:
// a burst is served in parallel, and the change (a stop-the-world of the
// scheduler) happens seldom. A GOMAXPROCS environment variable is the
// operator's choice: Govern then changes nothing.
package procs

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"time"
)

const (
	// interval is how often the load is sampled while the daemon works;
	// idleInterval while it used less than idleBelow of a CPU (an idle
	// daemon wakes twice a second for this, not ten times).
	interval     = 100 * time.Millisecond
	idleInterval = 500 * time.Millisecond
	idleBelow    = 0.05

	// raiseAt is the CPU use (in CPUs) over a window at one P from which
	// the default is restored; lowerBelow the use under which, held for
	// lowerAfter, one P is enough again.
	raiseAt    = 0.8
	lowerBelow = 0.5
	lowerAfter = 2 * time.Second
)

// governor is Govern's state; its CPU meter and setters are fields so
// that the tests can drive it.
type governor struct {
	one     bool          // at one P
	lowFor  time.Duration // how long the use has stayed under lowerBelow at the default
	log     *slog.Logger
	setOne  func()
	setDflt func()
	cpuTime func() time.Duration
}

// decide takes one window's CPU use (in CPUs, averaged over the window)
// and its length, moves the governor to one P or back to the default as
// they say (g.one), and reports whether it moved.
func (g *governor) decide(use float64, window time.Duration) (moved bool) {
	switch {
	case g.one:
		if use < raiseAt {
			return false
		}
		g.one, g.lowFor = false, 0
	case use >= lowerBelow:
		g.lowFor = 0
		return false
	default:
		if g.lowFor += window; g.lowFor < lowerAfter {
			return false
		}
		g.one = true
	}
	return true
}

// Govern sizes GOMAXPROCS until ctx ends, then restores the runtime's
// default. It starts at one P: call it once the daemon's start is done (a
// start does its work in parallel). It changes nothing when the
// GOMAXPROCS variable is set or the default is a single P.
func Govern(ctx context.Context, log *slog.Logger) {
	if _, set := os.LookupEnv("GOMAXPROCS"); set || runtime.GOMAXPROCS(0) <= 1 || cpuTime == nil {
		return
	}
	g := &governor{
		log:     log,
		setOne:  func() { runtime.GOMAXPROCS(1) },
		setDflt: runtime.SetDefaultGOMAXPROCS,
		cpuTime: cpuTime,
	}
	g.run(ctx)
}

func (g *governor) run(ctx context.Context) {
	defer func() {
		if g.one {
			g.setDflt()
		}
	}()
	g.setOne()
	g.one = true
	g.log.Debug("procs: one P while the load fits in one")
	lastCPU, lastAt := g.cpuTime(), time.Now()
	wait := interval
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		cpu, at := g.cpuTime(), time.Now()
		window := at.Sub(lastAt)
		if window <= 0 {
			continue
		}
		use := float64(cpu-lastCPU) / float64(window)
		lastCPU, lastAt = cpu, at
		if g.decide(use, window) {
			if g.one {
				g.setOne()
				g.log.Debug("procs: one P", "cpu_use", use)
			} else {
				g.setDflt()
				g.log.Debug("procs: the default again", "cpu_use", use, "procs", runtime.GOMAXPROCS(0))
			}
		}
		wait = interval
		if g.one && use < idleBelow {
			wait = idleInterval
		}
	}
}

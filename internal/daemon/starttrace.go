package daemon

import (
	"log/slog"
	"time"
)

// startTrace is the daemon's start-up trace: how long each step of the
// start took, from the process's main (Config.Started) to the first request
// the daemon can serve. serve --log-level debug logs it as one line
// ("start-up trace"); the info line "agentbox serving" carries the total.
// Package inits, before main, are not in it: GODEBUG=inittrace=1 shows them.
type startTrace struct {
	begin, last time.Time
	steps       []any // slog.Attr, one per step, in order
}

func newStartTrace(begin time.Time) *startTrace {
	if begin.IsZero() {
		begin = time.Now()
	}
	return &startTrace{begin: begin, last: begin}
}

// step ends the step called name, which began where the last one ended.
func (t *startTrace) step(name string) {
	now := time.Now()
	t.steps = append(t.steps, slog.Duration(name, now.Sub(t.last)))
	t.last = now
}

// total is the time from the trace's beginning to its last step's end.
func (t *startTrace) total() time.Duration { return t.last.Sub(t.begin) }

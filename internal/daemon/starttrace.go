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
// The store opens beside the steps from tracing to api: its step, "store",
// is only the wait for it that remained, and "store_open", after the
// steps, the time its opening took.
type startTrace struct {
	begin, last time.Time
	steps       []any // slog.Attr, one per step, in order
	besides     []any // slog.Attr, work done beside the steps
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

// beside records a duration of work done beside the steps, which is not
// one of them: it comes after the steps in the trace's line.
func (t *startTrace) beside(name string, d time.Duration) {
	t.besides = append(t.besides, slog.Duration(name, d))
}

// attrs are the trace's steps, then what ran beside them.
func (t *startTrace) attrs() []any { return append(t.steps[:len(t.steps):len(t.steps)], t.besides...) }

// total is the time from the trace's beginning to its last step's end.
func (t *startTrace) total() time.Duration { return t.last.Sub(t.begin) }

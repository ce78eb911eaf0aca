// Package audit keeps the daemon's audit trail of sandbox decisions: one
// JSON line per violation (what was refused, by which rule, in which
// session or task), appended to a file, and the
// agentbox_policy_violations_total counter. Records name rules, paths and
// hosts, never secret values.
package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Record is one line of the audit log.
type Record struct {
	Time time.Time `json:"time"`
	// Scope is what the sandbox served: "session", "exec" or "process";
	// ID is the session id or the task's id.
	Scope string `json:"scope"`
	ID    string `json:"id"`
	sandbox.Violation
}

// Log appends records to a file. It is safe for concurrent use; a failing
// write is logged and does not stop the sandboxed work.
type Log struct {
	mu  sync.Mutex
	w   io.WriteCloser
	log *slog.Logger
	// Violations counts records by kind.
	Violations *prometheus.CounterVec
}

// Open opens (creating, 0600) the audit log at path for appending.
func Open(path string, log *slog.Logger) (*Log, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return New(f, log), nil
}

// New returns a Log writing to w.
func New(w io.WriteCloser, log *slog.Logger) *Log {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Log{w: w, log: log, Violations: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentbox_policy_violations_total",
		Help: "Things a sandbox refused, by violation kind (filesystem, syscall, resource, network).",
	}, []string{"kind"})}
}

// Violation counts v and records it, seen in the sandbox of scope/id.
func (l *Log) Violation(scope, id string, v sandbox.Violation) {
	l.Violations.WithLabelValues(v.Kind).Inc()
	l.Record(scope, id, v)
}

// Record only writes v's record, for callers that count in Violations
// themselves.
func (l *Log) Record(scope, id string, v sandbox.Violation) {
	l.write(Record{Time: time.Now().UTC(), Scope: scope, ID: id, Violation: v})
}

// write appends one record.
func (l *Log) write(r Record) {
	b, err := json.Marshal(r)
	if err != nil {
		l.log.Error("audit record", "err", err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(append(b, '\n')); err != nil {
		l.log.Error("writing the audit log", "err", err)
	}
}

// Close closes the file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Close()
}

// Package audit keeps the daemon's audit trail of sandbox decisions: one
// JSON line per violation (what was refused, by which rule, in which
// session or task), per egress decision (every connection the proxy let
// through or refused), per secret the proxy added to a request, and per
// change of a running sandbox's network rules, appended to a file; and the
// agentbox_policy_violations_total counter. Records name rules, paths,
// hosts and secrets, never secret values.
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
	"github.com/agentbox/agentbox/internal/sandbox/egress"
)

// Record types.
const (
	TypeViolation     = "violation"
	TypeEgress        = "egress"
	TypeSecret        = "secret"
	TypeNetworkUpdate = "network_update"
)

// Record is one line of the audit log. Which fields are set depends on
// Type.
type Record struct {
	Time time.Time `json:"time"`
	Type string    `json:"type"`
	// Scope is what the sandbox served: "session", "exec" or "process";
	// ID is the session id or the task's id.
	Scope string `json:"scope"`
	ID    string `json:"id"`

	// violation: what was refused, how (Action: blocked, asked, dropped).
	Kind   string `json:"kind,omitempty"`
	Detail string `json:"detail,omitempty"`
	Target string `json:"target,omitempty"`
	Action string `json:"action,omitempty"`

	// egress and secret: the decision (allow, deny), who made it
	// (policy, user, timeout, daemon), how the connection came (http,
	// connect, socks5, route) and where it went.
	Decision string `json:"decision,omitempty"`
	By       string `json:"by,omitempty"`
	Via      string `json:"via,omitempty"`
	Host     string `json:"host,omitempty"`
	Port     int    `json:"port,omitempty"`
	Addr     string `json:"addr,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Route    string `json:"route,omitempty"`
	// Secret is a secret's name; its value is never recorded.
	Secret string `json:"secret,omitempty"`

	// Rule is the policy rule that decided.
	Rule    string        `json:"rule,omitempty"`
	Process *sandbox.Peer `json:"process,omitempty"`

	// network_update: the allow rules before and after.
	Previous []string `json:"previous,omitzero"`
	Allow    []string `json:"allow,omitzero"`
}

// Log appends records to a file. It is safe for concurrent use; a failing
// write is logged and does not stop the sandboxed work.
type Log struct {
	mu  sync.Mutex
	w   io.WriteCloser
	log *slog.Logger
	// Violations counts violations by kind.
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

// Violation counts v and records it, seen in the sandbox of scope/id. A
// network violation is only counted: the egress proxy's deny record
// (Egress) is its audit line.
func (l *Log) Violation(scope, id string, v sandbox.Violation) {
	l.Violations.WithLabelValues(v.Kind).Inc()
	if v.Kind == sandbox.ViolationNetwork {
		return
	}
	l.Record(scope, id, v)
}

// Record only writes v's record, for callers that count in Violations
// themselves. Like Violation, it leaves network violations to Egress.
func (l *Log) Record(scope, id string, v sandbox.Violation) {
	if v.Kind == sandbox.ViolationNetwork {
		return
	}
	l.write(Record{Time: time.Now().UTC(), Type: TypeViolation, Scope: scope, ID: id,
		Kind: v.Kind, Detail: v.Detail, Target: v.Target, Action: v.Action, Rule: v.Rule,
		Host: v.Host, Port: v.Port, Process: v.Process})
}

// Egress records one decision or secret use of the egress proxy.
func (l *Log) Egress(r egress.Record) {
	t := r.Time
	if t.IsZero() {
		t = time.Now().UTC()
	}
	l.write(Record{Time: t, Type: r.Type, Scope: r.Scope, ID: r.ID,
		Decision: r.Decision, By: r.By, Via: r.Via, Host: r.Host, Port: r.Port, Addr: r.Addr,
		Rule: r.Rule, Reason: r.Reason, Route: r.Route, Secret: r.Secret, Process: r.Process})
}

// NetworkUpdate records a change of a running sandbox's allow rules.
func (l *Log) NetworkUpdate(scope, id string, previous, allow []string) {
	if previous == nil {
		previous = []string{}
	}
	if allow == nil {
		allow = []string{}
	}
	l.write(Record{Time: time.Now().UTC(), Type: TypeNetworkUpdate, Scope: scope, ID: id, By: "api", Previous: previous, Allow: allow})
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

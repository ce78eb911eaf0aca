// Package audit keeps the daemon's audit trail of sandbox decisions: one
// JSON line per violation (what was refused, by which rule, in which
// session or task), per egress decision (every connection the proxy let
// through or refused), per secret the proxy added to a request, and per
// change of a running sandbox's network rules, appended to a file; and the
// agentbox_policy_violations_total counter. Repeated refusals are
// coalesced (sandbox.Coalescer): the first of a kind gets its line at
// once, its repeats one summary line with their count. Records name
// rules, paths, hosts and secrets, never secret values.
package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/metrics"
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
	// Outcome is how an allowed request the proxy carried ended:
	// completed, failed or aborted (egress.Record.Outcome).
	Outcome string `json:"outcome,omitempty"`

	// Rule is the policy rule that decided.
	Rule    string        `json:"rule,omitempty"`
	Process *sandbox.Peer `json:"process,omitempty"`

	// network_update: the allow rules before and after.
	Previous []string `json:"previous,omitzero"`
	Allow    []string `json:"allow,omitzero"`

	// Count is how many refusals a summary line stands for (absent:
	// one), FirstAt and LastAt when the first and last of them were.
	Count   int        `json:"count,omitempty"`
	FirstAt *time.Time `json:"first_at,omitempty"`
	LastAt  *time.Time `json:"last_at,omitempty"`
}

// Log appends records to a file. It is safe for concurrent use; a failing
// write is logged and does not stop the sandboxed work.
type Log struct {
	mu  sync.Mutex
	w   io.WriteCloser
	log *slog.Logger
	// Violations counts violations by kind.
	Violations *metrics.CounterVec

	// denials coalesces the egress proxy's deny records, per sandbox
	// (scope and id).
	denyMu  sync.Mutex
	denials map[string]*sandbox.Coalescer[Record]
	closed  bool
}

// sweepAbove is how many sandboxes' coalescers the log keeps before it
// drops those with nothing left to report.
const sweepAbove = 64

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
	return &Log{w: w, log: log, denials: map[string]*sandbox.Coalescer[Record]{}, Violations: metrics.NewViolations()}
}

// Violation counts v and records it, seen in the sandbox of scope/id. A
// network violation is only counted: the egress proxy's deny record
// (Egress) is its audit line.
func (l *Log) Violation(scope, id string, v sandbox.Violation) {
	l.Violations.WithLabelValues(v.Kind).Add(float64(v.N()))
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
	rec := Record{Time: time.Now().UTC(), Type: TypeViolation, Scope: scope, ID: id,
		Kind: v.Kind, Detail: v.Detail, Target: v.Target, Action: v.Action, Rule: v.Rule,
		Host: v.Host, Port: v.Port, Process: v.Process}
	if v.Count > 1 {
		first, last := v.First, v.Last
		rec.Count, rec.FirstAt, rec.LastAt = v.Count, &first, &last
	}
	l.write(rec)
}

// Egress records one decision or secret use of the egress proxy. Denials
// are coalesced per sandbox: a flood of refused connections costs a
// bounded number of lines, whose counts add up.
func (l *Log) Egress(r egress.Record) {
	t := r.Time
	if t.IsZero() {
		t = time.Now().UTC()
	}
	rec := Record{Time: t, Type: r.Type, Scope: r.Scope, ID: r.ID,
		Decision: r.Decision, By: r.By, Via: r.Via, Host: r.Host, Port: r.Port, Addr: r.Addr,
		Rule: r.Rule, Reason: r.Reason, Route: r.Route, Secret: r.Secret, Process: r.Process, Outcome: r.Outcome}
	if r.Type == TypeEgress && r.Decision == "deny" {
		if c := l.denialsOf(r.Scope, r.ID); c != nil {
			c.Add(rec)
			return
		}
	}
	l.write(rec)
}

// denialsOf returns the coalescer of one sandbox's deny records (nil once
// the log is closed).
func (l *Log) denialsOf(scope, id string) *sandbox.Coalescer[Record] {
	l.denyMu.Lock()
	defer l.denyMu.Unlock()
	if l.closed {
		return nil
	}
	key := scope + "\x00" + id
	if c := l.denials[key]; c != nil {
		return c
	}
	if len(l.denials) >= sweepAbove {
		for k, c := range l.denials {
			if c.Idle() {
				c.Close()
				delete(l.denials, k)
			}
		}
	}
	c := sandbox.NewCoalescer(sandbox.CoalesceConfig[Record]{
		Key: func(r Record) (string, string) {
			return fmt.Sprintf("%s\x00%s\x00%s\x00%s\x00%d\x00%s\x00%s", r.By, r.Via, r.Rule, r.Host, r.Port, r.Route, r.Addr), r.Type
		},
		Summary: summarize,
		Emit: func(rs ...Record) {
			for _, r := range rs {
				l.write(r)
			}
		},
	})
	l.denials[key] = c
	return c
}

// Settle writes the summaries held for the sandbox of scope/id and forgets
// it; call it once the sandbox's proxy is closed.
func (l *Log) Settle(scope, id string) {
	l.denyMu.Lock()
	key := scope + "\x00" + id
	c := l.denials[key]
	delete(l.denials, key)
	l.denyMu.Unlock()
	if c != nil {
		c.Close()
	}
}

// summarize is the summary line of n deny records like sample; over the
// sandbox's reporting rate, its reason counts their distinct kinds and
// names the sampled ones' destinations (see sandbox.Over).
func summarize(sample Record, n int, first, last time.Time, over *sandbox.Over[Record]) Record {
	r := sample
	first, last = first.UTC(), last.UTC()
	r.Time, r.Count, r.FirstAt, r.LastAt = last, n, &first, &last
	if over != nil {
		targets := make([]string, len(over.Samples))
		for i, s := range over.Samples {
			targets[i] = s.Addr
			if s.Host != "" {
				targets[i] = net.JoinHostPort(s.Host, strconv.Itoa(s.Port))
			}
		}
		r.Reason = fmt.Sprintf("%d connections refused over the sandbox's reporting rate%s; the first: %s",
			n, sandbox.OverDetail(over.Kinds, over.KindsAtLeast, targets), sample.Reason)
	}
	return r
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

// Close writes the summaries still held and closes the file.
func (l *Log) Close() error {
	l.denyMu.Lock()
	l.closed = true
	for k, c := range l.denials {
		c.Close()
		delete(l.denials, k)
	}
	l.denyMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Close()
}

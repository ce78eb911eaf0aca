package egress

import (
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Connection bounds. Every connection a sandbox opens to its proxy passes
// Gate.Serve's accept loop, and there, before anything else is done with
// it (no read, no /proc walk, no ask, no DNS, no dial), admit checks three
// bounds:
//
//   - the sandbox's open connections (sandbox.Network.MaxConnections);
//   - its new connections per second (MaxConnectionRate: a token bucket
//     holding one second's worth);
//   - the daemon's open proxy connections, all sandboxes together
//     (Options.MaxConnections), so that many sandboxes at their own bounds
//     still cannot take the descriptors the daemon needs for its API.
//
// A connection past a bound gets a one-line 429 answer (an HTTP client
// reads it; anything else just sees the connection end) and is closed;
// the refusal is a sandbox.Violation (rule "limit:network.max_connections",
// "limit:network.max_connection_rate" or "limit:daemon"), an audit record
// and a count (the audit log and the session coalesce repeats).

// DefaultServerMaxConnections is the daemon-wide bound of Options.
const DefaultServerMaxConnections = 4096

// Limit rules (the refusal's Violation.Rule).
const (
	RuleMaxConnections = "limit:network.max_connections"
	RuleConnectionRate = "limit:network.max_connection_rate"
	RuleDaemonLimit    = "limit:daemon"
)

// MaxConnectionsFor is a daemon-wide bound suited to a process allowed
// nofile descriptors: each proxied connection can hold three (the
// sandbox's connection, the upstream's, a runtime's transient duplicate),
// and reserve stay for everything else (the API, the store, sandboxes'
// pipes and mounts). It is at least 64 and at most
// DefaultServerMaxConnections*4.
func MaxConnectionsFor(nofile uint64, reserve uint64) int {
	n := uint64(64)
	if nofile > reserve {
		n = max(n, (nofile-reserve)/3)
	}
	return int(min(n, DefaultServerMaxConnections*4))
}

// tokenBucket is a rate limit: rate tokens a second, at most burst held.
// Not safe for concurrent use (the gate's mu guards it).
type tokenBucket struct {
	rate, burst, tokens float64
	last                time.Time
}

func newTokenBucket(perSecond int) tokenBucket {
	r := float64(perSecond)
	return tokenBucket{rate: r, burst: r, tokens: r}
}

// take reports whether a token was there at now, and takes it.
func (b *tokenBucket) take(now time.Time) bool {
	if !b.last.IsZero() {
		if d := now.Sub(b.last).Seconds(); d > 0 {
			b.tokens = min(b.burst, b.tokens+d*b.rate)
		}
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// serverConns counts the open proxy connections of every gate of a
// Server against its bound.
type serverConns struct {
	max  int64
	open atomic.Int64
}

func (s *serverConns) acquire() bool {
	if s.open.Add(1) > s.max {
		s.open.Add(-1)
		return false
	}
	return true
}

func (s *serverConns) release() { s.open.Add(-1) }

// limitAnswer is what a client past a bound reads: one small write, which
// a fresh connection's empty send buffer always takes at once.
const limitAnswer = "HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\nX-Agentbox-Denied: %s\r\n\r\n%s"

// admit registers c as one of the gate's open connections, within the
// bounds: it returns the rule and reason of the bound c is past (and then
// registers nothing), or ok=false once the gate is closed.
func (g *Gate) admit(c net.Conn) (rule, reason string, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return "", "", false
	}
	switch {
	case len(g.conns) >= g.maxConns:
		return RuleMaxConnections, fmt.Sprintf("the sandbox already holds %d connections to its egress proxy, its limit (network.max_connections)", g.maxConns), true
	case !g.s.conns.acquire():
		return RuleDaemonLimit, fmt.Sprintf("the daemon's egress proxy holds %d connections, its limit for all sandboxes together", g.s.conns.max), true
	case !g.rate.take(time.Now()):
		g.s.conns.release()
		return RuleConnectionRate, fmt.Sprintf("the sandbox opens connections to its egress proxy faster than %d a second, its limit (network.max_connection_rate)", int(g.rate.rate)), true
	}
	g.conns[c] = struct{}{}
	g.s.metrics.active.Inc()
	g.wg.Add(1)
	return "", "", true
}

// refuseConn answers and closes a connection past a bound, and reports
// it. It reads nothing from c and looks up no process.
func (g *Gate) refuseConn(c net.Conn, rule, reason string) {
	// Reported first: by the time the client reads the answer, the
	// refusal is on record.
	g.s.metrics.decisions.WithLabelValues("accept", "deny", "limit").Inc()
	// A flood of refusals costs a bounded number of audit lines: the
	// audit log coalesces deny records per sandbox (sandbox.Coalescer),
	// as the session coalesces the violations.
	g.audit(Record{Type: "egress", Decision: "deny", By: "limit", Via: "accept", Rule: rule, Reason: reason})
	if g.cfg.OnViolation != nil {
		g.cfg.OnViolation(sandbox.Violation{
			Kind: sandbox.ViolationNetwork, Detail: reason, Target: ProxyURL(g.port), Rule: rule, Action: "blocked",
		})
	}
	msg := "agentbox: " + reason + "\n"
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = fmt.Fprintf(c, limitAnswer, len(msg), headerSafe(reason), msg)
	_ = c.Close() // refused: nothing more to say
}

package egress

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

func TestTokenBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name  string
		rate  int
		at    []time.Duration // offsets of the takes
		wantN int             // how many succeed
	}{
		{"a burst of one second's worth", 5, []time.Duration{0, 0, 0, 0, 0, 0, 0}, 5},
		{"refills at the rate", 2, []time.Duration{0, 0, 0, 500 * time.Millisecond, 500 * time.Millisecond, time.Second}, 4},
		{"never more than the burst after a pause", 3, []time.Duration{0, 0, 0, time.Hour, time.Hour, time.Hour, time.Hour}, 6},
		{"a clock going back adds nothing", 1, []time.Duration{time.Second, 0, 0}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newTokenBucket(tc.rate)
			n := 0
			for _, d := range tc.at {
				if b.take(t0.Add(d)) {
					n++
				}
			}
			if n != tc.wantN {
				t.Errorf("%d takes succeeded, want %d", n, tc.wantN)
			}
		})
	}
}

func TestMaxConnectionsFor(t *testing.T) {
	for _, tc := range []struct {
		nofile, reserve uint64
		want            int
	}{
		{1024, 1024, 64},
		{4096, 1024, 1024},
		{20000, 1024, 6325},
		{1 << 20, 1024, DefaultServerMaxConnections * 4},
	} {
		if got := MaxConnectionsFor(tc.nofile, tc.reserve); got != tc.want {
			t.Errorf("MaxConnectionsFor(%d, %d) = %d, want %d", tc.nofile, tc.reserve, got, tc.want)
		}
	}
}

// lookupListener hands out connections that can name their process, and
// counts how often they were asked to (each ask is a /proc walk in a
// runtime).
type lookupListener struct {
	net.Listener
	lookups *atomic.Int64
}

func (l lookupListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingPeerConn{Conn: c, lookups: l.lookups}, nil
}

type countingPeerConn struct {
	net.Conn
	lookups *atomic.Int64
}

func (c *countingPeerConn) Peer() (sandbox.Peer, bool) {
	c.lookups.Add(1)
	return sandbox.Peer{Pid: 7, Name: "flood"}, true
}

// limitGate is a gate of srv serving a loopback listener whose
// connections count their peer lookups.
type limitGate struct {
	g       *Gate
	addr    string
	rec     *recorder
	lookups atomic.Int64
}

func newLimitGate(t *testing.T, srv *Server, network sandbox.Network) *limitGate {
	t.Helper()
	lg := &limitGate{rec: &recorder{}}
	network.Mode = sandbox.NetworkProxy
	network.Default = "ask"
	g, err := srv.Gate(Config{Scope: "exec", ID: "task_1", Network: network, OnViolation: lg.rec.violation,
		// An ask would be per-connection work: the bound must come first.
		Ask: func(context.Context, sandbox.NetworkRequest) (sandbox.NetworkAnswer, error) {
			t.Error("a connection past a bound was asked about")
			return sandbox.NetworkAnswer{}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	lg.g = g
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lg.addr = ln.Addr().String()
	go func() { _ = g.Serve(lookupListener{ln, &lg.lookups}) }()
	t.Cleanup(func() { _ = g.Close() })
	return lg
}

func (lg *limitGate) open() int {
	lg.g.mu.Lock()
	defer lg.g.mu.Unlock()
	return len(lg.g.conns)
}

// dialIdle opens a connection that sends nothing.
func (lg *limitGate) dialIdle(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", lg.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// refusedWith reads what the proxy answered c: the 429 of a bound, and
// the end of the connection.
func refusedWith(t *testing.T, c net.Conn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer on a refused connection: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d (%s), want 429", resp.StatusCode, b)
	}
	return resp.Header.Get("X-Agentbox-Denied")
}

// waitOpen waits until the gate holds n connections.
func (lg *limitGate) waitOpen(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for lg.open() != n {
		if time.Now().After(deadline) {
			t.Fatalf("the gate holds %d connections, want %d", lg.open(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestMaxConnections: past network.max_connections a connection is
// answered 429 and closed before anything is read from it or done for it
// (no process lookup, no ask, no DNS), and reported; once one closes,
// the next is admitted.
func TestMaxConnections(t *testing.T) {
	res := newResolver(testResolverMap)
	srv, err := New(Options{Resolver: res})
	if err != nil {
		t.Fatal(err)
	}
	lg := newLimitGate(t, srv, sandbox.Network{MaxConnections: 4, MaxConnectionRate: 100000})
	var held []net.Conn
	for range 4 {
		held = append(held, lg.dialIdle(t))
	}
	lg.waitOpen(t, 4)
	for range 10 {
		c := lg.dialIdle(t)
		// A request the policy would ask about: it is never read.
		_, _ = io.WriteString(c, "GET http://ask.example/ HTTP/1.1\r\nHost: ask.example\r\n\r\n")
		if why := refusedWith(t, c); !strings.Contains(why, "network.max_connections") {
			t.Errorf("refusal %q does not name the limit", why)
		}
	}
	vs := lg.rec.Violations()
	if len(vs) != 10 {
		t.Fatalf("%d violations, want one per refused connection (10): %+v", len(vs), vs)
	}
	for _, v := range vs {
		if v.Kind != sandbox.ViolationNetwork || v.Rule != RuleMaxConnections || v.Action != "blocked" || v.Process != nil || v.Detail == "" {
			t.Errorf("violation %+v", v)
		}
	}
	if n := lg.lookups.Load(); n != 0 {
		t.Errorf("%d process lookups for refused connections, want none", n)
	}
	if res.Queried("ask.example") {
		t.Error("a refused connection's destination was resolved")
	}
	_ = held[0].Close()
	lg.waitOpen(t, 3)
	c := lg.dialIdle(t)
	lg.waitOpen(t, 4)
	_ = c.Close()
	if n := len(lg.rec.Violations()); n != 10 {
		t.Errorf("%d violations after a slot freed, want still 10", n)
	}
}

// TestMaxConnectionRate: past network.max_connection_rate new
// connections are refused, at most a second's burst plus what the rate
// refilled while they came is admitted, and every refusal is a violation
// and an audit record (which the audit log coalesces).
func TestMaxConnectionRate(t *testing.T) {
	rec := &recorder{}
	srv, err := New(Options{Resolver: newResolver(testResolverMap), Audit: rec.audit})
	if err != nil {
		t.Fatal(err)
	}
	const rate, n = 5, 60
	lg := newLimitGate(t, srv, sandbox.Network{MaxConnections: 1000, MaxConnectionRate: rate})
	start := time.Now()
	refused := 0
	for range n {
		c := lg.dialIdle(t)
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		b := make([]byte, 12)
		if k, _ := io.ReadFull(c, b); k == len(b) && string(b) == "HTTP/1.1 429" {
			refused++
		}
	}
	elapsed := time.Since(start)
	// Admitted connections stay open (they are idle): the gate holds
	// exactly those that were not refused.
	admitted := n - refused
	lg.waitOpen(t, admitted)
	if most := rate + int(elapsed.Seconds()*rate) + 1; admitted > most {
		t.Errorf("%d connections admitted in %v, want at most %d at %d a second", admitted, elapsed, most, rate)
	}
	if admitted < rate {
		t.Errorf("%d connections admitted, want at least the burst (%d)", admitted, rate)
	}
	vs := lg.rec.Violations()
	if len(vs) != refused {
		t.Errorf("%d violations for %d refusals", len(vs), refused)
	}
	for _, v := range vs {
		if v.Rule != RuleConnectionRate {
			t.Errorf("violation %+v, want rule %s", v, RuleConnectionRate)
		}
	}
	recs := rec.find(func(r Record) bool { return r.By == "limit" })
	if len(recs) == 0 || recs[0].Rule != RuleConnectionRate || recs[0].Decision != "deny" {
		t.Fatalf("audit records of refusals: %+v, want the first at once", recs)
	}
	// One record per refusal here: the audit log coalesces them per
	// sandbox (internal/audit TestDenialsCoalesced), like every denial.
	if len(recs) != refused {
		t.Errorf("%d audit records for %d refusals", len(recs), refused)
	}
}

// TestDaemonConnectionLimit: all gates of a Server together hold at most
// Options.MaxConnections, whatever each sandbox's own bound.
func TestDaemonConnectionLimit(t *testing.T) {
	srv, err := New(Options{Resolver: newResolver(testResolverMap), MaxConnections: 3})
	if err != nil {
		t.Fatal(err)
	}
	nw := sandbox.Network{MaxConnections: 10, MaxConnectionRate: 1000}
	a, b := newLimitGate(t, srv, nw), newLimitGate(t, srv, nw)
	ca := a.dialIdle(t)
	a.dialIdle(t)
	a.waitOpen(t, 2)
	b.dialIdle(t)
	b.waitOpen(t, 1)
	for _, g := range []*limitGate{a, b} {
		if why := refusedWith(t, g.dialIdle(t)); !strings.Contains(why, "all sandboxes") {
			t.Errorf("refusal %q does not name the daemon's limit", why)
		}
		if vs := g.rec.Violations(); len(vs) != 1 || vs[0].Rule != RuleDaemonLimit {
			t.Errorf("violations %+v, want one of rule %s", vs, RuleDaemonLimit)
		}
	}
	_ = ca.Close()
	a.waitOpen(t, 1)
	b.dialIdle(t)
	b.waitOpen(t, 2)
}

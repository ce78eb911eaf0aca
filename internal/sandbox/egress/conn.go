package egress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	metric "github.com/agentbox/agentbox/internal/metrics"
)

// handle sniffs a client connection's first byte: 0x05 starts a SOCKS5
// handshake, anything else is HTTP, which the gate's http.Server serves.
func (g *Gate) handle(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(g.s.opts.HandshakeTimeout))
	br := bufio.NewReader(c)
	b, err := br.Peek(1)
	if err != nil {
		g.untrack(c)
		_ = c.Close()
		return
	}
	bc := &bufConn{Conn: c, r: br, done: func() { g.untrack(c) }}
	if b[0] == socksVersion {
		defer func() { _ = bc.Close() }() // the tunnel is over; nothing to report
		g.socks(bc)
		return
	}
	// The http.Server sets its own deadlines from here on.
	_ = c.SetReadDeadline(time.Time{})
	if !g.httpLn.push(bc) {
		_ = bc.Close()
	}
}

// bufConn is a client connection whose first bytes were read ahead.
type bufConn struct {
	net.Conn
	r    *bufio.Reader
	once sync.Once
	done func()
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Unwrap returns the runtime's connection (for sandbox.PeerConn).
func (c *bufConn) Unwrap() net.Conn { return c.Conn }

func (c *bufConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.done)
	return err
}

// CloseWrite half-closes the client connection when it can be.
func (c *bufConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// connListener hands connections the gate sniffed as HTTP to its
// http.Server.
type connListener struct {
	ch     chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newConnListener() *connListener {
	return &connListener{ch: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *connListener) push(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.closed:
		return false
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *connListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// splice copies both ways between the client and the upstream until both
// directions end, half-closing each side when the other stops sending, or
// until ctx ends (the gate closed), which closes both.
func splice(ctx context.Context, client, upstream net.Conn) {
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = client.Close()
		_ = upstream.Close()
	})
	defer stop()
	var wg sync.WaitGroup
	one := func(dst, src net.Conn) {
		defer wg.Done()
		_, err := io.Copy(dst, src)
		if err != nil && !errors.Is(err, net.ErrClosed) {
			// A broken side ends the tunnel both ways.
			_ = client.Close()
			_ = upstream.Close()
			return
		}
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	wg.Add(2)
	go one(upstream, client)
	go one(client, upstream)
	go func() { wg.Wait(); close(done) }()
	<-done
	_ = client.Close()
	_ = upstream.Close()
}

// metrics are the proxy's counters.
type metrics struct {
	decisions  *metric.CounterVec
	secrets    *metric.CounterVec
	active     *metric.Gauge
	askSeconds *metric.Histogram
}

func newMetrics(reg metric.Registerer) (*metrics, error) {
	m := &metrics{
		decisions: metric.NewCounterVec(metric.CounterOpts{
			Name: "agentbox_egress_decisions_total",
			Help: "Connections and plain-HTTP requests the egress proxy decided, by how they came (http, connect, socks5, route; accept for connections refused by a connection bound before they were read), decision (allow, deny) and who decided (policy, user, timeout, daemon, limit).",
		}, []string{"via", "decision", "by"}),
		secrets: metric.NewCounterVec(metric.CounterOpts{
			Name: "agentbox_egress_secret_injections_total",
			Help: "Requests the egress proxy added a secret to, by secret name.",
		}, []string{"secret"}),
		active: metric.NewGauge(metric.GaugeOpts{
			Name: "agentbox_egress_connections_active",
			Help: "Client connections open through the egress proxy.",
		}),
		askSeconds: metric.NewHistogram(metric.HistogramOpts{
			Name:    "agentbox_egress_ask_seconds",
			Help:    "How long per-connection network approvals took to be answered.",
			Buckets: []float64{0.001, 0.01, 0.1, 1, 5, 15, 30, 60, 300},
		}),
	}
	if reg != nil {
		for _, c := range []metric.Collector{m.decisions, m.secrets, m.active, m.askSeconds} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

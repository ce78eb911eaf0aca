package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/store/postgres/pgwire"

	"github.com/agentbox/agentbox/internal/store"
)

// pool is a small pool of connections: at most size are open at once, idle
// ones are kept for reuse, and one that failed (closed, busy, or left in a
// transaction) is dropped rather than reused.
type pool struct {
	cfg *pgwire.Config
	sem chan struct{} // a slot per open or opening connection

	mu     sync.Mutex
	idle   []*pgwire.Conn
	closed bool
}

func newPool(cfg *pgwire.Config, size int) *pool {
	return &pool{cfg: cfg, sem: make(chan struct{}, size)}
}

func (p *pool) acquire(ctx context.Context) (*pgwire.Conn, error) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.sem
		return nil, store.ErrClosed
	}
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	c, err := pgwire.Connect(ctx, p.cfg)
	if err != nil {
		<-p.sem
		return nil, err
	}
	return c, nil
}

func (p *pool) release(c *pgwire.Conn) {
	defer func() { <-p.sem }()
	if c.IsClosed() || c.TxStatus() != 'I' {
		closeConn(c)
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		closeConn(c)
		return
	}
	p.idle = append(p.idle, c)
	p.mu.Unlock()
}

// close closes the idle connections; connections in use are closed when
// released.
func (p *pool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, c := range idle {
		closeConn(c)
	}
}

func closeConn(c *pgwire.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Close(ctx) // best effort: the server ends the session either way
}

// query runs one statement on a pooled connection and returns its rows.
func (p *pool) query(ctx context.Context, sql string, ps ...param) ([][][]byte, pgwire.CommandTag, error) {
	c, err := p.acquire(ctx)
	if err != nil {
		return nil, "", err
	}
	defer p.release(c)
	vals, oids := split(ps)
	res, err := c.ExecParams(ctx, sql, vals, oids)
	if err != nil {
		return nil, "", err
	}
	return res.Rows, res.Tag, nil
}

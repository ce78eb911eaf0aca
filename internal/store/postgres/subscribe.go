package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/internal/store/postgres/pgwire"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/store"
)

// readBatch is how many events a subscriber reads from the table at once.
const readBatch = 512

// hub knows the subscribers of each session, to wake them.
type hub struct {
	mu   sync.Mutex
	subs map[string]map[*sub]struct{}
}

// sub is one subscription: its goroutine reads the table after cursor and
// waits on wake when it has read everything.
type sub struct {
	cursor atomic.Int64  // last seq read from the table
	wake   chan struct{} // capacity 1: a wake-up is never lost
}

func (h *hub) add(sessionID string, x *sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.subs[sessionID]
	if m == nil {
		m = map[*sub]struct{}{}
		h.subs[sessionID] = m
	}
	m[x] = struct{}{}
}

func (h *hub) remove(sessionID string, x *sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs[sessionID], x)
	if len(h.subs[sessionID]) == 0 {
		delete(h.subs, sessionID)
	}
}

// wake tells the subscribers of a session that its log reaches seq (-1:
// something else changed, such as a delete): those behind read again.
func (h *hub) wake(sessionID string, seq int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for x := range h.subs[sessionID] {
		if seq < 0 || seq > x.cursor.Load() {
			poke(x.wake)
		}
	}
}

// wakeAll wakes every subscriber, after notifications may have been lost.
func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.subs {
		for x := range m {
			poke(x.wake)
		}
	}
}

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Subscribe implements store.Store. The subscription reads the table from
// after, and again whenever this store commits to the session or another
// store's commit is notified; it closes when ctx ends, the store closes or
// the session is deleted.
func (s *Store) Subscribe(ctx context.Context, sessionID string, after int64) (<-chan event.Event, error) {
	if !s.enter() {
		return nil, fmt.Errorf("subscribe to session %q: %w", sessionID, store.ErrClosed)
	}
	defer s.leave()
	if _, err := s.getSession(ctx, sessionID); err != nil {
		return nil, fmt.Errorf("subscribe to session %q: %w", sessionID, err)
	}
	x := &sub{wake: make(chan struct{}, 1)}
	x.cursor.Store(max(after, 0))
	// Registered before the first read: a commit after that read wakes it.
	s.hub.add(sessionID, x)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	out := make(chan event.Event)
	s.bg.Go(func() {
		defer close(out)
		defer cancel()
		defer stop()
		defer s.hub.remove(sessionID, x)
		s.feed(ctx, sessionID, x, out)
	})
	return out, nil
}

// feed delivers the session's events to out until ctx ends or the session
// is gone.
func (s *Store) feed(ctx context.Context, sessionID string, x *sub, out chan<- event.Event) {
	retry := 10 * time.Millisecond
	for {
		evs, err := s.events(ctx, sessionID, x.cursor.Load(), readBatch)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, store.ErrNotFound):
			return // deleted
		case err != nil:
			// The database is unreachable for now: try again,
			// sooner if woken.
			select {
			case <-ctx.Done():
				return
			case <-x.wake:
			case <-time.After(retry):
			}
			retry = min(2*retry, 2*time.Second)
			continue
		}
		retry = 10 * time.Millisecond
		for _, e := range evs {
			select {
			case out <- e:
			case <-ctx.Done():
				return
			}
			x.cursor.Store(e.Seq)
		}
		if len(evs) == readBatch {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-x.wake:
		}
	}
}

// listen opens the listening connection.
func (s *Store) listen(ctx context.Context) (*pgwire.Conn, error) {
	cfg := s.cfg.Copy()
	cfg.OnNotification = func(n *pgwire.Notification) {
		if n.Channel != channel {
			return
		}
		id, seq, ok := strings.Cut(n.Payload, " ")
		if !ok {
			return
		}
		if q, err := strconv.ParseInt(seq, 10, 64); err == nil {
			s.hub.wake(id, q)
		}
	}
	c, err := pgwire.Connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := c.Exec(ctx, "LISTEN "+channel); err != nil {
		closeConn(c)
		return nil, err
	}
	return c, nil
}

// listener waits for notifications on c until the store closes; when the
// connection is lost it listens again on a new one and wakes every
// subscriber, which re-reads the table: what was notified meanwhile is
// found there.
func (s *Store) listener(c *pgwire.Conn) {
	backoff := 50 * time.Millisecond
	for {
		if c != nil {
			err := c.WaitForNotification(s.ctx)
			if err == nil {
				continue
			}
			closeConn(c)
			c = nil
		}
		if s.ctx.Err() != nil {
			return
		}
		var err error
		if c, err = s.listen(s.ctx); err != nil {
			c = nil
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		s.hub.wakeAll()
	}
}

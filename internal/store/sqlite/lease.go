package sqlite

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

var _ store.Leases = (*Store)(nil)

// leaseTable keeps the sessions' leases in memory: one process opens a
// database at a time (its lock file), so a lease never outlives the daemon
// that holds it, and a daemon started on the file afterwards finds every
// session free. Epochs start again at 1 in each process, which is safe for
// the same reason: no earlier owner is left to fence off.
type leaseTable struct {
	mu sync.Mutex
	m  map[string]store.Lease
}

// epoch is the current epoch of a session's lease (0: never leased).
func (t *leaseTable) epoch(sessionID string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[sessionID].Epoch
}

func (t *leaseTable) forget(sessionID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, sessionID)
}

// get returns a session's lease as of now.
func (t *leaseTable) getLocked(sessionID string, now time.Time) store.Lease {
	l := t.m[sessionID]
	l.SessionID = sessionID
	l.Held = l.Owner != "" && now.Before(l.Expires)
	return l
}

// AcquireLease implements store.Leases.
func (s *Store) AcquireLease(ctx context.Context, sessionID, owner, addr string, ttl time.Duration) (store.Lease, error) {
	if owner == "" {
		return store.Lease{}, fmt.Errorf("acquire the lease of session %q: empty owner", sessionID)
	}
	if err := s.leaseSession(ctx, sessionID); err != nil {
		return store.Lease{}, fmt.Errorf("acquire the lease of session %q: %w", sessionID, err)
	}
	t := &s.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	l := t.getLocked(sessionID, now)
	if l.Held && l.Owner != owner {
		return store.Lease{}, fmt.Errorf("acquire the lease of session %q: %w", sessionID, &store.HeldError{Lease: l})
	}
	if l.Owner != owner {
		l.Epoch++
	}
	l.Owner, l.Addr, l.Expires, l.Held = owner, addr, now.Add(max(ttl, 1)), true
	t.m[sessionID] = l
	return l, nil
}

// RenewLease implements store.Leases.
func (s *Store) RenewLease(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	if err := s.leaseSession(ctx, l.SessionID); err != nil {
		return store.Lease{}, fmt.Errorf("renew the lease of session %q: %w", l.SessionID, err)
	}
	t := &s.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	cur := t.getLocked(l.SessionID, now)
	if cur.Owner != l.Owner || cur.Epoch != l.Epoch || l.Owner == "" {
		return store.Lease{}, fmt.Errorf("renew the lease of session %q: %w", l.SessionID, store.ErrLeaseLost)
	}
	cur.Expires, cur.Held = now.Add(max(ttl, 1)), true
	t.m[l.SessionID] = cur
	return cur, nil
}

// ReleaseLease implements store.Leases.
func (s *Store) ReleaseLease(ctx context.Context, l store.Lease) error {
	if err := s.leaseSession(ctx, l.SessionID); err != nil {
		return fmt.Errorf("release the lease of session %q: %w", l.SessionID, err)
	}
	t := &s.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.m[l.SessionID]
	if cur.Owner != l.Owner || cur.Epoch != l.Epoch || l.Owner == "" {
		return fmt.Errorf("release the lease of session %q: %w", l.SessionID, store.ErrLeaseLost)
	}
	t.m[l.SessionID] = store.Lease{SessionID: l.SessionID, Epoch: cur.Epoch}
	return nil
}

// GetLease implements store.Leases.
func (s *Store) GetLease(ctx context.Context, sessionID string) (store.Lease, error) {
	if err := s.leaseSession(ctx, sessionID); err != nil {
		return store.Lease{}, fmt.Errorf("get the lease of session %q: %w", sessionID, err)
	}
	t := &s.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.getLocked(sessionID, time.Now()), nil
}

// leaseSession checks that the store is open and the session exists.
func (s *Store) leaseSession(ctx context.Context, sessionID string) error {
	if !s.enter() {
		return store.ErrClosed
	}
	defer s.leave()
	return s.mustExist(ctx, sessionID)
}

// fenced is the error of an operation whose fence (o.epoch) is not the
// session's lease epoch, nil when it may write. The writer checks it
// before writing, in the transaction: a takeover after the check is
// ordered after the write, in the log too.
func (w *writer) fenced(o *op) error {
	if o.epoch <= 0 {
		return nil
	}
	if cur := w.s.leases.epoch(o.sessionID); cur != o.epoch {
		return fmt.Errorf("%w (epoch %d, the session's is %d)", store.ErrFenced, o.epoch, cur)
	}
	return nil
}

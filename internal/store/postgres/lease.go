package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

// Leases live on the session's row (migration 0005); expiry is decided by
// the server's clock, which every daemon shares. Each statement is one
// row-level atomic UPDATE, ordered with appends by the row's lock.

var _ store.Leases = (*Store)(nil)

// nowSQL is the server's clock in unix nanoseconds.
const nowSQL = `(extract(epoch FROM clock_timestamp()) * 1000000000)::int8`

// leaseCols are what every lease statement returns, for scanLease.
const leaseCols = "lease_owner, lease_addr, lease_epoch, lease_expires"

// acquireLeaseSQL takes the lease of $1 for owner $2 at $3 for $4 ns when
// it is free, expired or already $2's; the epoch grows when the owner
// changes. No row: held by another, or no session.
const acquireLeaseSQL = `WITH c AS (SELECT ` + nowSQL + ` AS now)
UPDATE sessions SET
	lease_epoch = CASE WHEN lease_owner = $2 THEN lease_epoch ELSE lease_epoch + 1 END,
	lease_owner = $2, lease_addr = $3, lease_expires = c.now + $4
FROM c
WHERE id = $1 AND (lease_owner = '' OR lease_owner = $2 OR lease_expires <= c.now)
RETURNING ` + leaseCols + `, c.now`

// renewLeaseSQL extends the lease of $1 if $2 still holds it at epoch $3.
const renewLeaseSQL = `WITH c AS (SELECT ` + nowSQL + ` AS now)
UPDATE sessions SET lease_expires = c.now + $4 FROM c
WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3
RETURNING ` + leaseCols + `, c.now`

// releaseLeaseSQL frees the lease of $1 if $2 holds it at epoch $3,
// keeping the epoch.
const releaseLeaseSQL = `UPDATE sessions SET lease_owner = '', lease_addr = '', lease_expires = 0
WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3 RETURNING 1::int8`

const getLeaseSQL = `SELECT ` + leaseCols + `, ` + nowSQL + ` FROM sessions WHERE id = $1`

func scanLease(sessionID string, r [][]byte) (store.Lease, error) {
	l := store.Lease{SessionID: sessionID, Owner: string(r[0]), Addr: string(r[1])}
	var err error
	if l.Epoch, err = getInt8(r[2]); err != nil {
		return l, err
	}
	exp, err := getInt8(r[3])
	if err != nil {
		return l, err
	}
	now, err := getInt8(r[4])
	if err != nil {
		return l, err
	}
	if exp != 0 {
		l.Expires = fromNanos(exp)
	}
	l.Held = l.Owner != "" && exp > now
	return l, nil
}

func ttlNanos(ttl time.Duration) param { return int8p(max(int64(ttl), 1)) }

// AcquireLease implements store.Leases.
func (s *Store) AcquireLease(ctx context.Context, sessionID, owner, addr string, ttl time.Duration) (store.Lease, error) {
	if owner == "" {
		return store.Lease{}, fmt.Errorf("acquire the lease of session %q: empty owner", sessionID)
	}
	if !s.enter() {
		return store.Lease{}, fmt.Errorf("acquire the lease of session %q: %w", sessionID, store.ErrClosed)
	}
	defer s.leave()
	rows, _, err := s.pool.query(ctx, acquireLeaseSQL, text(sessionID), text(owner), text(addr), ttlNanos(ttl))
	if err == nil && len(rows) == 0 {
		var cur store.Lease
		if cur, err = s.getLease(ctx, sessionID); err == nil {
			err = &store.HeldError{Lease: cur}
		}
	}
	if err != nil {
		return store.Lease{}, fmt.Errorf("acquire the lease of session %q: %w", sessionID, err)
	}
	return scanLease(sessionID, rows[0])
}

// RenewLease implements store.Leases.
func (s *Store) RenewLease(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	if !s.enter() {
		return store.Lease{}, fmt.Errorf("renew the lease of session %q: %w", l.SessionID, store.ErrClosed)
	}
	defer s.leave()
	rows, _, err := s.pool.query(ctx, renewLeaseSQL, text(l.SessionID), text(l.Owner), int8p(l.Epoch), ttlNanos(ttl))
	if err == nil && len(rows) == 0 {
		err = s.lostLease(ctx, l.SessionID)
	}
	if err != nil {
		return store.Lease{}, fmt.Errorf("renew the lease of session %q: %w", l.SessionID, err)
	}
	return scanLease(l.SessionID, rows[0])
}

// ReleaseLease implements store.Leases.
func (s *Store) ReleaseLease(ctx context.Context, l store.Lease) error {
	if !s.enter() {
		return fmt.Errorf("release the lease of session %q: %w", l.SessionID, store.ErrClosed)
	}
	defer s.leave()
	rows, _, err := s.pool.query(ctx, releaseLeaseSQL, text(l.SessionID), text(l.Owner), int8p(l.Epoch))
	if err == nil && len(rows) == 0 {
		err = s.lostLease(ctx, l.SessionID)
	}
	if err != nil {
		return fmt.Errorf("release the lease of session %q: %w", l.SessionID, err)
	}
	return nil
}

// lostLease is the error of a renewal or release that changed nothing.
func (s *Store) lostLease(ctx context.Context, sessionID string) error {
	if _, err := s.getLease(ctx, sessionID); err != nil {
		return err
	}
	return store.ErrLeaseLost
}

// GetLease implements store.Leases.
func (s *Store) GetLease(ctx context.Context, sessionID string) (store.Lease, error) {
	if !s.enter() {
		return store.Lease{}, fmt.Errorf("get the lease of session %q: %w", sessionID, store.ErrClosed)
	}
	defer s.leave()
	l, err := s.getLease(ctx, sessionID)
	if err != nil {
		return store.Lease{}, fmt.Errorf("get the lease of session %q: %w", sessionID, err)
	}
	return l, nil
}

func (s *Store) getLease(ctx context.Context, sessionID string) (store.Lease, error) {
	rows, _, err := s.pool.query(ctx, getLeaseSQL, text(sessionID))
	if err != nil {
		return store.Lease{}, err
	}
	if len(rows) == 0 {
		return store.Lease{}, store.ErrNotFound
	}
	return scanLease(sessionID, rows[0])
}

// refused is the error of a fenced write that wrote nothing: the session
// is gone, or its lease has another epoch.
func (s *Store) refused(ctx context.Context, sessionID string, epoch int64) error {
	l, err := s.getLease(ctx, sessionID)
	if err != nil {
		return err
	}
	if epoch > 0 && l.Epoch != epoch {
		return fmt.Errorf("%w (epoch %d, the session's is %d)", store.ErrFenced, epoch, l.Epoch)
	}
	return store.ErrNotFound
}

package store

import (
	"context"
	"time"

	"github.com/agentbox/agentbox/internal/errkind"
)

// Errors of leases and fencing. Implementations wrap them with %w.
var (
	// ErrLeaseHeld: another owner holds the session's lease and it has
	// not expired.
	ErrLeaseHeld = errkind.New(errkind.Conflict, "the session's lease is held by another daemon")
	// ErrLeaseLost: the lease renewed or released is no longer the
	// caller's (it expired and another owner took it, or was released).
	ErrLeaseLost = errkind.New(errkind.Conflict, "the session's lease was lost")
	// ErrFenced: a write carried a fence (WithFence) whose epoch is not
	// the session's current one; nothing was written.
	ErrFenced = errkind.New(errkind.Conflict, "fenced: another daemon has taken the session over")
)

// Lease is a daemon's claim to drive a session's agent: exactly one owner
// at a time, until Expires. Epoch grows by one each time the lease passes
// to another owner (or is taken after a release), never on a renewal, so
// that the writes of an owner that lost it can be told apart (fencing).
type Lease struct {
	SessionID string `json:"session_id"`
	// Owner is the id of the daemon holding it; empty when nobody has
	// ever held it or it was released.
	Owner string `json:"owner,omitempty"`
	// Addr is the URL the owner advertises for requests forwarded to it.
	Addr  string `json:"addr,omitempty"`
	Epoch int64  `json:"epoch"`
	// Expires is when it expires, by the store's clock.
	Expires time.Time `json:"expires"`
	// Held reports, as of the read, that Owner holds it: not released
	// and not expired (by the store's clock, so that daemons whose
	// clocks differ agree).
	Held bool `json:"held"`
}

// Leases is the optional ability of a Store to keep one lease per session.
// A store shared by several processes (PostgreSQL) keeps the leases in the
// database and decides expiry by its own clock; a store only one process
// opens at a time (SQLite) may keep them in memory.
type Leases interface {
	// AcquireLease gives the session's lease to owner (advertising addr)
	// for ttl when nobody holds it, it expired, or owner holds it already
	// (then it is renewed, same epoch). Otherwise it fails with
	// ErrLeaseHeld, wrapped in a *HeldError saying by whom. An unknown
	// session is ErrNotFound.
	AcquireLease(ctx context.Context, sessionID, owner, addr string, ttl time.Duration) (Lease, error)
	// RenewLease extends l for ttl from now if its owner still holds it at
	// the same epoch, even past its expiry when nobody took it meanwhile;
	// else ErrLeaseLost.
	RenewLease(ctx context.Context, l Lease, ttl time.Duration) (Lease, error)
	// ReleaseLease gives l up if its owner still holds it at the same
	// epoch (else ErrLeaseLost); the next AcquireLease by anyone takes the
	// next epoch.
	ReleaseLease(ctx context.Context, l Lease) error
	// GetLease reads a session's lease; a session never leased has a
	// zero Owner and Epoch. An unknown session is ErrNotFound.
	GetLease(ctx context.Context, sessionID string) (Lease, error)
}

// HeldError is the error of an AcquireLease refused because another owner
// holds the lease: Lease is that owner's.
type HeldError struct{ Lease Lease }

func (e *HeldError) Error() string {
	return "session " + e.Lease.SessionID + ": lease held by daemon " + e.Lease.Owner + " until " + e.Lease.Expires.Format(time.RFC3339Nano)
}

func (e *HeldError) Unwrap() error { return ErrLeaseHeld }

// Fence is what a session's driver writes under: the epoch of its lease.
type Fence struct {
	SessionID string
	Epoch     int64
}

type fenceKey struct{}

// WithFence returns a context under which the writes a store does to the
// session (Append, CreateRequest, ResolveRequest, UpdateSession) succeed
// only while its lease's epoch is epoch: checked in the same transaction as
// the write, which otherwise fails with ErrFenced and writes nothing.
// Writes to other sessions, and writes without a fence, are not checked.
// A context carries one fence; an epoch <= 0 removes it.
func WithFence(ctx context.Context, sessionID string, epoch int64) context.Context {
	if epoch <= 0 {
		return context.WithValue(ctx, fenceKey{}, Fence{})
	}
	return context.WithValue(ctx, fenceKey{}, Fence{SessionID: sessionID, Epoch: epoch})
}

// FenceOf returns the epoch a write to sessionID under ctx must match, 0
// when it is not fenced.
func FenceOf(ctx context.Context, sessionID string) int64 {
	f, _ := ctx.Value(fenceKey{}).(Fence)
	if f.SessionID != sessionID {
		return 0
	}
	return f.Epoch
}

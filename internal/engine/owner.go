package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/store"
)

// Ownership among daemons sharing a store: a daemon drives a session's
// agent only while it holds the session's lease (store.Leases), renews it
// every third of its TTL, and writes to the session under the lease's
// epoch (store.WithFence), so that once another daemon has taken the
// session over, whatever the first one still tries to write is refused.
// A session whose owner stopped renewing (it died, or lost the store) is
// taken over by the first daemon that sweeps it or gets a request for it:
// its log then says so (turn.completed of the turn in flight, interrupted;
// session.ended, interrupted, naming both daemons), and its next message
// resumes the agent natively there.

// DefaultLeaseTTL is how long a session's lease lasts without a renewal:
// how long a session whose daemon died waits before another takes it over.
const DefaultLeaseTTL = 15 * time.Second

// heldGrace is how long a daemon keeps fencing the writes to a session
// whose lease it released or lost: writes of its teardown still running
// then fail rather than land in a log another daemon now writes.
const heldGrace = time.Minute

// owner is the manager's side of ownership.
type owner struct {
	ls   store.Leases // nil: the store keeps no leases, nothing is fenced
	id   string
	addr string
	ttl  time.Duration

	mu   sync.Mutex
	held map[string]*held

	stop chan struct{} // closed by Shutdown
	done chan struct{} // closed when the loop has returned
	once sync.Once     // starts the loop
}

// held is a lease this daemon holds or recently held.
type held struct {
	lease store.Lease
	// renewed is when the last successful acquire or renewal started,
	// by this daemon's clock.
	renewed time.Time
	// gone is when it was released or lost; zero while it is held.
	gone time.Time
}

func newOwner(st store.Store, cfg Config) *owner {
	o := &owner{id: cfg.DaemonID, addr: cfg.Advertise, ttl: cfg.LeaseTTL, held: map[string]*held{},
		stop: make(chan struct{}), done: make(chan struct{})}
	o.ls, _ = st.(store.Leases)
	if o.id == "" {
		o.id = ids.New(ids.Daemon)
	}
	if o.ttl <= 0 {
		o.ttl = DefaultLeaseTTL
	}
	return o
}

// DaemonID is this daemon's id in the leases it takes.
func (m *Manager) DaemonID() string { return m.own.id }

// fence returns ctx carrying the epoch of the session's lease when this
// daemon holds it (or recently did).
func (o *owner) fence(ctx context.Context, sessionID string) context.Context {
	if o.ls == nil {
		return ctx
	}
	// The epoch is read under the lock: renewAll replaces h.lease.
	o.mu.Lock()
	h := o.held[sessionID]
	var epoch int64
	if h != nil {
		epoch = h.lease.Epoch
	}
	o.mu.Unlock()
	if h == nil {
		return ctx
	}
	return store.WithFence(ctx, sessionID, epoch)
}

// claim takes the session's lease for this daemon, which is about to drive
// its agent. A lease another daemon holds is a *store.HeldError.
func (o *owner) claim(ctx context.Context, sessionID string) (store.Lease, error) {
	if o.ls == nil {
		return store.Lease{}, nil
	}
	start := time.Now()
	l, err := o.ls.AcquireLease(ctx, sessionID, o.id, o.addr, o.ttl)
	if err != nil {
		return store.Lease{}, err
	}
	o.mu.Lock()
	o.held[sessionID] = &held{lease: l, renewed: start}
	o.mu.Unlock()
	return l, nil
}

// unclaim releases the session's lease once this daemon has stopped
// driving it; its epoch keeps fencing late writes for heldGrace.
func (o *owner) unclaim(sessionID string) {
	if o.ls == nil {
		return
	}
	o.mu.Lock()
	h := o.held[sessionID]
	if h == nil || !h.gone.IsZero() {
		o.mu.Unlock()
		return
	}
	h.gone = time.Now()
	l := h.lease
	o.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), o.ttl)
	defer cancel()
	// Lost meanwhile, or the store failed: either way the lease expires.
	_ = o.ls.ReleaseLease(ctx, l)
}

// holds reports whether this daemon holds the session's lease.
func (o *owner) holds(sessionID string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.held[sessionID]
	return h != nil && h.gone.IsZero()
}

// fencingStore is the manager's store: every write to a session this
// daemon holds the lease of carries the lease's epoch.
type fencingStore struct {
	store.Store
	o *owner
}

func (s fencingStore) Append(ctx context.Context, sessionID string, evs ...event.Event) ([]event.Event, error) {
	return s.Store.Append(s.o.fence(ctx, sessionID), sessionID, evs...)
}

func (s fencingStore) CreateRequest(ctx context.Context, r store.Request, requested event.Event) (event.Event, error) {
	return s.Store.CreateRequest(s.o.fence(ctx, r.SessionID), r, requested)
}

func (s fencingStore) ResolveRequest(ctx context.Context, sessionID, id string, resolved event.Event) (event.Event, error) {
	return s.Store.ResolveRequest(s.o.fence(ctx, sessionID), sessionID, id, resolved)
}

func (s fencingStore) UpdateSession(ctx context.Context, id string, fn func(*store.Session) error) (store.Session, error) {
	return s.Store.UpdateSession(s.o.fence(ctx, id), id, fn)
}

// Owner is the daemon that drives a session's agent.
type Owner struct {
	Daemon string
	// Addr is the URL it advertises; empty when it advertises none.
	Addr string
	// Expires is when its lease expires unless renewed.
	Expires time.Time
}

// SessionOwner returns the daemon that drives session id (holds its
// unexpired lease) when it is another one; ok is false when this daemon
// drives it, nobody does, or the store keeps no leases. The API forwards
// the requests that need the session's agent to it.
func (m *Manager) SessionOwner(ctx context.Context, id string) (Owner, bool, error) {
	if m.own.ls == nil || m.lookup(id) != nil || m.own.holds(id) {
		return Owner{}, false, nil
	}
	l, err := m.own.ls.GetLease(ctx, id)
	if err != nil {
		return Owner{}, false, notFound(err, "session", id)
	}
	if !l.Held || l.Owner == m.own.id {
		return Owner{}, false, nil
	}
	return Owner{Daemon: l.Owner, Addr: l.Addr, Expires: l.Expires}, true, nil
}

// startOwnership starts the loop that renews this daemon's leases and
// sweeps the sessions whose owner is gone, once.
func (m *Manager) startOwnership() {
	if m.own.ls == nil {
		return
	}
	m.own.once.Do(func() { go m.ownLoop() })
}

// stopOwnership stops the loop and waits for it.
func (m *Manager) stopOwnership() {
	started := false
	m.own.once.Do(func() { close(m.own.done) }) // never started: nothing to wait for
	select {
	case <-m.own.stop:
	default:
		close(m.own.stop)
		started = true
	}
	if started {
		<-m.own.done
	}
}

// ownLoop renews every third of the TTL and sweeps every TTL. It runs
// detached from any request, until Shutdown.
func (m *Manager) ownLoop() {
	defer close(m.own.done)
	renew := time.NewTicker(max(m.own.ttl/3, time.Millisecond))
	defer renew.Stop()
	lastSweep := time.Now()
	for {
		select {
		case <-m.own.stop:
			return
		case <-renew.C:
		}
		m.renewAll()
		if time.Since(lastSweep) >= m.own.ttl {
			lastSweep = time.Now()
			ctx, cancel := context.WithTimeout(m.base, m.own.ttl)
			if _, err := m.sweep(ctx); err != nil {
				m.log.Warn("sweeping sessions whose daemon is gone", "err", err)
			}
			cancel()
		}
	}
}

// renewAll renews the leases this daemon holds. A lease it lost, or could
// not renew for a whole TTL, ends the session's agent here: another daemon
// may be driving it by now.
func (m *Manager) renewAll() {
	o := m.own
	o.mu.Lock()
	var leases []store.Lease
	for id, h := range o.held {
		switch {
		case h.gone.IsZero():
			leases = append(leases, h.lease)
		case time.Since(h.gone) > heldGrace:
			delete(o.held, id)
		}
	}
	o.mu.Unlock()
	for _, l := range leases {
		start := time.Now()
		ctx, cancel := context.WithTimeout(m.base, o.ttl/3)
		nl, err := o.ls.RenewLease(ctx, l, o.ttl)
		cancel()
		o.mu.Lock()
		h := o.held[l.SessionID]
		if h == nil || h.lease.Epoch != l.Epoch || !h.gone.IsZero() {
			o.mu.Unlock()
			continue
		}
		lost := false
		switch {
		case err == nil:
			h.lease, h.renewed = nl, start
		case errors.Is(err, store.ErrLeaseLost), errors.Is(err, store.ErrNotFound), time.Since(h.renewed) >= o.ttl:
			h.gone, lost = time.Now(), true
		}
		o.mu.Unlock()
		if lost {
			m.log.Warn("lost a session's lease: stopping its agent here", "session", l.SessionID, "epoch", l.Epoch, "err", err)
			m.abandon(l.SessionID)
		}
	}
}

// abandon stops driving a session whose lease this daemon lost: its agent
// is closed; what the teardown writes is fenced off if another daemon has
// taken the session over.
func (m *Manager) abandon(id string) {
	l := m.lookup(id)
	if l == nil || !m.drop(l) {
		return
	}
	m.wg.Add(1)
	// Detached from any request, like every teardown.
	go func() {
		defer m.wg.Done()
		m.endStarted(l, event.SessionEnded{Reason: event.EndInterrupted, Message: "daemon " + m.own.id + " lost the session's lease"},
			store.StatusInterrupted, DefaultCloseTimeout)
	}()
}

// sweep settles the live sessions nobody drives: no lease (a daemon run
// without leases left them, or the store keeps its leases in memory) or an
// expired one. It is the start's crash recovery (first) and then the
// loop's periodic takeover.
func (m *Manager) sweep(ctx context.Context) (int, error) {
	n := 0
	for _, st := range []store.Status{store.StatusStarting, store.StatusIdle, store.StatusRunning} {
		before := ""
		for {
			ss, err := m.st.ListSessions(ctx, store.ListOptions{Status: st, Limit: 500, Before: before})
			if err != nil {
				return n, fmt.Errorf("list %s sessions: %w", st, err)
			}
			for _, s := range ss {
				took, err := m.takeOver(ctx, s.ID)
				if err != nil {
					return n, fmt.Errorf("session %s: %w", s.ID, err)
				}
				if took {
					n++
				}
			}
			if len(ss) < 500 {
				break
			}
			before = ss[len(ss)-1].ID
		}
	}
	return n, nil
}

// takeOver settles session id if it is live in the store but nobody
// drives it: this daemon takes its lease (the next epoch, fencing the
// owner that stopped renewing), closes the turn in flight, resolves the
// pending requests, records session.ended and releases the lease. A
// session whose lease a daemon held becomes stopped (its next message, on
// any daemon, resumes it); one with no owner becomes interrupted, as a
// crash recovery without leases leaves it. took is false when there was nothing
// to take over: the session is not live, or its owner holds its lease.
func (m *Manager) takeOver(ctx context.Context, id string) (took bool, err error) {
	if m.lookup(id) != nil || m.own.holds(id) {
		return false, nil
	}
	s, err := m.st.GetSession(ctx, id)
	if err != nil || !s.Status.Live() {
		return false, notFound(err, "session", id)
	}
	m.mu.Lock()
	busy := m.resuming[id] || m.stopping[id] != nil
	m.mu.Unlock()
	if busy {
		return false, nil
	}
	var prev store.Lease
	if m.own.ls != nil {
		if prev, err = m.own.ls.GetLease(ctx, id); err != nil {
			return false, notFound(err, "session", id)
		}
		if prev.Held {
			return false, nil
		}
		if prev.Epoch == 0 && s.Status == store.StatusStarting && time.Since(s.CreatedAt) < m.own.ttl {
			// Never leased and just created: the daemon creating it
			// takes its lease in a moment.
			return false, nil
		}
		if _, err := m.own.claim(ctx, id); err != nil {
			if errors.Is(err, store.ErrLeaseHeld) {
				return false, nil // another daemon got there first
			}
			return false, err
		}
		defer m.own.unclaim(id)
	}
	// Under the lease: the status read now is the one the last owner
	// left, and nobody else writes until the release.
	s, err = m.st.GetSession(ctx, id)
	if err != nil {
		return false, notFound(err, "session", id)
	}
	if !s.Status.Live() {
		return false, nil
	}
	if prev.Owner == "" {
		// Nobody holds or held a lease on it: left live by a daemon
		// run without leases (or whose leases were in memory), or an
		// earlier attempt of this recovery failed.
		msg := "the daemon stopped while the session was live"
		return true, m.settle(ctx, id, event.EndInterrupted, msg, store.StatusInterrupted, "")
	}
	msg := fmt.Sprintf("daemon %s stopped renewing the session's lease (epoch %d); daemon %s took the session over: its next message resumes the agent here",
		prev.Owner, prev.Epoch, m.own.id)
	return true, m.settle(ctx, id, event.EndInterrupted, msg, store.StatusStopped, s.CurrentTurnID)
}

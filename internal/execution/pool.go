package execution

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// createTimeout bounds the creation of one pooled sandbox.
const createTimeout = time.Minute

// pool keeps sandboxes ready per policy hash. A sandbox leaves the pool
// for exactly one task and is closed by it: nothing is ever reused. A hash
// starts being kept warm the first time it is asked for (that request is
// served cold) and stops when it has not been asked for in idle.
type pool struct {
	size int
	idle time.Duration
	log  *slog.Logger
	m    *serviceMetrics

	mu     sync.Mutex
	keys   map[string]*poolKey
	closed bool
	fills  sync.WaitGroup
}

type poolKey struct {
	create   func(context.Context) (*box, error)
	ready    []*box
	filling  int
	lastUsed time.Time
	// failed stops refilling after a creation error until the next take,
	// so a policy the host cannot enforce does not spin.
	failed bool
}

func newPool(size int, idle time.Duration, log *slog.Logger, m *serviceMetrics) *pool {
	return &pool{size: max(size, 0), idle: idle, log: log, m: m, keys: map[string]*poolKey{}}
}

func (p *pool) enabled() bool { return p.size > 0 }

// take returns a ready sandbox for key, or nil when there is none, and
// makes sure the key's pool gets (re)filled in the background with create:
// at once, or, with later, only when the returned refill is called. An
// exec takes later and calls refill once it has answered: a refill is a
// sandbox built and an interpreter started for a later request, which
// would otherwise take the CPU the exec runs on (on 2 CPUs a warm Python
// one-liner waited behind the refill's Create, the spare init it starts
// and the new zygote: 2.4x slower). refill is never nil; only its first
// call does anything.
func (p *pool) take(key string, create func(context.Context) (*box, error), later bool) (b *box, refill func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, func() {}
	}
	k := p.keys[key]
	if k == nil {
		k = &poolKey{}
		p.keys[key] = k
	}
	k.create, k.lastUsed, k.failed = create, time.Now(), false
	if n := len(k.ready); n > 0 {
		b, k.ready = k.ready[0], k.ready[1:]
		p.m.pool.WithLabelValues("hit").Inc()
		p.m.poolReady.Dec()
	} else {
		p.m.pool.WithLabelValues("miss").Inc()
	}
	if !later {
		p.refillLocked(key, k)
		return b, func() {}
	}
	var once sync.Once
	return b, func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			// Closed, or evicted meanwhile (a later take starts afresh):
			// nothing to refill.
			if !p.closed && p.keys[key] == k {
				p.refillLocked(key, k)
			}
		})
	}
}

// refillLocked starts creations until the key has size ready or coming.
func (p *pool) refillLocked(key string, k *poolKey) {
	for !k.failed && len(k.ready)+k.filling < p.size {
		k.filling++
		p.fills.Add(1)
		go p.fill(key, k, k.create)
	}
}

// fill creates one sandbox for k. Creation is detached from any request:
// the sandbox is for a later one.
func (p *pool) fill(key string, k *poolKey, create func(context.Context) (*box, error)) {
	defer p.fills.Done()
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	b, err := create(ctx)

	p.mu.Lock()
	k.filling--
	keep := err == nil && !p.closed && p.keys[key] == k
	if keep {
		k.ready = append(k.ready, b)
		p.m.poolReady.Inc()
	} else if err != nil {
		k.failed = true
	}
	p.mu.Unlock()

	if err != nil {
		p.log.Warn("warm pool: cannot create a sandbox; not refilling until the policy is used again", "policy_hash", key, "err", err)
		return
	}
	if !keep {
		b.release(p.log)
	}
}

// evictIdle closes the ready sandboxes of keys not used since idle.
func (p *pool) evictIdle(now time.Time) {
	var drop []*box
	p.mu.Lock()
	for key, k := range p.keys {
		if now.Sub(k.lastUsed) < p.idle {
			continue
		}
		drop = append(drop, k.ready...)
		p.m.poolReady.Sub(float64(len(k.ready)))
		delete(p.keys, key) // fills in flight see the key gone and close theirs
	}
	p.mu.Unlock()
	for _, b := range drop {
		b.release(p.log)
	}
}

// close stops refilling, waits for creations in flight and closes every
// ready sandbox.
func (p *pool) close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	var drop []*box
	for _, k := range p.keys {
		drop = append(drop, k.ready...)
		p.m.poolReady.Sub(float64(len(k.ready)))
	}
	p.keys = map[string]*poolKey{}
	p.mu.Unlock()

	done := make(chan struct{})
	go func() { p.fills.Wait(); close(done) }()
	for _, b := range drop {
		b.release(p.log)
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return errors.Join(errors.New("execution: warm pool: sandbox creations still running"), ctx.Err())
	}
}

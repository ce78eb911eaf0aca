package engine

import (
	"sync"

	"github.com/agentbox/agentbox/event"
)

// Emitted events go through a per-session queue drained by one pump
// goroutine, which appends everything queued in one store call: an agent
// streaming deltas is not held to one fsync per event, the order of the
// session's events is the order they were queued in, and a subscriber still
// sees an event only after it is durable.
const maxQueued = 8192 // beyond this, a push waits for the queue to drain

// eventQueue is a session's event queue and its pump.
type eventQueue struct {
	// write appends events to the session's log, durably.
	write func([]event.Event) error

	mu      sync.Mutex
	batches []batch
	queued  int
	err     error // once set, every push fails with it

	wake chan struct{}
	stop chan struct{}
	done chan struct{} // closed when the pump has returned
}

type batch struct {
	evs  []event.Event
	done chan error // nil: nobody waits
}

// newEventQueue starts the pump of a queue writing with write; stop ends it.
func newEventQueue(write func([]event.Event) error) *eventQueue {
	q := &eventQueue{write: write, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go q.pump()
	return q
}

// push queues events (already stamped); with wait, the batch returned is
// waited for by await. backlog says the queue is over maxQueued. It takes
// only the queue's lock: callers may hold their own.
func (q *eventQueue) push(evs []event.Event, wait bool) (batch, bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return batch{}, false, q.err
	}
	b := batch{evs: evs}
	if wait {
		b.done = make(chan error, 1)
	}
	q.batches = append(q.batches, b)
	q.queued += len(evs)
	return b, q.queued > maxQueued, nil
}

// await wakes the pump and, for a waited batch, waits for its commit; a
// push over the backlog waits until the queue has drained.
func (q *eventQueue) await(b batch, backlog bool) error {
	select {
	case q.wake <- struct{}{}:
	default:
	}
	if b.done != nil {
		return <-b.done
	}
	if backlog {
		return q.flush()
	}
	return nil
}

// flush waits until everything queued so far is durable.
func (q *eventQueue) flush() error {
	b, backlog, err := q.push(nil, true)
	if err != nil {
		return err
	}
	return q.await(b, backlog)
}

// pump appends queued events until the queue is stopped.
func (q *eventQueue) pump() {
	defer close(q.done)
	for {
		select {
		case <-q.wake:
		case <-q.stop:
			q.drain()
			return
		}
		q.drain()
	}
}

func (q *eventQueue) drain() {
	for {
		q.mu.Lock()
		bs := q.batches
		q.batches, q.queued = nil, 0
		q.mu.Unlock()
		if len(bs) == 0 {
			return
		}
		var all []event.Event
		for _, b := range bs {
			all = append(all, b.evs...)
		}
		var err error
		if len(all) > 0 {
			if err = q.write(all); err != nil {
				q.mu.Lock()
				q.err = err
				q.mu.Unlock()
			}
		}
		for _, b := range bs {
			if b.done != nil {
				b.done <- err
			}
		}
	}
}

// close writes what is queued, stops the pump and makes every later push
// fail with err (unless it already fails).
func (q *eventQueue) close(err error) {
	q.mu.Lock()
	if q.err == nil {
		q.err = err
	}
	q.mu.Unlock()
	close(q.stop)
	<-q.done
}

// stopped is closed once the pump has returned.
func (q *eventQueue) stopped() <-chan struct{} { return q.done }

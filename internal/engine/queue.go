package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/errkind"
)

// Emitted events go through a per-session queue drained by one pump
// goroutine, which appends everything queued in one store call: an agent
// streaming deltas is not held to one fsync per event, the order of the
// session's events is the order they were queued in, and a subscriber still
// sees an event only after it is durable.
//
// A store that refuses a write because it is full (errkind.StorageFull)
// stalls the queue instead of failing it: the events stay queued, in
// order, and the pump tries again with backoff (retryMin to retryMax) until
// the store takes them, then carries on as before. Meanwhile the queue is
// bounded: past maxQueued events or maxQueuedBytes of data, what an agent
// emits (pushes nobody waits for) is dropped, the push fails with
// errEventsDropped (live cancels the turn with it), and an `error` event
// (code events_dropped) saying how many were dropped takes their place in
// the log. What the engine itself records (waited pushes: turn.started,
// turn.completed, session.ended, its error events) is never dropped; it is
// a few events per turn, and no turn starts while the queue is stalled.
// A permission request or a question waits with them (it flushes the
// queue first), as does the end of the turn (whose status update is
// retried the same way, see retry).
// Once the session ends (giveUp) a stalled queue waits no longer than its
// deadline: then its waiters get the error and its events are lost (and
// logged); a restart's recovery records the session's end.
//
// Any other write error fails the batch it was written with (its waiters
// get the error; its events are lost, and logged) and nothing else: the
// next batch is written as if nothing happened. (It used to stick, and
// with it a full disk stopped the session for good.)
const (
	maxQueued      = 8192     // beyond this, a push waits for the queue to drain
	maxQueuedBytes = 64 << 20 // event data a stalled queue holds at most
	retryMin       = 20 * time.Millisecond
	retryMax       = time.Second
)

// errEventsDropped is what a push dropped at the bound of a stalled queue
// fails with: its events are not in the log.
var errEventsDropped = errkind.New(errkind.StorageFull, "the store is full and the session's event queue is at its bound: events were dropped")

// eventQueue is a session's event queue and its pump.
type eventQueue struct {
	// write appends events to the session's log, durably.
	write func([]event.Event) error
	log   *slog.Logger

	mu      sync.Mutex
	batches []batch
	// queued and bytes count the events queued or being written, and
	// their data.
	queued int
	bytes  int
	err    error // once set (the session ended), every push fails with it
	// stall is the error of the last write when the store refused it
	// because it is full, nil while the store takes writes; round, when
	// set, is closed at the end of the pump's next try.
	stall error
	round chan struct{}
	// drop, while events are being dropped, is the index in batches of
	// the batch whose error event counts them, else -1.
	drop int
	// giveUp, once set, is when a stalled queue stops waiting.
	giveUp time.Time

	wake chan struct{}
	stop chan struct{}
	done chan struct{} // closed when the pump has returned
}

type batch struct {
	evs  []event.Event
	done chan error // nil: nobody waits
	// soft: done is told when the batch is durable or the queue stalls,
	// whichever comes first (a push over the backlog waits so).
	soft bool
	// dropped counts the events dropped in place of this batch, whose
	// one event then says so.
	dropped int
	// bytes is the data of evs, as counted in the queue's bytes.
	bytes int
	// orStall: the batch is not kept when the store is full; its waiter
	// gets the refusal instead (see waitOrStall).
	orStall bool
}

// wait says how a push waits for its events.
type wait int

const (
	noWait      wait = iota // queue and return (an agent's events)
	waitDurable             // return once they are durable
	// waitOrStall returns once they are durable or, when the store
	// refuses them because it is full, with that refusal: the events
	// are then not written. For what a client waits on (turn.started).
	waitOrStall
)

// newEventQueue starts the pump of a queue writing with write; close ends it.
func newEventQueue(write func([]event.Event) error, log *slog.Logger) *eventQueue {
	q := &eventQueue{write: write, log: log, drop: -1, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go q.pump()
	return q
}

// push queues events (already stamped); with wait, the batch returned is
// waited for by await. backlog says the queue is over maxQueued. A push
// nobody waits for is dropped, failing with errEventsDropped, when the
// queue is stalled and full. It takes only the queue's lock: callers may
// hold their own.
func (q *eventQueue) push(evs []event.Event, w wait) (batch, bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return batch{}, false, q.err
	}
	n := size(evs)
	if w == noWait && q.stall != nil && len(evs) > 0 && (q.queued+len(evs) > maxQueued || q.bytes+n > maxQueuedBytes) {
		if q.drop < 0 {
			// The error event goes where the dropped events would have.
			q.batches = append(q.batches, batch{evs: []event.Event{{TurnID: evs[0].TurnID, NativeSessionID: evs[0].NativeSessionID}}})
			q.drop = len(q.batches) - 1
			q.queued++
		}
		q.batches[q.drop].dropped += len(evs)
		return batch{}, false, errEventsDropped
	}
	b := batch{evs: evs, bytes: n, orStall: w == waitOrStall}
	if w != noWait {
		b.done = make(chan error, 1)
	}
	q.batches = append(q.batches, b)
	q.queued += len(evs)
	q.bytes += n
	return b, q.queued > maxQueued, nil
}

func size(evs []event.Event) int {
	n := 0
	for _, e := range evs {
		n += len(e.Data) + len(e.Raw)
	}
	return n
}

// await wakes the pump and, for a waited batch, waits for its commit; a
// push over the backlog waits until the queue has drained or stalled.
func (q *eventQueue) await(b batch, backlog bool) error {
	q.poke()
	if b.done != nil {
		return <-b.done
	}
	if backlog {
		q.mu.Lock()
		if q.err != nil || q.stall != nil {
			err := q.err
			q.mu.Unlock()
			return err
		}
		b := batch{done: make(chan error, 1), soft: true}
		q.batches = append(q.batches, b)
		q.mu.Unlock()
		return q.await(b, false)
	}
	return nil
}

func (q *eventQueue) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// flush waits until everything queued so far is durable.
func (q *eventQueue) flush() error {
	b, backlog, err := q.push(nil, waitDurable)
	if err != nil {
		return err
	}
	return q.await(b, backlog)
}

// stalled returns the store's refusal while the queue is stalled, nil
// otherwise. A stalled queue is asked after the pump's next try (at most
// retryMax away), so a store that has just taken the queue's events is
// seen to.
func (q *eventQueue) stalled() error {
	q.mu.Lock()
	if q.stall == nil {
		q.mu.Unlock()
		return nil
	}
	if q.round == nil {
		q.round = make(chan struct{})
	}
	ch := q.round
	q.mu.Unlock()
	select {
	case <-ch:
	case <-q.done:
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stall
}

// endRound tells stalled the pump's try is over.
func (q *eventQueue) endRound() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.round != nil {
		close(q.round)
		q.round = nil
	}
}

// retry runs op until it does not fail with a full store, with the
// queue's backoff, or until the queue gives up; it returns op's last error.
func (q *eventQueue) retry(op func() error) error {
	backoff := retryMin
	for {
		err := op()
		if err == nil || !errors.Is(err, errkind.StorageFull) {
			return err
		}
		over, left := q.givingUp()
		if over {
			return err
		}
		time.Sleep(min(backoff, left))
		backoff = min(2*backoff, retryMax)
	}
}

// giveUpAt makes a stalled queue stop waiting for the store at t (or
// earlier, when already set so): its queued events are then lost and
// their waiters get the error.
func (q *eventQueue) giveUpAt(t time.Time) {
	q.mu.Lock()
	if q.giveUp.IsZero() || t.Before(q.giveUp) {
		q.giveUp = t
	}
	q.mu.Unlock()
	q.poke()
}

// givingUp reports whether a refused write is final now.
func (q *eventQueue) givingUp() (bool, time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.giveUp.IsZero() {
		return false, retryMax
	}
	left := time.Until(q.giveUp)
	return left <= 0, left
}

// pump appends queued events until the queue is stopped, and retries a
// stalled queue with backoff.
func (q *eventQueue) pump() {
	defer close(q.done)
	retry := time.NewTimer(retryMax)
	retry.Stop()
	defer retry.Stop()
	var backoff time.Duration // 0 unless stalled
	stopping := false
	for {
		if !stopping {
			select {
			case <-q.wake:
				if over, _ := q.givingUp(); backoff > 0 && !over {
					continue // stalled: the retry timer says when
				}
			case <-retry.C:
			case <-q.stop:
				stopping = true
			}
		}
		ok := q.drain()
		q.endRound()
		if ok {
			backoff = 0
			if stopping {
				return
			}
			continue
		}
		backoff = min(max(2*backoff, retryMin), retryMax)
		if stopping {
			// Stopped with the store still full: retry until the
			// give-up deadline (close set one).
			_, left := q.givingUp()
			time.Sleep(max(min(backoff, left), 0))
			continue
		}
		retry.Reset(backoff)
	}
}

// drain writes everything queued, batch after batch; it returns false
// when the store refused a write because it is full and the queue has not
// given up yet (the events stay queued).
func (q *eventQueue) drain() bool {
	for {
		q.mu.Lock()
		bs := q.batches
		q.batches, q.drop = nil, -1
		q.mu.Unlock()
		if len(bs) == 0 {
			return true
		}
		var all []event.Event
		n, bytes := 0, 0 // as pushed: a drop marker is one event of no data
		for i := range bs {
			n += len(bs[i].evs)
			bytes += bs[i].bytes
			if bs[i].dropped > 0 {
				bs[i].evs[0] = droppedEvent(bs[i].evs[0], bs[i].dropped)
				bs[i].dropped = 0
			}
			all = append(all, bs[i].evs...)
		}
		var err error
		if len(all) > 0 {
			err = q.write(all)
		}
		if over, _ := q.givingUp(); err != nil && errors.Is(err, errkind.StorageFull) && !over {
			if q.requeue(bs, err) {
				return false
			}
			continue
		}
		q.mu.Lock()
		q.queued -= n
		q.bytes -= bytes
		q.mu.Unlock()
		switch {
		case err == nil:
			q.endStall(nil)
		case !errors.Is(err, errkind.StorageFull):
			q.log.Error("appending events", "count", len(all), "err", err)
		default:
			q.log.Error("the store is still full as the session ends: its last events are lost", "count", len(all), "err", err)
			q.endStall(err)
		}
		for _, b := range bs {
			if b.done != nil {
				b.done <- err
			}
		}
	}
}

// requeue puts the batches the store refused (it is full) back in front
// of the queue and marks it stalled with err; soft waiters are released,
// and the batches pushed waitOrStall fail with err. It reports whether the
// queue is stalled (false when nothing was left to wait).
func (q *eventQueue) requeue(bs []batch, err error) bool {
	kept := bs[:0]
	n, bytes := 0, 0
	for _, b := range bs {
		if b.soft && b.done != nil {
			b.done <- nil
			b.done = nil
		}
		if b.orStall {
			b.done <- err
			n += len(b.evs)
			bytes += b.bytes
			continue
		}
		kept = append(kept, b)
	}
	bs = kept
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queued -= n
	q.bytes -= bytes
	if len(bs) == 0 && q.stall == nil {
		return false // nothing waits: the next write finds out
	}
	q.batches = append(bs, q.batches...)
	if q.drop >= 0 {
		q.drop += len(bs)
	}
	if q.stall == nil {
		q.log.Warn("the store is full: the session's events wait until it takes writes again", "queued", q.queued, "err", err)
	}
	q.stall = err
	return true
}

// endStall ends a stall: the store took a write (err nil), or the queue
// gave up (err the last refusal).
func (q *eventQueue) endStall(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stall == nil {
		return
	}
	if err == nil {
		q.log.Info("the store takes writes again: the session's events are written")
	}
	q.stall = nil
}

// droppedEvent is the error event in place of n dropped events, with the
// envelope of e.
func droppedEvent(e event.Event, n int) event.Event {
	ev := event.New(event.SourceDaemon, &event.Error{Code: "events_dropped", Message: fmt.Sprintf(
		"the store refused writes (it is full) and the session's event queue reached its bound (%d events, %d MiB): %d events the agent emitted were dropped",
		maxQueued, maxQueuedBytes>>20, n)})
	ev.TurnID, ev.NativeSessionID = e.TurnID, e.NativeSessionID
	return ev
}

// close writes what is queued, stops the pump and makes every later push
// fail with err (unless it already fails). A stalled queue is given up
// now unless giveUpAt set a deadline.
func (q *eventQueue) close(err error) {
	q.mu.Lock()
	if q.err == nil {
		q.err = err
	}
	if q.giveUp.IsZero() {
		q.giveUp = time.Now()
	}
	q.mu.Unlock()
	close(q.stop)
	<-q.done
}

// stopped is closed once the pump has returned.
func (q *eventQueue) stopped() <-chan struct{} { return q.done }

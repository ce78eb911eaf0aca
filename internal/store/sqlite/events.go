package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/store"
)

// eventCols are the columns of an event row after session_id, in the order
// insertEvent binds and scanEvents reads them.
const eventCols = "seq, " + eventColsRest

const eventColsRest = "id, time, schema, type, source, native_session_id, turn_id, data, raw"

// eventColsAfterSeq returns the columns of eventCols after seq, each with
// prefix.
func eventColsAfterSeq(prefix string) string {
	if prefix == "" {
		return eventColsRest
	}
	return prefix + strings.ReplaceAll(eventColsRest, ", ", ", "+prefix)
}

// Times are stored as int64 unix nanoseconds.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// nanos converts t for storage.
func nanos(t time.Time) (int64, error) {
	if t.Before(minTime) || t.After(maxTime) {
		return 0, fmt.Errorf("time %s out of the storable range", t)
	}
	return t.UnixNano(), nil
}

// fromNanos is the inverse of nanos.
func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

// prepareEvent does, in the caller's goroutine, what Append can do before the
// seq is known: it fills ID and Schema, normalises Time to UTC, and copies
// Data and Raw (after checking they are JSON) so the stored event shares no
// memory with the caller.
func prepareEvent(ev event.Event) (event.Event, error) {
	if ev.Type == "" {
		return ev, errors.New("event has no type")
	}
	if ev.ID == "" {
		ev.ID = ids.New(ids.Event)
	}
	if !ev.Time.IsZero() {
		if _, err := nanos(ev.Time); err != nil {
			return ev, fmt.Errorf("event %s: %w", ev.ID, err)
		}
		ev.Time = ev.Time.UTC()
	}
	var err error
	if ev.Data, err = cloneJSON(ev.Data); err != nil {
		return ev, fmt.Errorf("event %s data: %w", ev.ID, err)
	}
	if ev.Raw, err = cloneJSON(ev.Raw); err != nil {
		return ev, fmt.Errorf("event %s raw: %w", ev.ID, err)
	}
	ev.Schema = event.SchemaVersion
	ev.Seq, ev.SessionID = 0, ""
	return ev, nil
}

// cloneJSON copies b after checking it is JSON; empty becomes nil.
func cloneJSON(b json.RawMessage) (json.RawMessage, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if !json.Valid(b) {
		return nil, errors.New("not valid JSON")
	}
	return bytes.Clone(b), nil
}

// appendOne is the append of a single event, the most common: the operation
// and the event it returns share one allocation.
type appendOne struct {
	op op
	ev [1]event.Event
}

// Append implements store.Store. Events returned (and delivered to
// subscribers) must be treated as read-only: their Data and Raw are shared.
func (s *Store) Append(ctx context.Context, sessionID string, evs ...event.Event) ([]event.Event, error) {
	var o *op
	var out []event.Event
	if len(evs) == 1 {
		one := &appendOne{}
		o, out = &one.op, one.ev[:]
	} else {
		o, out = &op{}, make([]event.Event, len(evs))
	}
	for i, ev := range evs {
		var err error
		if out[i], err = prepareEvent(ev); err != nil {
			return nil, fmt.Errorf("append to session %q: %w", sessionID, err)
		}
	}
	if !s.enter() {
		return nil, fmt.Errorf("append to session %q: %w", sessionID, store.ErrClosed)
	}
	defer s.leave()
	if len(out) == 0 {
		return out, nil
	}
	*o = op{kind: opAppend, ctx: ctx, sessionID: sessionID, events: out}
	if err := s.do(o); err != nil {
		return nil, fmt.Errorf("append to session %q: %w", sessionID, err)
	}
	return out, nil
}

// Events implements store.Store. A limit <= 0 means no limit.
func (s *Store) Events(ctx context.Context, sessionID string, after int64, limit int) ([]event.Event, error) {
	if !s.enter() {
		return nil, fmt.Errorf("read events of session %q: %w", sessionID, store.ErrClosed)
	}
	defer s.leave()
	evs, err := s.readEvents(ctx, sessionID, after, limit)
	if err == nil && len(evs) == 0 {
		err = s.mustExist(ctx, sessionID)
	}
	if err != nil {
		return nil, fmt.Errorf("read events of session %q: %w", sessionID, err)
	}
	return evs, nil
}

func (s *Store) readEvents(ctx context.Context, sessionID string, after int64, limit int) ([]event.Event, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	defer s.readGate()()
	rows, err := s.reads.events.QueryContext(ctx, sessionID, after, s.synced.Load(), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	evs := make([]event.Event, 0, max(0, min(limit, 64)))
	for rows.Next() {
		ev := event.Event{SessionID: sessionID}
		var t int64
		var typ, src string
		var data, raw []byte
		var run, pos int64 // the order of the rows (reads.go)
		if err := rows.Scan(&run, &pos, &ev.Seq, &ev.ID, &t, &ev.Schema, &typ, &src,
			&ev.NativeSessionID, &ev.TurnID, &data, &raw); err != nil {
			return nil, err
		}
		ev.Time, ev.Type, ev.Source = fromNanos(t), event.Type(typ), event.Source(src)
		if len(data) > 0 {
			ev.Data = data
		}
		if len(raw) > 0 {
			ev.Raw = raw
		}
		evs = append(evs, ev)
	}
	return evs, rows.Err()
}

// mustExist returns ErrNotFound unless the session exists.
func (s *Store) mustExist(ctx context.Context, sessionID string) error {
	var one int
	defer s.readGate()()
	err := s.reads.sessionExists.QueryRowContext(ctx, sessionID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}

// Subscribe implements store.Store. Each subscription runs its own goroutine
// that pulls the events after the last one it delivered: from the session's
// in-memory ring while it keeps up, from the database when it falls behind
// the ring. A slow subscriber therefore never holds up the writer or other
// subscribers and never misses an event. The channel also closes when the
// session is deleted.
func (s *Store) Subscribe(ctx context.Context, sessionID string, after int64) (<-chan event.Event, error) {
	if !s.enter() {
		return nil, fmt.Errorf("subscribe to session %q: %w", sessionID, store.ErrClosed)
	}
	defer s.leave()
	// Register first: a batch published after this point reaches the
	// hub, one published before can be read from the database, which the
	// goroutine reads first.
	h := s.acquireHub(sessionID)
	if err := s.mustExist(ctx, sessionID); err != nil {
		s.releaseHub(sessionID, h)
		return nil, fmt.Errorf("subscribe to session %q: %w", sessionID, err)
	}
	out := make(chan event.Event, subBuffer)
	s.subs.Add(1) // before Close waits for it: we are inside enter/leave
	go s.serve(ctx, h, sessionID, max(after, 0), out)
	return out, nil
}

func (s *Store) serve(ctx context.Context, h *hub, sessionID string, after int64, out chan<- event.Event) {
	defer s.subs.Done()
	defer close(out)
	defer s.releaseHub(sessionID, h)
	var buf []event.Event
	for {
		// The notification channel is taken before reading, so a commit
		// that lands after the read wakes us.
		evs, notify, deleted, ok := h.since(after, buf[:0], pageSize)
		if deleted {
			return
		}
		if !ok {
			var err error
			if evs, err = s.readEvents(ctx, sessionID, after, pageSize); err != nil {
				// The context ended, the store is closing, or the
				// database failed; the subscription cannot go on.
				return
			}
		}
		if len(evs) == 0 {
			select {
			case <-notify:
				continue
			case <-ctx.Done():
				return
			case <-s.quit:
				return
			}
		}
		for _, ev := range evs {
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			case <-s.quit:
				return
			}
		}
		after = evs[len(evs)-1].Seq
		buf = evs
	}
}

// hub is the live state of a session that has subscribers: a ring of its
// most recent committed events, contiguous in seq, and a channel closed and
// replaced on every commit.
type hub struct {
	refs int // guarded by Store.hubsMu

	mu       sync.Mutex
	capacity int
	ring     []event.Event // circular once it has grown to capacity
	head     int           // index of the oldest event
	n        int
	bytes    int // payload bytes held
	notify   chan struct{}
	deleted  bool
	// publishes counts the publications, each of which wakes the
	// subscribers (tests only read it).
	publishes int
}

func (s *Store) acquireHub(sessionID string) *hub {
	s.hubsMu.Lock()
	defer s.hubsMu.Unlock()
	h := s.hubs[sessionID]
	if h == nil {
		h = &hub{capacity: s.opts.RingSize, notify: make(chan struct{})}
		s.hubs[sessionID] = h
	}
	h.refs++
	return h
}

func (s *Store) releaseHub(sessionID string, h *hub) {
	s.hubsMu.Lock()
	defer s.hubsMu.Unlock()
	if h.refs--; h.refs == 0 && s.hubs[sessionID] == h {
		delete(s.hubs, sessionID)
	}
}

// publish hands committed events to the session's subscribers, if any.
func (s *Store) publish(sessionID string, evs []event.Event) {
	s.hubsMu.RLock()
	h := s.hubs[sessionID]
	s.hubsMu.RUnlock()
	if h != nil {
		h.publish(evs)
	}
}

// subscribed reports whether the session has subscribers. One that has none
// when its events are published reads them from the database.
func (s *Store) subscribed(sessionID string) bool {
	s.hubsMu.RLock()
	defer s.hubsMu.RUnlock()
	return s.hubs[sessionID] != nil
}

// dropHub ends the subscriptions of a deleted session. A session created
// again with the same ID gets a new hub.
func (s *Store) dropHub(sessionID string) {
	s.hubsMu.Lock()
	h := s.hubs[sessionID]
	delete(s.hubs, sessionID)
	s.hubsMu.Unlock()
	if h != nil {
		h.mu.Lock()
		h.deleted = true
		close(h.notify)
		h.notify = make(chan struct{})
		h.mu.Unlock()
	}
}

func eventBytes(ev *event.Event) int { return len(ev.Data) + len(ev.Raw) }

func (h *hub) publish(evs []event.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ev := range evs {
		if h.n > 0 && ev.Seq != h.at(h.n-1).Seq+1 {
			// Cannot happen: commits are published in order. Start
			// again rather than serve a ring with a hole.
			clear(h.ring)
			h.head, h.n, h.bytes = 0, 0, 0
		}
		size := eventBytes(&ev)
		for h.n > 0 && (h.n == h.capacity || h.bytes+size > ringBytes) {
			old := &h.ring[h.head]
			h.bytes -= eventBytes(old)
			*old = event.Event{}
			h.head = (h.head + 1) % len(h.ring)
			h.n--
		}
		if h.n == len(h.ring) {
			h.grow()
		}
		h.ring[(h.head+h.n)%len(h.ring)] = ev
		h.n++
		h.bytes += size
	}
	h.publishes++
	close(h.notify)
	h.notify = make(chan struct{})
}

// grow enlarges a full ring that is below capacity.
func (h *hub) grow() {
	ring := make([]event.Event, min(h.capacity, max(64, 2*len(h.ring))))
	for i := range h.n {
		ring[i] = h.at(i)
	}
	h.ring, h.head = ring, 0
}

func (h *hub) at(i int) event.Event { return h.ring[(h.head+i)%len(h.ring)] }

// since appends to dst up to limit events with seq > after from the ring. ok
// is false when the ring cannot tell (it is empty or starts after after+1)
// and the database must be read. notify is closed by the next commit.
func (h *hub) since(after int64, dst []event.Event, limit int) (evs []event.Event, notify <-chan struct{}, deleted, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return dst, h.notify, h.deleted, false
	}
	first := h.at(0).Seq
	last := first + int64(h.n) - 1
	if after+1 < first {
		return dst, h.notify, h.deleted, false
	}
	for i := after + 1 - first; i <= last-first && len(dst) < limit; i++ {
		dst = append(dst, h.at(int(i)))
	}
	return dst, h.notify, h.deleted, true
}

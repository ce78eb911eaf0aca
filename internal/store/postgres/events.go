package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/store/postgres/pgwire"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/store"
)

const eventCols = "seq, id, time, schema, type, source, native_session_id, turn_id, data, raw"

// prepareEvent does, in the caller's goroutine, what Append can do before the
// seq is known: it fills ID and Schema, normalises Time to UTC, and copies
// Data and Raw (after checking they are JSON) so the stored event shares no
// memory with the caller. A zero Time is set by the writer.
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

// Append implements store.Store: the events join the writer's queue and
// are acknowledged once the batch that carried them committed.
func (s *Store) Append(ctx context.Context, sessionID string, evs ...event.Event) ([]event.Event, error) {
	out := make([]event.Event, len(evs))
	for i, e := range evs {
		var err error
		if out[i], err = prepareEvent(e); err != nil {
			return nil, fmt.Errorf("append to session %q: %w", sessionID, err)
		}
	}
	if !s.enter() {
		return nil, fmt.Errorf("append to session %q: %w", sessionID, store.ErrClosed)
	}
	defer s.leave()
	if len(out) == 0 {
		if _, err := s.getSession(ctx, sessionID); err != nil {
			return nil, fmt.Errorf("append to session %q: %w", sessionID, err)
		}
		return out, nil
	}
	op := &appendOp{ctx: ctx, sessionID: sessionID, epoch: store.FenceOf(ctx, sessionID), evs: out, done: make(chan error, 1)}
	if err := s.w.submit(op); err != nil {
		return nil, fmt.Errorf("append to session %q: %w", sessionID, err)
	}
	// The writer always answers: the batch completes or fails, and
	// queued ops fail with ErrClosed when the store closes.
	if err := <-op.done; err != nil {
		return nil, fmt.Errorf("append to session %q: %w", sessionID, err)
	}
	return out, nil
}

// appendOp is one Append waiting for the writer.
type appendOp struct {
	ctx       context.Context
	sessionID string
	// epoch is the fence the append carries (store.WithFence), 0 when
	// none.
	epoch int64
	evs   []event.Event
	done  chan error
}

// writer is the group-commit queue.
type writer struct {
	mu      sync.Mutex
	queue   []*appendOp
	stopped bool
	signal  chan struct{} // something queued, or stop
	exited  chan struct{}
	conn    *pgwire.Conn // the writer goroutine's own
}

func (w *writer) init() {
	w.signal = make(chan struct{}, 1)
	w.exited = make(chan struct{})
}

func (w *writer) submit(op *appendOp) error {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return store.ErrClosed
	}
	w.queue = append(w.queue, op)
	w.mu.Unlock()
	w.wake()
	return nil
}

func (w *writer) wake() {
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// stop makes the writer finish its batch in flight, fail the queued ones
// and exit, and waits for it.
func (w *writer) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	w.wake()
	<-w.exited
}

// take removes the next batch from the queue: whole ops, up to max events
// (at least one op).
func (w *writer) take(limit int) (batch []*appendOp, stopped bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, i := 0, 0
	for ; i < len(w.queue); i++ {
		if i > 0 && n+len(w.queue[i].evs) > limit {
			break
		}
		n += len(w.queue[i].evs)
	}
	batch = w.queue[:i:i]
	w.queue = w.queue[i:]
	if len(w.queue) == 0 {
		w.queue = nil
	}
	return batch, w.stopped
}

func (s *Store) writeLoop() {
	defer close(s.w.exited)
	defer func() {
		if s.w.conn != nil {
			closeConn(s.w.conn)
		}
	}()
	for range s.w.signal {
		for {
			batch, stopped := s.w.take(s.opts.MaxBatch)
			if stopped {
				for ; len(batch) > 0; batch, _ = s.w.take(s.opts.MaxBatch) {
					for _, op := range batch {
						op.done <- store.ErrClosed
					}
				}
				return
			}
			if len(batch) == 0 {
				break
			}
			s.commit(batch)
		}
	}
}

// appendSQL appends one op's events: it bumps the session's last_seq (the
// row lock orders writers of every process), inserts the events numbered
// below it, and notifies "<session> <last seq>" at commit. A fenced append
// ($12 > 0) writes only while the session's lease epoch is $12: the check
// is in the UPDATE, under the row lock a takeover also takes. No row: the
// session does not exist, or the append was fenced off.
const appendSQL = `WITH s AS (
	UPDATE sessions SET last_seq = last_seq + $2 WHERE id = $1 AND ($12::int8 = 0 OR lease_epoch = $12) RETURNING last_seq
), ins AS (
	INSERT INTO events (session_id, seq, id, time, schema, type, source, native_session_id, turn_id, data, raw)
	SELECT $1, s.last_seq - $2 + e.ord, e.id, e.time, $3, e.type, e.source, e.native, e.turn, e.data, e.raw
	FROM s, unnest($4::text[], $5::int8[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bytea[], $11::bytea[])
		WITH ORDINALITY AS e(id, time, type, source, native, turn, data, raw, ord)
)
SELECT s.last_seq FROM s, LATERAL (SELECT pg_notify('` + channel + `', $1 || ' ' || s.last_seq)) n`

// appendParams binds evs (their Time set) for appendSQL.
func appendParams(sessionID string, epoch int64, evs []event.Event) []param {
	cols := make([][][]byte, 8)
	for i := range cols {
		cols[i] = make([][]byte, len(evs))
	}
	for i, e := range evs {
		cols[0][i] = []byte(e.ID)
		cols[1][i] = be64(e.Time.UnixNano())
		cols[2][i] = []byte(e.Type)
		cols[3][i] = []byte(e.Source)
		cols[4][i] = []byte(e.NativeSessionID)
		cols[5][i] = []byte(e.TurnID)
		cols[6][i] = nilIfEmpty(e.Data)
		cols[7][i] = nilIfEmpty(e.Raw)
	}
	return []param{
		text(sessionID), int8p(int64(len(evs))), int8p(int64(event.SchemaVersion)),
		array(oidTextArray, oidText, cols[0]), array(oidInt8Array, oidInt8, cols[1]),
		array(oidTextArray, oidText, cols[2]), array(oidTextArray, oidText, cols[3]),
		array(oidTextArray, oidText, cols[4]), array(oidTextArray, oidText, cols[5]),
		array(oidByteArray, oidBytea, cols[6]), array(oidByteArray, oidBytea, cols[7]),
		int8p(epoch),
	}
}

// commit writes a batch in one implicit transaction and one round trip,
// answers each op and wakes the local subscribers. The ops of one session
// are joined into one statement (one row lock, one notification), and
// sessions are locked in the order of their IDs, the same in every process,
// so that two daemons' batches never deadlock. If the server refuses the
// batch (one op's data, say), each op is tried alone so that one bad append
// does not fail the others.
func (s *Store) commit(batch []*appendOp) {
	live := batch[:0:0]
	for _, op := range batch {
		if err := op.ctx.Err(); err != nil {
			op.done <- err
			continue
		}
		live = append(live, op)
	}
	if len(live) == 0 {
		return
	}
	slices.SortStableFunc(live, func(a, b *appendOp) int { return strings.Compare(a.sessionID, b.sessionID) })
	// The ops of one session and one fence share a statement.
	now := time.Now().UTC()
	var groups [][]*appendOp // the ops of one session, in the order they came
	for i, op := range live {
		for j := range op.evs {
			if op.evs[j].Time.IsZero() {
				op.evs[j].Time = now
			}
		}
		if i == 0 || op.sessionID != live[i-1].sessionID || op.epoch != live[i-1].epoch {
			groups = append(groups, nil)
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], op)
	}
	var b pgwire.Batch
	for _, g := range groups {
		var evs []event.Event
		for _, op := range g {
			evs = append(evs, op.evs...)
		}
		vals, _ := split(appendParams(g[0].sessionID, g[0].epoch, evs))
		b.QueuePrepared(appendStmt, vals)
	}
	results, err := s.w.exec(s.ctx, s.pool.cfg, &b)
	if err != nil {
		if serverError(err) && len(live) > 1 {
			for _, op := range live {
				s.commit([]*appendOp{op})
			}
			return
		}
		for _, op := range live {
			op.done <- s.closedErr(err)
		}
		return
	}
	for i, g := range groups {
		rows := results[i].Rows
		var last int64
		if len(rows) > 0 {
			last, err = getInt8(rows[0][0])
		}
		n := int64(0)
		for _, op := range g {
			n += int64(len(op.evs))
		}
		next := last - n + 1
		var refused error
		if len(rows) == 0 {
			refused = s.refused(s.ctx, g[0].sessionID, g[0].epoch)
		}
		for _, op := range g {
			switch {
			case len(rows) == 0:
				op.done <- refused
				continue
			case err != nil:
				op.done <- err
				continue
			}
			for j := range op.evs {
				op.evs[j].Seq = next
				op.evs[j].SessionID = op.sessionID
				next++
			}
			op.done <- nil
		}
		if len(rows) > 0 && err == nil {
			s.hub.wake(g[0].sessionID, last)
		}
	}
}

// appendStmt is appendSQL prepared on the writer's connection.
const appendStmt = "agentbox_append"

// exec runs b on the writer's own connection, opening it (and preparing
// appendSQL on it) when there is none or the last one failed.
func (w *writer) exec(ctx context.Context, cfg *pgwire.Config, b *pgwire.Batch) ([]*pgwire.Result, error) {
	if w.conn == nil || w.conn.IsClosed() || w.conn.TxStatus() != 'I' {
		if w.conn != nil {
			closeConn(w.conn)
			w.conn = nil
		}
		c, err := pgwire.Connect(ctx, cfg)
		if err != nil {
			return nil, err
		}
		_, oids := split(appendParams("", 0, nil))
		if err := c.Prepare(ctx, appendStmt, appendSQL, oids); err != nil {
			closeConn(c)
			return nil, err
		}
		w.conn = c
	}
	return w.conn.ExecBatch(ctx, b)
}

// execBatch runs b on a pooled connection.
func (s *Store) execBatch(ctx context.Context, b *pgwire.Batch) ([]*pgwire.Result, error) {
	c, err := s.pool.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer s.pool.release(c)
	return c.ExecBatch(ctx, b)
}

// Events implements store.Store.
func (s *Store) Events(ctx context.Context, sessionID string, after int64, limit int) ([]event.Event, error) {
	if !s.enter() {
		return nil, fmt.Errorf("events of session %q: %w", sessionID, store.ErrClosed)
	}
	defer s.leave()
	evs, err := s.events(ctx, sessionID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("events of session %q: %w", sessionID, err)
	}
	return evs, nil
}

// events reads up to limit (<= 0: all) events after after; none from an
// unknown session is ErrNotFound.
func (s *Store) events(ctx context.Context, sessionID string, after int64, limit int) ([]event.Event, error) {
	lim := param{oid: oidInt8}
	if limit > 0 {
		lim = int8p(int64(limit))
	}
	rows, _, err := s.pool.query(ctx, "SELECT "+eventCols+" FROM events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
		text(sessionID), int8p(after), lim)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		if _, err := s.getSession(ctx, sessionID); err != nil {
			return nil, err
		}
		return []event.Event{}, nil
	}
	out := make([]event.Event, len(rows))
	for i, r := range rows {
		if out[i], err = scanEvent(sessionID, r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func scanEvent(sessionID string, r [][]byte) (event.Event, error) {
	seq, err := getInt8(r[0])
	if err != nil {
		return event.Event{}, err
	}
	t, err := getInt8(r[2])
	if err != nil {
		return event.Event{}, err
	}
	schema, err := getInt8(r[3])
	if err != nil {
		return event.Event{}, err
	}
	e := event.Event{
		Seq: seq, ID: string(r[1]), SessionID: sessionID, Time: fromNanos(t), Schema: int(schema),
		Type: event.Type(r[4]), Source: event.Source(r[5]), NativeSessionID: string(r[6]), TurnID: string(r[7]),
	}
	if len(r[8]) > 0 {
		e.Data = r[8]
	}
	if len(r[9]) > 0 {
		e.Raw = r[9]
	}
	return e, nil
}

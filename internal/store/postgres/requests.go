package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/internal/store/postgres/pgwire"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/store"
)

const requestCols = "session_id, id, kind, state, payload, resolution, created_at, resolved_at"

// oneEventSQL is the part of a statement that appends the event $6..$14 as
// seq s.last_seq of session $1.
const oneEventSQL = `INSERT INTO events (session_id, seq, id, time, schema, type, source, native_session_id, turn_id, data, raw)
	SELECT $1, s.last_seq, $6, $7, $8, $9, $10, $11, $12, $13, $14 FROM s`

const notifySQL = `LATERAL (SELECT pg_notify('` + channel + `', $1 || ' ' || s.last_seq)) n`

// createRequestSQL takes the next seq, stores the request and its event and
// notifies, in one statement. No row: no session, or fenced off ($15, as
// in appendSQL); a unique violation: the request exists (and nothing was
// written).
const createRequestSQL = `WITH s AS (
	UPDATE sessions SET last_seq = last_seq + 1 WHERE id = $1 AND ($15::int8 = 0 OR lease_epoch = $15) RETURNING last_seq
), r AS (
	INSERT INTO requests (session_id, id, seq, kind, state, payload, created_at)
	SELECT $1, $2, s.last_seq, $3, 'pending', $4, $5 FROM s
), ins AS (` + oneEventSQL + `)
SELECT s.last_seq FROM s, ` + notifySQL

// resolveRequestSQL runs after the session's row lock is taken (a first
// statement of the same transaction), so its snapshot sees any resolution
// committed before: the state it reads is the current one. It returns the
// request's state before (NULL: no such request) and the new seq (NULL:
// nothing written). A fenced resolution ($15 > 0) writes only at that
// lease epoch.
const resolveRequestSQL = `WITH cur AS (
	SELECT state FROM requests WHERE session_id = $1 AND id = $2
), s AS (
	UPDATE sessions SET last_seq = last_seq + 1
	WHERE id = $1 AND ($15::int8 = 0 OR lease_epoch = $15) AND EXISTS (SELECT 1 FROM cur WHERE state = 'pending') RETURNING last_seq
), u AS (
	UPDATE requests SET state = 'resolved', resolution = $3, resolved_at = $4
	FROM s WHERE requests.session_id = $1 AND requests.id = $2
), ins AS (` + oneEventSQL + `)
SELECT (SELECT state FROM cur), (SELECT last_seq FROM s), (SELECT count(*) FROM s, ` + notifySQL + `)`

// eventParams binds ev as $6..$14 of oneEventSQL.
func eventParams(ev event.Event) []param {
	return []param{text(ev.ID), int8p(ev.Time.UnixNano()), int8p(int64(ev.Schema)), text(string(ev.Type)),
		text(string(ev.Source)), text(ev.NativeSessionID), text(ev.TurnID), bytea(ev.Data), bytea(ev.Raw)}
}

// CreateRequest implements store.Store. An empty Payload becomes the
// requested event's data and a zero CreatedAt its time; State is pending.
func (s *Store) CreateRequest(ctx context.Context, r store.Request, requested event.Event) (event.Event, error) {
	if r.SessionID == "" || r.ID == "" {
		return event.Event{}, errors.New("create request: empty session or request id")
	}
	ev, err := s.createRequest(ctx, r, requested)
	if err != nil {
		return event.Event{}, fmt.Errorf("create request %q of session %q: %w", r.ID, r.SessionID, err)
	}
	return ev, nil
}

func (s *Store) createRequest(ctx context.Context, r store.Request, requested event.Event) (event.Event, error) {
	ev, err := prepareEvent(requested)
	if err != nil {
		return event.Event{}, err
	}
	payload := ev.Data
	if len(r.Payload) > 0 {
		if payload, err = cloneJSON(r.Payload); err != nil {
			return event.Event{}, fmt.Errorf("payload: %w", err)
		}
	}
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	created := ev.Time
	if !r.CreatedAt.IsZero() {
		created = r.CreatedAt
	}
	createdN, err := nanos(created)
	if err != nil {
		return event.Event{}, err
	}
	if !s.enter() {
		return event.Event{}, store.ErrClosed
	}
	defer s.leave()
	epoch := store.FenceOf(ctx, r.SessionID)
	ps := append([]param{text(r.SessionID), text(r.ID), text(string(r.Kind)), bytea(payload), int8p(createdN)}, eventParams(ev)...)
	ps = append(ps, int8p(epoch))
	rows, _, err := s.pool.query(ctx, createRequestSQL, ps...)
	if isCode(err, codeUniqueViolation) {
		return event.Event{}, store.ErrExists
	}
	if err != nil {
		return event.Event{}, err
	}
	if len(rows) == 0 {
		return event.Event{}, s.refused(ctx, r.SessionID, epoch)
	}
	if ev.Seq, err = getInt8(rows[0][0]); err != nil {
		return event.Event{}, err
	}
	ev.SessionID = r.SessionID
	s.hub.wake(r.SessionID, ev.Seq)
	return ev, nil
}

// ResolveRequest implements store.Store. Resolution is the resolved event's
// data and ResolvedAt its time.
func (s *Store) ResolveRequest(ctx context.Context, sessionID, id string, resolved event.Event) (event.Event, error) {
	ev, err := s.resolveRequest(ctx, sessionID, id, resolved)
	if err != nil {
		return event.Event{}, fmt.Errorf("resolve request %q of session %q: %w", id, sessionID, err)
	}
	return ev, nil
}

func (s *Store) resolveRequest(ctx context.Context, sessionID, id string, resolved event.Event) (event.Event, error) {
	ev, err := prepareEvent(resolved)
	if err != nil {
		return event.Event{}, err
	}
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	if !s.enter() {
		return event.Event{}, store.ErrClosed
	}
	defer s.leave()
	var b pgwire.Batch
	vals, oids := split([]param{text(sessionID)})
	b.Queue("SELECT lease_epoch FROM sessions WHERE id = $1 FOR UPDATE", vals, oids)
	// $5 is unused by this statement but keeps eventParams at $6.
	epoch := store.FenceOf(ctx, sessionID)
	ps := append([]param{text(sessionID), text(id), bytea(ev.Data), int8p(ev.Time.UnixNano()), int8p(0)}, eventParams(ev)...)
	ps = append(ps, int8p(epoch))
	vals, oids = split(ps)
	b.Queue(resolveRequestSQL, vals, oids)
	results, err := s.execBatch(ctx, &b)
	if err != nil {
		return event.Event{}, err
	}
	if epoch > 0 && len(results[0].Rows) > 0 {
		// Read under the row lock: the epoch the resolution saw.
		cur, err := getInt8(results[0].Rows[0][0])
		if err != nil {
			return event.Event{}, err
		}
		if cur != epoch {
			return event.Event{}, fmt.Errorf("%w (epoch %d, the session's is %d)", store.ErrFenced, epoch, cur)
		}
	}
	row := results[1].Rows[0]
	switch {
	case row[0] == nil:
		return event.Event{}, store.ErrNotFound
	case string(row[0]) != string(store.StatePending) || row[1] == nil:
		return event.Event{}, store.ErrAlreadyResolved
	}
	if ev.Seq, err = getInt8(row[1]); err != nil {
		return event.Event{}, err
	}
	ev.SessionID = sessionID
	s.hub.wake(sessionID, ev.Seq)
	return ev, nil
}

// GetRequest implements store.Store.
func (s *Store) GetRequest(ctx context.Context, sessionID, id string) (store.Request, error) {
	if !s.enter() {
		return store.Request{}, fmt.Errorf("get request %q of session %q: %w", id, sessionID, store.ErrClosed)
	}
	defer s.leave()
	rows, _, err := s.pool.query(ctx, "SELECT "+requestCols+" FROM requests WHERE session_id = $1 AND id = $2",
		text(sessionID), text(id))
	if err == nil && len(rows) == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Request{}, fmt.Errorf("get request %q of session %q: %w", id, sessionID, err)
	}
	return scanRequest(rows[0])
}

// ListRequests implements store.Store.
func (s *Store) ListRequests(ctx context.Context, sessionID string, state store.RequestState) ([]store.Request, error) {
	if !s.enter() {
		return nil, fmt.Errorf("list requests of session %q: %w", sessionID, store.ErrClosed)
	}
	defer s.leave()
	st := param{oid: oidText}
	if state != "" {
		st = text(string(state))
	}
	rows, _, err := s.pool.query(ctx, "SELECT "+requestCols+" FROM requests WHERE session_id = $1 AND ($2::text IS NULL OR state = $2) ORDER BY seq",
		text(sessionID), st)
	if err == nil && len(rows) == 0 {
		_, err = s.getSession(ctx, sessionID)
	}
	if err != nil {
		return nil, fmt.Errorf("list requests of session %q: %w", sessionID, err)
	}
	list := make([]store.Request, 0, len(rows))
	for _, r := range rows {
		req, err := scanRequest(r)
		if err != nil {
			return nil, fmt.Errorf("list requests of session %q: %w", sessionID, err)
		}
		list = append(list, req)
	}
	return list, nil
}

func scanRequest(r [][]byte) (store.Request, error) {
	req := store.Request{
		SessionID: string(r[0]), ID: string(r[1]), Kind: store.RequestKind(r[2]), State: store.RequestState(r[3]),
	}
	if len(r[4]) > 0 {
		req.Payload = r[4]
	}
	if len(r[5]) > 0 {
		req.Resolution = r[5]
	}
	created, err := getInt8(r[6])
	if err != nil {
		return req, err
	}
	req.CreatedAt = fromNanos(created)
	if r[7] != nil {
		n, err := getInt8(r[7])
		if err != nil {
			return req, err
		}
		t := fromNanos(n)
		req.ResolvedAt = &t
	}
	return req, nil
}

package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/store"
)

// requestCols reads a request as of batch ?3: a resolution written by a
// later batch is not visible yet (see durable.go).
const requestCols = `session_id, id, kind,
	CASE WHEN resolved_batch <= ?3 THEN state ELSE 'pending' END,
	payload,
	CASE WHEN resolved_batch <= ?3 THEN resolution END,
	created_at,
	CASE WHEN resolved_batch <= ?3 THEN resolved_at END`

// CreateRequest implements store.Store. An empty Payload becomes the
// requested event's data and a zero CreatedAt its time; State is pending.
func (s *Store) CreateRequest(ctx context.Context, r store.Request, requested event.Event) (event.Event, error) {
	if r.SessionID == "" || r.ID == "" {
		return event.Event{}, errors.New("create request: empty session or request id")
	}
	ev, err := prepareEvent(requested)
	if err != nil {
		return event.Event{}, fmt.Errorf("create request %q of session %q: %w", r.ID, r.SessionID, err)
	}
	payload := ev.Data
	if len(r.Payload) > 0 {
		if payload, err = cloneJSON(r.Payload); err != nil {
			return event.Event{}, fmt.Errorf("create request %q of session %q: payload: %w", r.ID, r.SessionID, err)
		}
	}
	if !r.CreatedAt.IsZero() {
		if _, err := nanos(r.CreatedAt); err != nil {
			return event.Event{}, fmt.Errorf("create request %q of session %q: %w", r.ID, r.SessionID, err)
		}
	}
	if !s.enter() {
		return event.Event{}, fmt.Errorf("create request %q of session %q: %w", r.ID, r.SessionID, store.ErrClosed)
	}
	defer s.leave()
	o := &op{
		kind:      opCreateRequest,
		ctx:       ctx,
		sessionID: r.SessionID,
		events:    []event.Event{ev},
		request:   &requestOp{id: r.ID, kind: r.Kind, payload: payload, created: r.CreatedAt},
	}
	if err := s.do(o); err != nil {
		return event.Event{}, fmt.Errorf("create request %q of session %q: %w", r.ID, r.SessionID, err)
	}
	return o.events[0], nil
}

// ResolveRequest implements store.Store. Resolution is the resolved event's
// data and ResolvedAt its time.
func (s *Store) ResolveRequest(ctx context.Context, sessionID, id string, resolved event.Event) (event.Event, error) {
	ev, err := prepareEvent(resolved)
	if err != nil {
		return event.Event{}, fmt.Errorf("resolve request %q of session %q: %w", id, sessionID, err)
	}
	if !s.enter() {
		return event.Event{}, fmt.Errorf("resolve request %q of session %q: %w", id, sessionID, store.ErrClosed)
	}
	defer s.leave()
	o := &op{
		kind:      opResolveRequest,
		ctx:       ctx,
		sessionID: sessionID,
		events:    []event.Event{ev},
		request:   &requestOp{id: id},
	}
	if err := s.do(o); err != nil {
		return event.Event{}, fmt.Errorf("resolve request %q of session %q: %w", id, sessionID, err)
	}
	return o.events[0], nil
}

// GetRequest implements store.Store.
func (s *Store) GetRequest(ctx context.Context, sessionID, id string) (store.Request, error) {
	if !s.enter() {
		return store.Request{}, fmt.Errorf("get request %q of session %q: %w", id, sessionID, store.ErrClosed)
	}
	defer s.leave()
	unlock := s.readGate()
	r, err := scanRequest(s.reads.request.QueryRowContext(ctx, sessionID, id, s.synced.Load()))
	unlock()
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Request{}, fmt.Errorf("get request %q of session %q: %w", id, sessionID, err)
	}
	return r, nil
}

// ListRequests implements store.Store. An unknown session is ErrNotFound.
func (s *Store) ListRequests(ctx context.Context, sessionID string, state store.RequestState) ([]store.Request, error) {
	if !s.enter() {
		return nil, fmt.Errorf("list requests of session %q: %w", sessionID, store.ErrClosed)
	}
	defer s.leave()
	list, err := s.listRequests(ctx, sessionID, state)
	if err == nil && len(list) == 0 {
		err = s.mustExist(ctx, sessionID)
	}
	if err != nil {
		return nil, fmt.Errorf("list requests of session %q: %w", sessionID, err)
	}
	return list, nil
}

func (s *Store) listRequests(ctx context.Context, sessionID string, state store.RequestState) ([]store.Request, error) {
	defer s.readGate()()
	rows, err := s.reads.requests.QueryContext(ctx, sessionID, string(state), s.synced.Load())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var list []store.Request
	for rows.Next() {
		r, err := scanRequest(rows)
		if err != nil {
			return nil, err
		}
		list = append(list, r)
	}
	return list, rows.Err()
}

func scanRequest(row interface{ Scan(...any) error }) (store.Request, error) {
	var r store.Request
	var kind, state string
	var payload, resolution []byte
	var created int64
	var resolved sql.NullInt64
	if err := row.Scan(&r.SessionID, &r.ID, &kind, &state, &payload, &resolution, &created, &resolved); err != nil {
		return r, err
	}
	r.Kind, r.State = store.RequestKind(kind), store.RequestState(state)
	if len(payload) > 0 {
		r.Payload = payload
	}
	if len(resolution) > 0 {
		r.Resolution = resolution
	}
	r.CreatedAt = fromNanos(created)
	if resolved.Valid {
		t := fromNanos(resolved.Int64)
		r.ResolvedAt = &t
	}
	return r, nil
}

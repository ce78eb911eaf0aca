package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

// sessionCols are the columns of a session row, in the order sessionArgs
// binds and scanSession reads them.
const sessionCols = "id, agent, model, mode, permission_mode, cwd, metadata, status, " +
	"native_session_id, current_turn_id, created_at, updated_at, ended_at, policy, env_names, mcp_servers"

const defaultListLimit = 100

// normalizeSession puts the times in UTC, as they come back from the
// database, without touching the caller's EndedAt.
func normalizeSession(s *store.Session) {
	s.CreatedAt = s.CreatedAt.UTC()
	s.UpdatedAt = s.UpdatedAt.UTC()
	if s.EndedAt != nil {
		t := s.EndedAt.UTC()
		s.EndedAt = &t
	}
}

// sessionArgs returns the column values of s.
func sessionArgs(s *store.Session) ([]any, error) {
	created, err := nanos(s.CreatedAt)
	if err != nil {
		return nil, fmt.Errorf("created_at: %w", err)
	}
	updated, err := nanos(s.UpdatedAt)
	if err != nil {
		return nil, fmt.Errorf("updated_at: %w", err)
	}
	var ended any
	if s.EndedAt != nil {
		n, err := nanos(*s.EndedAt)
		if err != nil {
			return nil, fmt.Errorf("ended_at: %w", err)
		}
		ended = n
	}
	var metadata any
	if s.Metadata != nil { // an empty map stays an empty map
		b, err := json.Marshal(s.Metadata)
		if err != nil {
			return nil, fmt.Errorf("metadata: %w", err)
		}
		metadata = string(b)
	}
	var policy any
	if len(s.Policy) > 0 {
		policy = string(s.Policy)
	}
	var envNames any
	if len(s.EnvNames) > 0 {
		b, err := json.Marshal(s.EnvNames)
		if err != nil {
			return nil, fmt.Errorf("env_names: %w", err)
		}
		envNames = string(b)
	}
	var mcp any
	if len(s.MCPServers) > 0 {
		mcp = string(s.MCPServers)
	}
	return []any{s.ID, s.Agent, s.Model, s.Mode, s.PermissionMode, s.Cwd, metadata,
		string(s.Status), s.NativeSessionID, s.CurrentTurnID, created, updated, ended, policy, envNames, mcp}, nil
}

func scanSession(row interface{ Scan(...any) error }) (store.Session, error) {
	var s store.Session
	var metadata sql.NullString
	var status string
	var created, updated int64
	var ended sql.NullInt64
	var policy, envNames, mcp sql.NullString
	if err := row.Scan(&s.ID, &s.Agent, &s.Model, &s.Mode, &s.PermissionMode, &s.Cwd, &metadata,
		&status, &s.NativeSessionID, &s.CurrentTurnID, &created, &updated, &ended, &policy, &envNames, &mcp); err != nil {
		return s, err
	}
	if mcp.Valid {
		s.MCPServers = json.RawMessage(mcp.String)
	}
	if envNames.Valid {
		if err := json.Unmarshal([]byte(envNames.String), &s.EnvNames); err != nil {
			return s, fmt.Errorf("session %s env_names: %w", s.ID, err)
		}
	}
	if policy.Valid {
		s.Policy = json.RawMessage(policy.String)
	}
	if metadata.Valid {
		if err := json.Unmarshal([]byte(metadata.String), &s.Metadata); err != nil {
			return s, fmt.Errorf("session %s metadata: %w", s.ID, err)
		}
	}
	s.Status = store.Status(status)
	s.CreatedAt, s.UpdatedAt = fromNanos(created), fromNanos(updated)
	if ended.Valid {
		t := fromNanos(ended.Int64)
		s.EndedAt = &t
	}
	return s, nil
}

// CreateSession implements store.Store. A zero CreatedAt becomes now and a
// zero UpdatedAt becomes CreatedAt.
func (s *Store) CreateSession(ctx context.Context, sess store.Session) error {
	if sess.ID == "" {
		return errors.New("create session: empty id")
	}
	if sess.CreatedAt.IsZero() {
		sess.CreatedAt = time.Now()
	}
	if sess.UpdatedAt.IsZero() {
		sess.UpdatedAt = sess.CreatedAt
	}
	args, err := sessionArgs(&sess)
	if err != nil {
		return fmt.Errorf("create session %q: %w", sess.ID, err)
	}
	if !s.enter() {
		return fmt.Errorf("create session %q: %w", sess.ID, store.ErrClosed)
	}
	defer s.leave()
	if err := s.do(&op{kind: opCreateSession, ctx: ctx, sessionID: sess.ID, args: args}); err != nil {
		return fmt.Errorf("create session %q: %w", sess.ID, err)
	}
	return nil
}

// GetSession implements store.Store.
func (s *Store) GetSession(ctx context.Context, id string) (store.Session, error) {
	if !s.enter() {
		return store.Session{}, fmt.Errorf("get session %q: %w", id, store.ErrClosed)
	}
	defer s.leave()
	sess, err := s.getSession(ctx, id)
	if err != nil {
		return store.Session{}, fmt.Errorf("get session %q: %w", id, err)
	}
	return sess, nil
}

func (s *Store) getSession(ctx context.Context, id string) (store.Session, error) {
	unlock := s.readGate()
	sess, err := scanSession(s.reads.session.QueryRowContext(ctx, id))
	unlock()
	if errors.Is(err, sql.ErrNoRows) {
		return sess, store.ErrNotFound
	}
	return sess, err
}

// ListSessions implements store.Store. Sessions created at the same instant
// are ordered by ID, so paging with Before neither skips nor repeats any.
// An unknown Before is ErrNotFound.
func (s *Store) ListSessions(ctx context.Context, opts store.ListOptions) ([]store.Session, error) {
	if !s.enter() {
		return nil, fmt.Errorf("list sessions: %w", store.ErrClosed)
	}
	defer s.leave()
	list, err := s.listSessions(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	return list, nil
}

func (s *Store) listSessions(ctx context.Context, opts store.ListOptions) ([]store.Session, error) {
	defer s.readGate()()
	limit := opts.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	var where []string
	var args []any
	if opts.Status != "" {
		where = append(where, "status = ?")
		args = append(args, string(opts.Status))
	}
	if opts.Before != "" {
		var created int64
		err := s.reads.sessionCreated.QueryRowContext(ctx, opts.Before).Scan(&created)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("before %q: %w", opts.Before, store.ErrNotFound)
		}
		if err != nil {
			return nil, err
		}
		where = append(where, "(created_at < ? OR (created_at = ? AND id < ?))")
		args = append(args, created, created, opts.Before)
	}
	q := "SELECT " + sessionCols + " FROM sessions"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC LIMIT ?"
	args = append(args, limit)

	rows, err := s.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var list []store.Session
	for rows.Next() {
		sess, err := scanSession(rows)
		if err != nil {
			return nil, err
		}
		list = append(list, sess)
	}
	return list, rows.Err()
}

// UpdateSession implements store.Store. Updates of one session are
// serialised, so fn always sees the latest record and is called once. fn must
// not update the same session. If fn leaves UpdatedAt as it was, it is set to
// now.
func (s *Store) UpdateSession(ctx context.Context, id string, fn func(*store.Session) error) (store.Session, error) {
	if !s.enter() {
		return store.Session{}, fmt.Errorf("update session %q: %w", id, store.ErrClosed)
	}
	defer s.leave()
	unlock := s.updates.lock(id)
	defer unlock()

	sess, err := s.getSession(ctx, id)
	if err != nil {
		return store.Session{}, fmt.Errorf("update session %q: %w", id, err)
	}
	updated := sess.UpdatedAt
	if err := fn(&sess); err != nil {
		return store.Session{}, fmt.Errorf("update session %q: %w", id, err)
	}
	if sess.ID != id {
		return store.Session{}, fmt.Errorf("update session %q: the update changed the id to %q", id, sess.ID)
	}
	if sess.UpdatedAt.Equal(updated) {
		sess.UpdatedAt = time.Now()
	}
	normalizeSession(&sess)
	args, err := sessionArgs(&sess)
	if err != nil {
		return store.Session{}, fmt.Errorf("update session %q: %w", id, err)
	}
	if err := s.do(&op{kind: opUpdateSession, ctx: ctx, sessionID: id, args: args}); err != nil {
		return store.Session{}, fmt.Errorf("update session %q: %w", id, err)
	}
	return sess, nil
}

// DeleteSession implements store.Store. Subscriptions to the session close.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	if !s.enter() {
		return fmt.Errorf("delete session %q: %w", id, store.ErrClosed)
	}
	defer s.leave()
	if err := s.do(&op{kind: opDeleteSession, ctx: ctx, sessionID: id}); err != nil {
		return fmt.Errorf("delete session %q: %w", id, err)
	}
	s.leases.forget(id)
	return nil
}

package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/store/postgres/pgwire"

	"github.com/agentbox/agentbox/internal/store"
)

const sessionCols = "id, agent, model, mode, permission_mode, cwd, metadata, status, " +
	"native_session_id, current_turn_id, created_at, updated_at, ended_at, policy, env_names, mcp_servers"

const defaultListLimit = 100

// sessionParams binds the columns of sessionCols, in order.
func sessionParams(s *store.Session) ([]param, error) {
	created, err := nanos(s.CreatedAt)
	if err != nil {
		return nil, fmt.Errorf("created_at: %w", err)
	}
	updated, err := nanos(s.UpdatedAt)
	if err != nil {
		return nil, fmt.Errorf("updated_at: %w", err)
	}
	var ended *int64
	if s.EndedAt != nil {
		n, err := nanos(*s.EndedAt)
		if err != nil {
			return nil, fmt.Errorf("ended_at: %w", err)
		}
		ended = &n
	}
	metadata := param{oid: oidText}
	if s.Metadata != nil { // an empty map stays an empty map
		b, err := json.Marshal(s.Metadata)
		if err != nil {
			return nil, fmt.Errorf("metadata: %w", err)
		}
		metadata = param{oidText, b}
	}
	envNames := param{oid: oidText}
	if len(s.EnvNames) > 0 {
		b, err := json.Marshal(s.EnvNames)
		if err != nil {
			return nil, fmt.Errorf("env_names: %w", err)
		}
		envNames = param{oidText, b}
	}
	return []param{text(s.ID), text(s.Agent), text(s.Model), text(s.Mode), text(s.PermissionMode), text(s.Cwd), metadata,
		text(string(s.Status)), text(s.NativeSessionID), text(s.CurrentTurnID), int8p(created), int8p(updated), optInt8(ended),
		bytea(s.Policy), envNames, bytea(s.MCPServers)}, nil
}

func scanSession(r [][]byte) (store.Session, error) {
	s := store.Session{
		ID: string(r[0]), Agent: string(r[1]), Model: string(r[2]), Mode: string(r[3]),
		PermissionMode: string(r[4]), Cwd: string(r[5]), Status: store.Status(r[7]),
		NativeSessionID: string(r[8]), CurrentTurnID: string(r[9]),
	}
	if r[6] != nil {
		if err := json.Unmarshal(r[6], &s.Metadata); err != nil {
			return s, fmt.Errorf("session %s metadata: %w", s.ID, err)
		}
	}
	created, err := getInt8(r[10])
	if err != nil {
		return s, err
	}
	updated, err := getInt8(r[11])
	if err != nil {
		return s, err
	}
	s.CreatedAt, s.UpdatedAt = fromNanos(created), fromNanos(updated)
	if r[12] != nil {
		n, err := getInt8(r[12])
		if err != nil {
			return s, err
		}
		t := fromNanos(n)
		s.EndedAt = &t
	}
	if len(r[13]) > 0 {
		s.Policy = json.RawMessage(r[13])
	}
	if r[14] != nil {
		if err := json.Unmarshal(r[14], &s.EnvNames); err != nil {
			return s, fmt.Errorf("session %s env_names: %w", s.ID, err)
		}
	}
	if len(r[15]) > 0 {
		s.MCPServers = json.RawMessage(r[15])
	}
	return s, nil
}

// placeholders returns "$from, ..., $(from+n-1)".
func placeholders(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(from+i))
	}
	return b.String()
}

// CreateSession implements store.Store.
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
	ps, err := sessionParams(&sess)
	if err != nil {
		return fmt.Errorf("create session %q: %w", sess.ID, err)
	}
	if !s.enter() {
		return fmt.Errorf("create session %q: %w", sess.ID, store.ErrClosed)
	}
	defer s.leave()
	_, tag, err := s.pool.query(ctx, "INSERT INTO sessions ("+sessionCols+") VALUES ("+placeholders(1, len(ps))+
		") ON CONFLICT (id) DO NOTHING", ps...)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrExists
	}
	if err != nil {
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
	rows, _, err := s.pool.query(ctx, "SELECT "+sessionCols+" FROM sessions WHERE id = $1", text(id))
	if err != nil {
		return store.Session{}, err
	}
	if len(rows) == 0 {
		return store.Session{}, store.ErrNotFound
	}
	return scanSession(rows[0])
}

// ListSessions implements store.Store.
func (s *Store) ListSessions(ctx context.Context, opts store.ListOptions) ([]store.Session, error) {
	if !s.enter() {
		return nil, fmt.Errorf("list sessions: %w", store.ErrClosed)
	}
	defer s.leave()
	limit := opts.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	var where []string
	var ps []param
	if opts.Status != "" {
		ps = append(ps, text(string(opts.Status)))
		where = append(where, "status = $"+strconv.Itoa(len(ps)))
	}
	if opts.Before != "" {
		rows, _, err := s.pool.query(ctx, "SELECT created_at FROM sessions WHERE id = $1", text(opts.Before))
		if err != nil {
			return nil, fmt.Errorf("list sessions: %w", err)
		}
		if len(rows) == 0 {
			return nil, fmt.Errorf("list sessions: before %q: %w", opts.Before, store.ErrNotFound)
		}
		created, err := getInt8(rows[0][0])
		if err != nil {
			return nil, fmt.Errorf("list sessions: %w", err)
		}
		ps = append(ps, int8p(created), text(opts.Before))
		n := len(ps)
		where = append(where, fmt.Sprintf("(created_at, id) < ($%d, $%d)", n-1, n))
	}
	q := "SELECT " + sessionCols + " FROM sessions"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	ps = append(ps, int8p(int64(limit)))
	q += " ORDER BY created_at DESC, id DESC LIMIT $" + strconv.Itoa(len(ps))
	rows, _, err := s.pool.query(ctx, q, ps...)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	list := make([]store.Session, 0, len(rows))
	for _, r := range rows {
		sess, err := scanSession(r)
		if err != nil {
			return nil, fmt.Errorf("list sessions: %w", err)
		}
		list = append(list, sess)
	}
	return list, nil
}

// UpdateSession implements store.Store: a transaction holds the session's
// row lock from the read to the write, so concurrent updates from any
// process apply one after the other.
func (s *Store) UpdateSession(ctx context.Context, id string, fn func(*store.Session) error) (store.Session, error) {
	if !s.enter() {
		return store.Session{}, fmt.Errorf("update session %q: %w", id, store.ErrClosed)
	}
	defer s.leave()
	sess, err := s.updateSession(ctx, id, fn)
	if err != nil {
		return store.Session{}, fmt.Errorf("update session %q: %w", id, err)
	}
	return sess, nil
}

func (s *Store) updateSession(ctx context.Context, id string, fn func(*store.Session) error) (_ store.Session, err error) {
	c, err := s.pool.acquire(ctx)
	if err != nil {
		return store.Session{}, err
	}
	defer s.pool.release(c)
	if err := c.Exec(ctx, "BEGIN"); err != nil {
		return store.Session{}, err
	}
	defer func() {
		if err != nil {
			// A connection left in a transaction is dropped by
			// release if the rollback fails.
			_ = c.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	rows, err := execRows(ctx, c, "SELECT "+sessionCols+", lease_epoch FROM sessions WHERE id = $1 FOR UPDATE", text(id))
	if err != nil {
		return store.Session{}, err
	}
	if len(rows) == 0 {
		return store.Session{}, store.ErrNotFound
	}
	if epoch := store.FenceOf(ctx, id); epoch > 0 {
		// The row lock, held to the commit, keeps the epoch.
		cur, err := getInt8(rows[0][len(rows[0])-1])
		if err != nil {
			return store.Session{}, err
		}
		if cur != epoch {
			return store.Session{}, fmt.Errorf("%w (epoch %d, the session's is %d)", store.ErrFenced, epoch, cur)
		}
	}
	sess, err := scanSession(rows[0])
	if err != nil {
		return store.Session{}, err
	}
	updated := sess.UpdatedAt
	if err := fn(&sess); err != nil {
		return store.Session{}, err
	}
	if sess.ID != id {
		return store.Session{}, fmt.Errorf("the update changed the id to %q", sess.ID)
	}
	if sess.UpdatedAt.Equal(updated) {
		sess.UpdatedAt = time.Now()
	}
	sess.CreatedAt, sess.UpdatedAt = sess.CreatedAt.UTC(), sess.UpdatedAt.UTC()
	if sess.EndedAt != nil {
		t := sess.EndedAt.UTC()
		sess.EndedAt = &t
	}
	ps, err := sessionParams(&sess)
	if err != nil {
		return store.Session{}, err
	}
	cols := strings.Split(sessionCols, ", ")
	sets := make([]string, 0, len(cols)-1)
	for i, col := range cols[1:] {
		sets = append(sets, fmt.Sprintf("%s = $%d", col, i+2))
	}
	if _, err := execRows(ctx, c, "UPDATE sessions SET "+strings.Join(sets, ", ")+" WHERE id = $1", ps...); err != nil {
		return store.Session{}, err
	}
	if err := c.Exec(ctx, "COMMIT"); err != nil {
		return store.Session{}, err
	}
	return sess, nil
}

// execRows runs one statement on c.
func execRows(ctx context.Context, c *pgwire.Conn, sql string, ps ...param) ([][][]byte, error) {
	vals, oids := split(ps)
	res, err := c.ExecParams(ctx, sql, vals, oids)
	if err != nil {
		return nil, err
	}
	return res.Rows, nil
}

// DeleteSession implements store.Store. Subscriptions to the session, in
// this store and others, close.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	if !s.enter() {
		return fmt.Errorf("delete session %q: %w", id, store.ErrClosed)
	}
	defer s.leave()
	rows, _, err := s.pool.query(ctx, `WITH d AS (DELETE FROM sessions WHERE id = $1 RETURNING id)
		SELECT 1::int8 FROM d, LATERAL (SELECT pg_notify('`+channel+`', $1 || ' -1')) n`, text(id))
	if err == nil && len(rows) == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("delete session %q: %w", id, err)
	}
	s.hub.wake(id, -1)
	return nil
}

package sqlite

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
)

// readStmts are the statements of the read pool, each prepared on its
// first use rather than when the store opens: preparing parses the schema
// and compiles the statement, work no start needs (a daemon answers its
// first requests, GET /v1/health among them, before any of these runs).
type readStmts struct {
	events, sessionExists   *lazyStmt
	session, sessionCreated *lazyStmt
	request, requests       *lazyStmt
	all                     []*lazyStmt
}

func (r *readStmts) init(db *sql.DB) {
	stmt := func(query string) *lazyStmt {
		l := &lazyStmt{db: db, query: query}
		r.all = append(r.all, l)
		return l
	}
	// A session's rows through event_runs, then those in the tail
	// (index.go). Both halves are ordered by (run's last seq, pos), which
	// is seq order: event_runs' key gives the runs in order and each run's
	// rows are a range of pos; the tail (all of whose seqs come after the
	// runs') is sorted from a scan of at most the tail. The checks of
	// session_id and seq on the runs' rows only restate what a run is.
	r.events = stmt(`SELECT r.last_seq, e.pos, e.seq, ` + eventColsAfterSeq("e.") + ` FROM event_runs r
		JOIN events e ON e.pos BETWEEN r.first_pos + MAX(0, ?2 + 1 - r.first_seq) AND r.first_pos + r.last_seq - r.first_seq
		WHERE r.session_id = ?1 AND r.last_seq > ?2 AND e.session_id = ?1 AND e.seq > ?2 AND e.batch <= ?3
		UNION ALL
		SELECT seq, pos, seq, ` + eventColsAfterSeq("") + ` FROM events
		WHERE pos > ` + indexedPos + ` AND session_id = ?1 AND seq > ?2 AND batch <= ?3
		ORDER BY 1, 2 LIMIT ?4`)
	r.sessionExists = stmt(`SELECT 1 FROM sessions WHERE id = ?`)
	r.session = stmt(`SELECT ` + sessionCols + ` FROM sessions WHERE id = ?`)
	r.sessionCreated = stmt(`SELECT created_at FROM sessions WHERE id = ?`)
	r.request = stmt(`SELECT ` + requestCols + ` FROM requests
		WHERE session_id = ?1 AND id = ?2 AND batch <= ?3`)
	r.requests = stmt(`SELECT ` + requestCols + ` FROM requests
		WHERE session_id = ?1 AND batch <= ?3
		AND (?2 = '' OR ?2 = CASE WHEN resolved_batch <= ?3 THEN state ELSE 'pending' END)
		ORDER BY seq`)
}

// close finalizes the statements prepared so far. The store calls it once
// no call is in progress and none can start (Close).
func (r *readStmts) close() {
	for _, l := range r.all {
		if st := l.st.Load(); st != nil {
			_ = st.Close() // finalizing a statement reports nothing worth acting on
		}
	}
	r.all = nil
}

// lazyStmt is a statement of the read pool prepared on first use. A
// failed preparation is not kept: the query then runs unprepared, which
// answers the same rows or the same error, and the next use tries again.
type lazyStmt struct {
	db    *sql.DB
	query string
	mu    sync.Mutex // serialises preparations
	st    atomic.Pointer[sql.Stmt]
}

func (l *lazyStmt) get(ctx context.Context) (*sql.Stmt, error) {
	if st := l.st.Load(); st != nil {
		return st, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.st.Load(); st != nil {
		return st, nil
	}
	st, err := l.db.PrepareContext(ctx, l.query)
	if err != nil {
		return nil, err
	}
	l.st.Store(st)
	return st, nil
}

// QueryContext is sql.Stmt's.
func (l *lazyStmt) QueryContext(ctx context.Context, args ...any) (*sql.Rows, error) {
	st, err := l.get(ctx)
	if err != nil {
		return l.db.QueryContext(ctx, l.query, args...)
	}
	return st.QueryContext(ctx, args...)
}

// QueryRowContext is sql.Stmt's.
func (l *lazyStmt) QueryRowContext(ctx context.Context, args ...any) *sql.Row {
	st, err := l.get(ctx)
	if err != nil {
		return l.db.QueryRowContext(ctx, l.query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

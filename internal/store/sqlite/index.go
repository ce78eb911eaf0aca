package sqlite

import (
	"context"
	"database/sql"
	"fmt"
)

// The layout of the event log (migration 0006). events holds the rows of
// every session in one b-tree ordered by pos, which the writer assigns in
// append order, each batch's rows grouped by session (groupRows), so the
// rows a batch adds fill the last pages of that tree whatever sessions they
// belong to. event_runs indexes them by session: a run is a session's rows
// at consecutive pos with consecutive seqs (a batch's rows of one session,
// or part of them), keyed by (session_id, last_seq), with its first seq and
// first pos. It covers the rows up to the pos stored as 'indexed' in meta;
// the rows after it, the tail, are added to event_runs in bulk, at the start
// of the first batch after the tail has grown to indexRows rows.
//
// Why: a commit costs about one page of the log per page it changes. When
// events carried an index by (session_id, seq), as before, every session a
// batch appended to changed one leaf of that index: a batch over 16
// sessions wrote about 30 pages for rows that fill 5 (profiled: 96% of the
// writer's time was SQLite's, 37% of it the commit). Written in bulk, the
// index changes one leaf per session once per indexRows rows instead of once
// per batch; and it holds a run per session and batch, not an entry per
// event (at 16 sessions, about a third as many).
//
// Readers: a session's rows up to 'indexed' are found through event_runs,
// those after it by scanning the tail (at most indexRows rows plus a
// batch), in one statement, so both halves come from one snapshot. Within a
// session pos and seq go up together, so every row of the tail has a greater
// seq than every indexed row of its session.
//
// Indexing never fails a write: a batch written again carefully (writer.go;
// one of its operations failed, or its commit did, as on a full disk, where
// the first small write after space is freed must not need the room of the
// runs too) does not index, and the tail waits for the next batch.
//
// pos only goes up, also past rows whose transaction rolled back: a gap is
// harmless, but a pos given again after the rows holding it were deleted
// (a deleted session) could fall at or below 'indexed', where no reader
// looks without event_runs. The writer therefore counts pos itself,
// starting after both the largest pos and 'indexed'.

// indexedPos is the SQL value of 'indexed': the last pos event_runs covers.
const indexedPos = `(SELECT value FROM meta WHERE key = 'indexed')`

// defaultIndexRows is how long the tail grows before it is indexed: long
// enough that a batch seldom pays for indexing, short enough that a read
// scanning it stays cheap.
const defaultIndexRows = 512

// indexState is the writer's view of event_runs.
type indexState struct {
	every int // indexRows
	// tail counts the rows committed after 'indexed' (an estimate: rows
	// rolled back by a failed operation count too), sessions the
	// sessions they belong to, as far as this run knows.
	tail     int
	sessions map[string]struct{}
	// txRows and txSessions are the same for the transaction in
	// progress; indexed is true when it indexes the tail, and pages
	// then estimates the pages that changes.
	txRows     int
	txSessions map[string]struct{}
	indexed    bool
	pages      int
}

// load reads the state of the index at open (reads only: a start writes
// nothing) and the pos to count from.
func (x *indexState) load(ctx context.Context, conn *sql.Conn, pos *int64, every int) error {
	x.every = every
	x.sessions = make(map[string]struct{})
	x.txSessions = make(map[string]struct{})
	var tail int
	if err := conn.QueryRowContext(ctx, `SELECT MAX(COALESCE((SELECT MAX(pos) FROM events), 0), `+indexedPos+`),
		(SELECT COUNT(*) FROM events WHERE pos > `+indexedPos+`)`).Scan(pos, &tail); err != nil {
		return fmt.Errorf("read the event index's state: %w", err)
	}
	x.tail = tail
	return nil
}

// touch records rows queued for a session in the transaction in progress.
func (x *indexState) touch(sessionID string, rows int) {
	x.txRows += rows
	x.txSessions[sessionID] = struct{}{}
}

// committed takes the transaction in progress as committed.
func (x *indexState) committed() {
	if x.indexed {
		x.tail = 0
		clear(x.sessions)
	}
	x.tail += x.txRows
	for id := range x.txSessions {
		x.sessions[id] = struct{}{}
	}
	x.reset()
}

// rolledBack forgets the transaction in progress.
func (x *indexState) rolledBack() { x.reset() }

func (x *indexState) reset() {
	x.txRows = 0
	clear(x.txSessions)
	x.indexed = false
	x.pages = 0
}

// indexTail adds the tail's runs to event_runs when it has grown long enough. It
// runs first in a transaction, so the tail is every row of the batches
// committed before, and 'indexed' becomes the last pos given to them.
func (w *writer) indexTail() error {
	x := &w.idx
	if x.tail < x.every {
		return nil
	}
	if _, err := w.st.indexTail.ExecContext(w.ctx); err != nil {
		return fmt.Errorf("index events: %w", err)
	}
	if _, err := w.st.setIndexed.ExecContext(w.ctx, w.pos); err != nil {
		return fmt.Errorf("index events: %w", err)
	}
	x.indexed = true
	// A leaf per session, and the runs (about 50 bytes each; at most a
	// run per row).
	x.pages = len(x.sessions) + x.tail*50/pageBytes
	return nil
}

// deleteEvents deletes a session's rows, indexed and in the tail.
func (w *writer) deleteEvents(sessionID string) error {
	for _, st := range []*sql.Stmt{w.st.deleteEvents, w.st.deleteTail, w.st.deleteIndex} {
		if _, err := st.ExecContext(w.ctx, sessionID); err != nil {
			return fmt.Errorf("delete events: %w", err)
		}
	}
	return nil
}

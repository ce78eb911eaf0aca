package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/store"
)

// opKind names a write operation.
type opKind uint8

const (
	opAppend opKind = iota
	opCreateRequest
	opResolveRequest
	opCreateSession
	opUpdateSession
	opDeleteSession
)

// op is one write handed to the writer. The caller prepares everything that
// does not depend on the log's state; the writer assigns seqs (and the time
// of events that have none), writes, commits and answers on done.
type op struct {
	kind      opKind
	ctx       context.Context
	sessionID string
	// events to append: for opAppend, or the one requested or resolved
	// event of a request op. The writer fills Seq, SessionID and a zero
	// Time in place.
	events []event.Event
	// args are the column values of a session row, for create and update.
	args []any
	// request is the request to create or (only its id) resolve.
	request *requestOp
	// epoch is the fence of a write to sessionID (store.WithFence), 0
	// when none.
	epoch int64
	err   error
	done  chan error
}

type requestOp struct {
	id      string
	kind    store.RequestKind
	payload json.RawMessage
	created time.Time // zero: the requested event's time
}

// dones are answer channels to reuse: the writer answers each operation
// exactly once, so a channel whose answer was received is empty and nobody
// else holds it.
var dones = sync.Pool{New: func() any { return make(chan error, 1) }}

// do hands o to the writer and waits for its answer. The caller must be
// inside enter/leave, which guarantees the ops channel is still open.
func (s *Store) do(o *op) error {
	o.done = dones.Get().(chan error)
	o.epoch = store.FenceOf(o.ctx, o.sessionID)
	select {
	case s.ops <- o:
	case <-o.ctx.Done():
		dones.Put(o.done)
		return o.ctx.Err()
	}
	select {
	case err := <-o.done:
		dones.Put(o.done)
		return err
	case <-o.ctx.Done():
		// The writer still answers on o.done, which is therefore not
		// reused.
		// The write may still be committed; like any cancelled call, its
		// outcome is unknown to the caller.
		return o.ctx.Err()
	}
}

// rowsPerInsert is the most event rows one INSERT statement writes.
const rowsPerInsert = 32

// eventArgs is the number of columns of an event row.
const eventArgs = 13

// writer owns the write connection. Only its goroutine touches its fields.
//
// A batch is first written optimistically: operations share one
// transaction without savepoints and their event rows are written together
// by multi-row INSERTs. Failures that an operation detects before writing
// anything (unknown session, duplicate, already resolved) fail it alone. Any
// other failure rolls the transaction back and the batch is written again
// carefully: each operation in its own savepoint, so that it fails alone.
type writer struct {
	s *Store
	// ctx is the context of every statement the writer runs. It is never
	// cancelled: the writer stops when the ops channel is closed and
	// drained, and a statement interrupted halfway would fail its whole
	// batch. (An operation's own context is checked before it is written,
	// never passed to the database.)
	ctx  context.Context
	conn *sql.Conn
	st   writeStmts
	// inserts are the INSERTs of n event rows, prepared on first use on
	// the driver's connection itself (see flush).
	inserts [rowsPerInsert + 1]driver.Stmt
	hook    func(batch []*op) // tests only

	// last is the last committed seq of every session the writer has
	// seen; a session missing here is looked up in the database.
	last map[string]int64
	// tent holds the tentative last seqs of the transaction in progress,
	// -1 for a session deleted in it; undo restores tent when an operation
	// fails.
	tent map[string]int64
	undo []undoEntry
	// rows holds the column values of event rows not yet written;
	// grouped and order are groupRows' buffers.
	rows    []driver.NamedValue
	grouped []driver.NamedValue
	order   []int
	// walPages estimates the pages committed since the last checkpoint
	// request, logPages since the log last started over; rowBytes counts
	// the event bytes of the transaction in progress.
	walPages, logPages, rowBytes int
	// batch is the number of the batch being written (see durable.go).
	batch int64
	// pos is the last pos given to an event row (see index.go).
	pos int64
	// idx is the state of event_runs (index.go).
	idx indexState
	// epochPending: this run's epoch is not written yet (see openEpoch).
	epochPending bool
	// settlePending: the database is new and not synced yet (fresh.go).
	settlePending bool
	// grownTo is the log file's size after growLog last extended it,
	// zeros the zeros it writes (grow.go).
	grownTo int64
	zeros   []byte
	// boxes are strings already boxed as driver values (box).
	boxes map[string]driver.Value
}

type undoEntry struct {
	sessionID string
	prev      int64
	had       bool
}

type writeStmts struct {
	begin, commit, rollback        *sql.Stmt
	savepoint, release, rollbackTo *sql.Stmt
	lastSeq                        *sql.Stmt
	insertSession, updateSession   *sql.Stmt
	deleteSession                  *sql.Stmt
	insertRequest, resolveRequest  *sql.Stmt
	requestState, checkpoint       *sql.Stmt
	indexTail, setIndexed          *sql.Stmt
	deleteEvents, deleteTail       *sql.Stmt
	deleteIndex                    *sql.Stmt
}

func newWriter(ctx context.Context, s *Store, conn *sql.Conn, batch int64) (*writer, error) {
	w := &writer{
		s:     s,
		ctx:   context.WithoutCancel(ctx),
		batch: batch,
		conn:  conn,
		hook:  s.opts.batchHook,
		last:  make(map[string]int64),
		tent:  make(map[string]int64),
		boxes: make(map[string]driver.Value),
	}
	st := &w.st
	var err error
	prep := func(query string) *sql.Stmt {
		if err != nil {
			return nil
		}
		var stmt *sql.Stmt
		if stmt, err = conn.PrepareContext(ctx, query); err != nil {
			err = fmt.Errorf("prepare %q: %w", query, err)
		}
		return stmt
	}
	st.begin = prep("BEGIN IMMEDIATE")
	st.commit = prep("COMMIT")
	st.rollback = prep("ROLLBACK")
	st.savepoint = prep("SAVEPOINT op")
	st.release = prep("RELEASE op")
	st.rollbackTo = prep("ROLLBACK TO op")
	// The last seq is in event_runs or, for a session appended to since
	// the runs were last written, in the tail of events (index.go).
	st.lastSeq = prep(`SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1),
		MAX(COALESCE((SELECT MAX(last_seq) FROM event_runs WHERE session_id = ?1), 0),
			COALESCE((SELECT MAX(seq) FROM events WHERE pos > ` + indexedPos + ` AND session_id = ?1), 0))`)
	st.insertSession = prep(`INSERT INTO sessions (` + sessionCols + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`)
	st.updateSession = prep(`UPDATE sessions SET (` + sessionCols + `)
		= (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) WHERE id = ?`)
	st.deleteSession = prep(`DELETE FROM sessions WHERE id = ?`)
	st.insertRequest = prep(`INSERT INTO requests
		(session_id, id, seq, kind, state, payload, created_at, batch)
		VALUES (?, ?, ?, ?, 'pending', ?, ?, ?) ON CONFLICT (session_id, id) DO NOTHING`)
	st.resolveRequest = prep(`UPDATE requests
		SET state = 'resolved', resolution = ?, resolved_at = ?, resolved_batch = ?
		WHERE session_id = ? AND id = ? AND state = 'pending'`)
	st.requestState = prep(`SELECT state FROM requests WHERE session_id = ? AND id = ?`)
	st.checkpoint = prep(`PRAGMA wal_checkpoint(PASSIVE)`)
	// A run is a session's rows at consecutive pos with consecutive
	// seqs: within a session both go up, seq by one a row, so pos - seq
	// never goes down and the rows sharing a value of it are one run.
	st.indexTail = prep(`INSERT INTO event_runs (session_id, last_seq, first_seq, first_pos)
		SELECT session_id, MAX(seq), MIN(seq), MIN(pos) FROM events WHERE pos > ` + indexedPos + `
		GROUP BY session_id, pos - seq`)
	st.setIndexed = prep(`UPDATE meta SET value = ? WHERE key = 'indexed'`)
	// events has no index by session: a session's rows are found through
	// event_runs, and those after it by scanning the tail.
	st.deleteEvents = prep(`DELETE FROM events WHERE pos IN (SELECT e.pos FROM event_runs r
		JOIN events e ON e.pos BETWEEN r.first_pos AND r.first_pos + r.last_seq - r.first_seq
		WHERE r.session_id = ?1 AND e.session_id = ?1)`)
	st.deleteTail = prep(`DELETE FROM events WHERE pos > ` + indexedPos + ` AND session_id = ?`)
	st.deleteIndex = prep(`DELETE FROM event_runs WHERE session_id = ?`)
	if err == nil {
		err = w.idx.load(ctx, conn, &w.pos, s.opts.indexRows)
	}
	if err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// insert returns the statement inserting n event rows, prepared on dc, the
// driver connection of w.conn.
func (w *writer) insert(dc any, n int) (driver.StmtExecContext, error) {
	if st := w.inserts[n]; st != nil {
		return st.(driver.StmtExecContext), nil
	}
	pc, ok := dc.(driver.ConnPrepareContext)
	if !ok {
		return nil, errors.New("the sqlite driver cannot prepare with a context")
	}
	var b strings.Builder
	b.WriteString("INSERT INTO events (pos, session_id, " + eventCols + ", batch) VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?,?,?,?,?,?,?,?,?)")
	}
	st, err := pc.PrepareContext(w.ctx, b.String())
	if err != nil {
		return nil, fmt.Errorf("prepare insert of %d events: %w", n, err)
	}
	ex, ok := st.(driver.StmtExecContext)
	if !ok {
		_ = st.Close() // unusable; nothing to report
		return nil, errors.New("the sqlite driver cannot execute with a context")
	}
	w.inserts[n] = st
	return ex, nil
}

func (w *writer) close() {
	for _, st := range []*sql.Stmt{w.st.begin, w.st.commit, w.st.rollback, w.st.savepoint, w.st.release,
		w.st.rollbackTo, w.st.lastSeq, w.st.insertSession, w.st.updateSession, w.st.deleteSession,
		w.st.insertRequest, w.st.resolveRequest, w.st.requestState, w.st.checkpoint,
		w.st.indexTail, w.st.setIndexed, w.st.deleteEvents, w.st.deleteTail, w.st.deleteIndex} {
		if st != nil {
			_ = st.Close() // finalizing a statement reports nothing worth acting on
		}
	}
	// The inserts belong to the driver's connection, which only Raw
	// lends.
	_ = w.conn.Raw(func(any) error {
		for _, st := range w.inserts {
			if st != nil {
				_ = st.Close() // likewise
			}
		}
		return nil
	})
	// This returns the connection to wdb, whose Close (in closeDBs)
	// reports what matters.
	_ = w.conn.Close()
}

// run commits batches until the ops channel is closed and drained.
func (w *writer) run() {
	defer close(w.s.writerDone)
	defer w.close()
	if w.settlePending {
		w.settle()
	}
	batch := make([]*op, 0, maxBatch)
	for {
		var o *op
		select {
		case done := <-w.s.ckptFinish:
			w.finishCheckpoint(done)
			continue
		case o = <-w.s.ops:
		}
		if o == nil { // closed
			return
		}
		// Take what is already queued, never wait for more. Yielding
		// first lets the callers just answered queue their next
		// operation, which keeps batches from splitting in two.
		runtime.Gosched()
		batch = append(batch[:0], o)
	fill:
		for len(batch) < maxBatch {
			select {
			case o, ok := <-w.s.ops:
				if !ok {
					break fill
				}
				batch = append(batch, o)
			default:
				break fill
			}
		}
		if w.hook != nil {
			w.hook(batch)
		}
		w.commit(batch)
		clear(batch)
	}
}

// commit writes batch in one transaction, then publishes the new events and
// answers the callers: nobody sees an event before it is durable.
func (w *writer) commit(batch []*op) {
	if p := w.s.broken.Load(); p != nil {
		for _, o := range batch {
			o.done <- *p
		}
		return
	}
	if w.epochPending {
		if err := w.startEpoch(); err != nil {
			for _, o := range batch {
				o.done <- err
			}
			return
		}
	}
	now := time.Now().UTC()
	if err := w.write(batch, now, false); err != nil {
		w.rollback(batch)
		if err := w.write(batch, now, true); err != nil {
			w.rollback(batch)
			err = classify(err)
			for _, o := range batch {
				if o.err == nil {
					o.err = err
				}
				o.done <- o.err
			}
			return
		}
	}
	w.countPages()
	w.idx.committed()
	for id, seq := range w.tent {
		if seq < 0 {
			delete(w.last, id)
		} else {
			w.last[id] = seq
		}
	}
	clear(w.tent)
	w.undo = w.undo[:0]
	w.growLog()
	ops := batch
	if w.s.syncQ != nil {
		ops = slices.Clone(batch) // the writer reuses batch
	}
	w.s.durable(syncItem{batch: w.batch, ops: ops})
	w.batch++
}

// write runs batch in one transaction and commits it. An operation that
// fails alone gets its error in o.err. A returned error means the
// transaction must be rolled back: when not careful, for any failure that
// is not an operation's own; when careful, only when the transaction itself
// failed.
func (w *writer) write(batch []*op, now time.Time, careful bool) error {
	if _, err := w.st.begin.ExecContext(w.ctx); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	// Indexing is work the writer may put off: a batch written again
	// carefully (something failed, perhaps a full disk) leaves it for a
	// later one, so that it never fails a write.
	if !careful {
		if err := w.indexTail(); err != nil {
			return err
		}
	}
	for _, o := range batch {
		if err := o.ctx.Err(); err != nil {
			o.err = err
			continue
		}
		if careful {
			if _, err := w.st.savepoint.ExecContext(w.ctx); err != nil {
				return fmt.Errorf("savepoint: %w", err)
			}
		}
		mark := len(w.undo)
		err := w.apply(o, now, careful)
		if err != nil && !careful && !refused(err) {
			return err
		}
		if err != nil {
			o.err = err
			w.revert(mark)
		}
		if careful {
			if o.err != nil {
				clear(w.rows)
				w.rows = w.rows[:0]
				if _, err := w.st.rollbackTo.ExecContext(w.ctx); err != nil {
					return fmt.Errorf("rollback to savepoint: %w", err)
				}
			}
			if _, err := w.st.release.ExecContext(w.ctx); err != nil {
				return fmt.Errorf("release savepoint: %w", err)
			}
		}
	}
	if err := w.flush(); err != nil {
		return err
	}
	if _, err := w.st.commit.ExecContext(w.ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// refused reports whether err is an operation refusing itself before
// writing anything.
func refused(err error) bool {
	return errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrExists) ||
		errors.Is(err, store.ErrAlreadyResolved) || errors.Is(err, store.ErrFenced)
}

// rollback undoes a failed write of batch so it can be written again.
func (w *writer) rollback(batch []*op) {
	// SQLite may have rolled back already; then this fails harmlessly, so
	// its error is dropped. (Should the transaction still be open, the
	// next BEGIN fails and so does the batch.)
	_, _ = w.st.rollback.ExecContext(w.ctx)
	w.revert(0)
	w.idx.rolledBack()
	w.rowBytes = 0
	clear(w.rows)
	w.rows = w.rows[:0]
	for _, o := range batch {
		o.err = nil
	}
}

// apply does the work of one operation. Event rows are queued for flush,
// which a careful write does at once.
func (w *writer) apply(o *op, now time.Time, careful bool) error {
	if err := w.fenced(o); err != nil {
		return err
	}
	switch o.kind {
	case opAppend:
		last, err := w.lastSeq(o.sessionID)
		if err != nil {
			return err
		}
		w.queueEvents(o.sessionID, last, o.events, now)

	case opCreateRequest:
		last, err := w.lastSeq(o.sessionID)
		if err != nil {
			return err
		}
		r, ev := o.request, &o.events[0]
		if ev.Time.IsZero() {
			ev.Time = now
		}
		created := r.created
		if created.IsZero() {
			created = ev.Time
		}
		res, err := w.st.insertRequest.ExecContext(w.ctx, o.sessionID, r.id, last+1, string(r.kind), text(r.payload),
			created.UnixNano(), w.batch)
		if err != nil {
			return fmt.Errorf("insert request: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("insert request: %w", err)
		} else if n == 0 {
			return store.ErrExists
		}
		w.queueEvents(o.sessionID, last, o.events, now)

	case opResolveRequest:
		last, err := w.lastSeq(o.sessionID)
		if err != nil {
			return err
		}
		ev := &o.events[0]
		if ev.Time.IsZero() {
			ev.Time = now
		}
		res, err := w.st.resolveRequest.ExecContext(w.ctx, text(ev.Data), ev.Time.UnixNano(), w.batch, o.sessionID, o.request.id)
		if err != nil {
			return fmt.Errorf("resolve request: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("resolve request: %w", err)
		} else if n == 0 {
			var state string
			switch err := w.st.requestState.QueryRowContext(w.ctx, o.sessionID, o.request.id).Scan(&state); {
			case errors.Is(err, sql.ErrNoRows):
				return store.ErrNotFound
			case err != nil:
				return fmt.Errorf("read request state: %w", err)
			default:
				return store.ErrAlreadyResolved
			}
		}
		w.queueEvents(o.sessionID, last, o.events, now)

	case opCreateSession:
		// Rows queued for an earlier incarnation of the session go first.
		if err := w.flush(); err != nil {
			return err
		}
		res, err := w.st.insertSession.ExecContext(w.ctx, o.args...)
		if err != nil {
			return fmt.Errorf("insert session: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("insert session: %w", err)
		} else if n == 0 {
			return store.ErrExists
		}
		w.setTent(o.sessionID, 0)

	case opUpdateSession:
		res, err := w.st.updateSession.ExecContext(w.ctx, append(o.args, o.sessionID)...)
		if err != nil {
			return fmt.Errorf("update session: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("update session: %w", err)
		} else if n == 0 {
			return store.ErrNotFound
		}

	case opDeleteSession:
		// The session's queued rows must exist for the cascade to take
		// them.
		if err := w.flush(); err != nil {
			return err
		}
		if err := w.deleteEvents(o.sessionID); err != nil {
			return err
		}
		// Requests go with it (ON DELETE CASCADE).
		res, err := w.st.deleteSession.ExecContext(w.ctx, o.sessionID)
		if err != nil {
			return fmt.Errorf("delete session: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("delete session: %w", err)
		} else if n == 0 {
			return store.ErrNotFound
		}
		w.setTent(o.sessionID, -1)

	default:
		return fmt.Errorf("unknown operation %d", o.kind)
	}
	if careful {
		return w.flush()
	}
	return nil
}

// queueEvents assigns evs the seqs after last and queues their rows.
func (w *writer) queueEvents(sessionID string, last int64, evs []event.Event, now time.Time) {
	// Values shared by the rows are boxed once.
	sid, batch := driver.Value(sessionID), driver.Value(w.batch)
	w.idx.touch(sessionID, len(evs))
	for i := range evs {
		ev := &evs[i]
		ev.Seq = last + int64(i) + 1
		ev.SessionID = sessionID
		if ev.Time.IsZero() {
			ev.Time = now
		}
		w.rowBytes += 100 + len(ev.Data) + len(ev.Raw)
		// pos is given by flush.
		w.rows = append(w.rows, driver.NamedValue{},
			driver.NamedValue{Value: sid}, driver.NamedValue{Value: ev.Seq},
			driver.NamedValue{Value: ev.ID}, driver.NamedValue{Value: ev.Time.UnixNano()},
			driver.NamedValue{Value: int64(ev.Schema)}, driver.NamedValue{Value: w.box(string(ev.Type))},
			driver.NamedValue{Value: w.box(string(ev.Source))}, driver.NamedValue{Value: w.box(ev.NativeSessionID)},
			driver.NamedValue{Value: w.box(ev.TurnID)}, driver.NamedValue{Value: text(ev.Data)},
			driver.NamedValue{Value: text(ev.Raw)}, driver.NamedValue{Value: batch})
	}
	w.setTent(sessionID, last+int64(len(evs)))
}

// maxBoxes bounds the strings box keeps.
const maxBoxes = 256

// box returns v as a driver value. Boxing a string allocates, and an event's
// type, source, native session and turn repeat from one event to the next,
// so each is boxed once (until maxBoxes strings are kept: then box starts
// over).
func (w *writer) box(v string) driver.Value {
	if b, ok := w.boxes[v]; ok {
		return b
	}
	if len(w.boxes) >= maxBoxes {
		clear(w.boxes)
	}
	b := driver.Value(v)
	w.boxes[v] = b
	return b
}

// flush writes the queued event rows, each session's together (groupRows).
// It runs the multi-row INSERTs on the driver's connection directly: the
// rows are already the driver's values, and database/sql would convert and
// copy every one of them (thirteen per event) again for each statement.
func (w *writer) flush() error {
	if len(w.rows) == 0 {
		return nil
	}
	rows := w.groupRows()
	defer func() {
		clear(rows)
		w.grouped = rows[:0]
	}()
	return w.conn.Raw(func(dc any) error {
		for off := 0; off < len(rows); {
			n := min((len(rows)-off)/eventArgs, rowsPerInsert)
			st, err := w.insert(dc, n)
			if err != nil {
				return err
			}
			args := rows[off : off+n*eventArgs]
			for i := range args {
				args[i].Ordinal = i + 1
			}
			if _, err := st.ExecContext(w.ctx, args); err != nil {
				return fmt.Errorf("insert events: %w", err)
			}
			off += n * eventArgs
		}
		return nil
	})
}

// groupRows takes the queued rows (emptying the queue) and returns them with
// each session's rows together, each session's in queue order, and gives
// them their pos: a session's rows of a batch are then one run (index.go),
// and a read of them touches one or two pages, not one per row. pos only
// goes up, also past rows rolled back: a gap is harmless, a pos given twice
// is not (index.go).
func (w *writer) groupRows() []driver.NamedValue {
	rows := w.rows
	n := len(rows) / eventArgs
	order := w.order[:0]
	for i := range n {
		order = append(order, i)
	}
	session := func(i int) string { return rows[i*eventArgs+1].Value.(string) }
	// sort.SliceStable rather than slices.SortStableFunc: see
	// store.LoadMigrations.
	sort.SliceStable(order, func(a, b int) bool { return session(order[a]) < session(order[b]) })
	out := w.grouped[:0]
	for _, i := range order {
		w.pos++
		out = append(out, rows[i*eventArgs:(i+1)*eventArgs]...)
		out[len(out)-eventArgs].Value = w.pos
	}
	w.order = order
	clear(rows)
	w.rows = rows[:0]
	return out
}

// lastSeq returns the last seq of a session as seen inside the transaction
// in progress, or ErrNotFound. Only the first use of a session reads the
// database.
func (w *writer) lastSeq(sessionID string) (int64, error) {
	if seq, ok := w.tent[sessionID]; ok {
		if seq < 0 {
			return 0, store.ErrNotFound
		}
		return seq, nil
	}
	if seq, ok := w.last[sessionID]; ok {
		return seq, nil
	}
	var exists bool
	var seq int64
	if err := w.st.lastSeq.QueryRowContext(w.ctx, sessionID).Scan(&exists, &seq); err != nil {
		return 0, fmt.Errorf("read last seq: %w", err)
	}
	if !exists {
		return 0, store.ErrNotFound
	}
	// Tentative, like any state read inside the transaction.
	w.setTent(sessionID, seq)
	return seq, nil
}

func (w *writer) setTent(sessionID string, seq int64) {
	prev, had := w.tent[sessionID]
	w.undo = append(w.undo, undoEntry{sessionID, prev, had})
	w.tent[sessionID] = seq
}

// revert undoes the tentative changes made since undo had length mark.
func (w *writer) revert(mark int) {
	for i := len(w.undo) - 1; i >= mark; i-- {
		u := w.undo[i]
		if u.had {
			w.tent[u.sessionID] = u.prev
		} else {
			delete(w.tent, u.sessionID)
		}
	}
	w.undo = w.undo[:mark]
}

// text is the column value of optional JSON: NULL when empty.
func text(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

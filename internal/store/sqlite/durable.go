package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/agentbox/agentbox/event"
)

// Durability. The writer's connection runs with synchronous=NORMAL: a commit
// writes the batch's pages to the write-ahead log without waiting for the
// disk. With SyncFull a syncer goroutine then fsyncs the log, and only then
// are the batch's callers answered and its events published. Meanwhile the
// writer already commits the next batch, so the disk's flush latency overlaps
// the next batch's work instead of adding to it.
//
// Several syncers (syncers) run at once, each through its own file
// description of the log: while one waits for the disk, the next batch,
// committed meanwhile, need not wait for that sync to end before its own
// starts (concurrent fsyncs of one file overlap on the device; with one
// syncer a batch waited for the sync in progress, then for its own). A sync
// that returns covers every batch committed before it started, whichever
// syncer started it, so batches are answered strictly in commit order: the
// committed batches wait in pending, and a syncer that returns answers those
// up to the last one committed before its sync began. Each syncer has its own
// file description because Linux reports a failed writeback once per file
// description: a syncer whose fsync succeeds has not had an error taken from
// it by another, so its success means every page written before it started
// reached the disk. Once any sync has failed, no later success answers
// anything (see syncLog).
//
// Rows committed but not yet synced are visible to other connections, so
// every event and request row carries the number of the batch that wrote it
// (and a resolved request the number of the batch that resolved it), and
// readers ignore what batches after Store.synced wrote. Batch numbers are
// epoch<<32 | n, where the epoch goes up with the first batch of each run
// (openEpoch), which a store opens after syncing whatever the previous run
// left: rows from earlier runs are always visible.
//
// Checkpoints do not weaken this: SQLite syncs the log before it copies
// pages into the database file (a checkpoint may copy frames a syncer has not
// synced yet), and starts the log over only once every frame of it is in the
// synced database file; checkpoint.go says how, and what the checkpointer
// adds (it writes the database file back early, so that the sync before a
// restart has little left to write).

// syncItem is a committed batch waiting for the log to be synced.
type syncItem struct {
	batch int64
	ops   []*op
}

// openEpoch syncs what an earlier run left in the files, unless synced
// says there is nothing to sync (a fresh database has nothing of an earlier
// run: it is synced before its first write, see fresh.go; a database
// closed clean was synced by its Close, see clean.go), and returns the first batch number of this run, in the epoch
// after the one the file holds. It only reads the epoch: the writer writes
// this run's before its first batch (startEpoch), so that a start writes
// nothing (a run that writes nothing leaves nothing dirty for the next
// start to sync, and a daemon started on a full disk still serves reads).
// Nobody else writes the file, so the number read is the one the writer
// writes.
func (s *Store) openEpoch(ctx context.Context, conn *sql.Conn, synced bool) (first int64, err error) {
	for _, name := range []string{s.path, s.path + "-wal"} {
		if synced {
			break
		}
		if err := s.syncPath(name); err != nil {
			return 0, err
		}
	}
	var epoch int64
	if err := conn.QueryRowContext(ctx, "SELECT value FROM meta WHERE key = 'epoch'").Scan(&epoch); err != nil {
		return 0, fmt.Errorf("read epoch: %w", err)
	}
	return (epoch + 1) << 32, nil
}

// startEpoch writes the epoch openEpoch read, plus one; the writer runs it
// before its first batch.
func (w *writer) startEpoch() error {
	var epoch int64
	if err := w.conn.QueryRowContext(w.ctx,
		"UPDATE meta SET value = value + 1 WHERE key = 'epoch' RETURNING value").Scan(&epoch); err != nil {
		return fmt.Errorf("start epoch: %w", classify(err))
	}
	if epoch<<32 != w.batch {
		return fmt.Errorf("start epoch: epoch %d, want %d", epoch, w.batch>>32)
	}
	w.epochPending = false
	return nil
}

// keepLogFiles keeps the -wal and -shm files when the store closes (SQLite
// removes them by default), so that reopening needs no disk space: a daemon
// restarted on a full disk can still read its database.
func keepLogFiles(conn *sql.Conn) error {
	return conn.Raw(func(dc any) error {
		fc, ok := dc.(interface {
			FileControlPersistWAL(dbName string, mode int) (int, error)
		})
		if !ok {
			return errors.New("the sqlite driver cannot keep the log files")
		}
		if _, err := fc.FileControlPersistWAL("main", 1); err != nil {
			return fmt.Errorf("keep log files: %w", err)
		}
		return nil
	})
}

func syncFile(name string) error {
	f, err := os.Open(name) // read-only: directories too; fsync needs no write access
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", name, err)
	}
	return nil
}

// syncers is how many syncs of the log may be in flight at once.
const syncers = 2

// openSyncFiles opens the further syncers' file descriptions of the log
// (s.wal is the first's) and the queue that feeds the syncers.
func (s *Store) openSyncFiles() error {
	for range syncers - 1 {
		f, err := os.OpenFile(s.path+"-wal", os.O_RDWR, 0)
		if err != nil {
			return err
		}
		s.syncWAL = append(s.syncWAL, f)
	}
	s.syncQ = make(chan int64)
	return nil
}

// startSyncers starts one syncer per file description of the log; syncDone
// is closed when all have stopped.
func (s *Store) startSyncers() {
	var wg sync.WaitGroup
	for _, f := range append([]*os.File{s.wal}, s.syncWAL...) {
		wg.Go(func() { s.syncer(f) })
	}
	go func() {
		wg.Wait()
		close(s.syncDone)
	}()
}

// durable takes a committed batch: with syncers it queues it (the send waits
// while every syncer is busy, which bounds the batches committed and not yet
// synced to syncers+1), without them (SyncNormal) the commit is all the
// durability there is.
//
// That wait also keeps batches large, which is what a commit's cost depends
// on. (Measured when every session a batch touched wrote at least one page
// to the log, its leaf of the events' primary key, however few events it
// added; index.go has since made that once per bulk of the tail.) A
// writer that went on committing while both syncers were busy (a queue of
// 64 batches instead of the wait) committed twice as many batches of half
// the size (16 sessions, 128 appenders: 23 events a batch instead of 46),
// and so wrote about twice the log pages per event; its throughput was no
// better (the 2-core VM under load 18: 9.0-9.2k events/s against
// 9.5-12.4k).
//
// The writer's time, profiled at 16 sessions with the events' primary key,
// was nearly all SQLite's: about 55% the multi-row INSERTs (binding, b-tree
// inserts, the statement journal a multi-row INSERT keeps), 40% the COMMIT,
// mostly writing the log's frames (two writes each, about 30 frames a
// batch), the rest its own Go code; index.go says what changed that.
func (s *Store) durable(it syncItem) {
	if s.syncQ == nil {
		s.synced.Store(it.batch)
		s.finish(it.ops)
		return
	}
	s.syncMu.Lock()
	s.pending = append(s.pending, it)
	s.syncMu.Unlock()
	s.syncQ <- it.batch
}

// syncer syncs the log through f for the batches committed so far, then
// makes them visible, publishes their events and answers their callers, in
// commit order. It stops when syncQ is closed.
func (s *Store) syncer(f *os.File) {
	for target := range s.syncQ {
		// Batches committed while this syncer was busy: one sync
		// covers them all.
	more:
		for {
			select {
			case b, ok := <-s.syncQ:
				if !ok {
					break more
				}
				target = b
			default:
				break more
			}
		}
		err := s.syncLog(f)

		s.finishMu.Lock()
		if err == nil {
			// Another syncer failed meanwhile: its failure may
			// concern pages this sync saw written, so this success
			// answers nothing either.
			if p := s.broken.Load(); p != nil {
				err = *p
			}
		}
		s.syncMu.Lock()
		n := 0
		for n < len(s.pending) && s.pending[n].batch <= target {
			n++
		}
		items := slices.Clone(s.pending[:n])
		s.pending = slices.Delete(s.pending, 0, n)
		s.syncMu.Unlock()
		if err != nil {
			for _, it := range items {
				for _, o := range it.ops {
					o.done <- err
				}
			}
		} else if n > 0 {
			// Another syncer may have answered these batches
			// already (its sync began later and ended sooner); then
			// there is nothing left to do.
			s.synced.Store(items[n-1].batch)
			batches := make([][]*op, n)
			for i, it := range items {
				batches[i] = it.ops
			}
			s.finish(batches...)
		}
		s.finishMu.Unlock()
	}
}

// syncLog syncs the write-ahead log through f, unless an earlier sync failed:
// then the disk may have dropped what it was given, so nothing written since
// becomes visible or is acknowledged, and the store refuses further writes.
func (s *Store) syncLog(f *os.File) error {
	if p := s.broken.Load(); p != nil {
		return *p
	}
	var err error
	if s.opts.syncHook != nil {
		err = s.opts.syncHook()
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		err = fmt.Errorf("sync write-ahead log: %w", err)
		s.broken.CompareAndSwap(nil, &err)
		return *s.broken.Load()
	}
	return nil
}

// finish publishes what durable batches did and answers their callers. The
// events of a session are published together, so that its subscribers wake
// once for all of them rather than once per operation; a session deleted in
// the batches has what came before its deletion published before its
// subscriptions end.
func (s *Store) finish(batches ...[]*op) {
	var order []string               // sessions in the order of their first events
	var evs map[string][]event.Event // of sessions with subscribers
	publish := func(sessionID string) {
		if e, ok := evs[sessionID]; ok {
			s.publish(sessionID, e)
			delete(evs, sessionID)
		}
	}
	for _, batch := range batches {
		for _, o := range batch {
			if o.err != nil {
				continue
			}
			switch o.kind {
			case opAppend, opCreateRequest, opResolveRequest:
				if e, ok := evs[o.sessionID]; ok {
					evs[o.sessionID] = append(e, o.events...)
				} else if s.subscribed(o.sessionID) {
					if evs == nil {
						evs = make(map[string][]event.Event)
					}
					order = append(order, o.sessionID)
					// Clipped, so that a later append copies
					// instead of writing into the operation's
					// own events.
					evs[o.sessionID] = slices.Clip(o.events)
				}
			case opDeleteSession:
				publish(o.sessionID)
				s.dropHub(o.sessionID)
			}
		}
	}
	for _, id := range order {
		publish(id)
	}
	for _, batch := range batches {
		for _, o := range batch {
			o.done <- o.err
		}
	}
}

package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
)

// Durability. The writer's connection runs with synchronous=NORMAL: a commit
// writes the batch's pages to the write-ahead log without waiting for the
// disk. With SyncFull the syncer goroutine then fsyncs the log, and only then
// are the batch's callers answered and its events published. Meanwhile the
// writer already commits the next batch, so the disk's flush latency overlaps
// the next batch's work instead of adding to it.
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
// pages into the database file, and starts the log over only once every
// frame of it is in the synced database file.

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

// durable takes a committed batch: with a syncer it queues it, without one
// (SyncNormal) the commit is all the durability there is.
func (s *Store) durable(it syncItem) {
	if s.syncQ == nil {
		s.synced.Store(it.batch)
		s.finish(it.ops)
		return
	}
	s.syncQ <- it
}

// syncer syncs the log for whatever batches are queued, then makes them
// visible, publishes their events and answers their callers, in commit
// order.
func (s *Store) syncer() {
	defer close(s.syncDone)
	var items []syncItem
	for it := range s.syncQ {
		items = append(items[:0], it)
	more:
		for {
			select {
			case it, ok := <-s.syncQ:
				if !ok {
					break more
				}
				items = append(items, it)
			default:
				break more
			}
		}
		if err := s.syncLog(); err != nil {
			for _, it := range items {
				for _, o := range it.ops {
					o.done <- err
				}
			}
			clear(items)
			continue
		}
		s.synced.Store(items[len(items)-1].batch)
		for _, it := range items {
			s.finish(it.ops)
		}
		clear(items)
	}
}

// syncLog syncs the write-ahead log, unless an earlier sync failed: then the
// disk may have dropped what it was given, so nothing written since becomes
// visible or is acknowledged, and the store refuses further writes.
func (s *Store) syncLog() error {
	if p := s.broken.Load(); p != nil {
		return *p
	}
	var err error
	if s.opts.syncHook != nil {
		err = s.opts.syncHook()
	}
	if err == nil {
		err = s.wal.Sync()
	}
	if err != nil {
		err = fmt.Errorf("sync write-ahead log: %w", err)
		s.broken.CompareAndSwap(nil, &err)
		return *s.broken.Load()
	}
	return nil
}

// finish publishes what a durable batch did and answers its callers.
func (s *Store) finish(batch []*op) {
	for _, o := range batch {
		if o.err != nil {
			continue
		}
		switch o.kind {
		case opAppend, opCreateRequest, opResolveRequest:
			s.publish(o.sessionID, o.events)
		case opDeleteSession:
			s.dropHub(o.sessionID)
		}
	}
	for _, o := range batch {
		o.done <- o.err
	}
}

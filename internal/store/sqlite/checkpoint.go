package sqlite

import (
	"context"
	"os"
	"time"
)

// Checkpoints copy the write-ahead log back into the database file so that
// the log can start over from its beginning. The writer's connection never
// checkpoints on its own (wal_autocheckpoint=0): copying a thousand pages and
// syncing the database file inside a commit would stall every caller of the
// batch. Instead:
//
//  1. Every checkpointPages pages the writer adds to the log, it asks the
//     checkpointer, which copies them with a passive checkpoint on its own
//     connection while the writer goes on committing.
//  2. A busy writer keeps adding to the log while a checkpoint runs, so no
//     checkpoint ever catches up and the log would only grow. Once the log
//     holds restartPages pages, the checkpointer therefore runs a second
//     passive checkpoint (copying what came in during the first) and asks
//     the writer to finish: between two batches the writer runs a passive
//     checkpoint itself, which copies the little that is left and, as no
//     transaction is in progress, can copy everything (unless a reader still
//     needs older pages). The writer's next commit then starts the log over.
//
// Step 2 stalls the writer, and briefly the readers, for a few milliseconds
// (it syncs twice), which is why it is rare: the log grows to roughly
// restartPages pages (64 MiB; the count is an estimate) and is then reused.
// Should step 2 not keep up, the writer runs it itself once the log holds
// twice that, so the log never outgrows about 128 MiB whatever the load, and
// journal_size_limit gives the file back down to restartPages pages after a
// peak.
//
//  3. After each of its checkpoints the checkpointer writes back what it
//     copied into the database file (writeBackDB), in small ranges and
//     resting between them, before anything syncs that file.
//
// Why 3. A checkpoint only writes the database file's pages into the page
// cache; they reach the disk when something syncs the file, and the one
// sync SQLite makes of it is the one step 2 ends with (below). Until then
// they stay dirty (the kernel writes dirty pages back itself only after 30
// s, or when they fill a tenth of memory), so that sync wrote everything
// copied since the log last started over, up to restartPages pages (64 MiB),
// in one go, inside the writer's pause: measured at 16 sessions under load,
// the pause took 65-109 ms, and every event appended meanwhile waited for it.
// A sync of the log that overlaps a large write of the database file is
// slow too: the disk's cache flush it ends with must first write what the
// other write gave it (on the 2-core VM, a 24 KiB sync of the log took a
// median 0.45 ms alone and 0.6-5.5 ms while 8 MiB of another file were
// written and synced). Written back 128 KiB at a time with a rest as long as
// each piece took, the same 8 MiB left those syncs at 0.54-0.56 ms. In the
// store (300,000 appends at 16 sessions, host at load 8-12), step 2's pause
// fell to 7-10 ms, and the log's syncs while a write-back ran took what the
// others did (median 1.2-1.7 ms against 1.2-1.5). The benchmark's p99 moved
// from 21 ms to 15-18 in two rounds at load 8 and not beyond the noise at
// load 10-12, where the syncs with nothing of ours beside them had a p99 of
// 13-18 ms: other processes' writes to the same disk.
//
// Safety rests on SQLite's ordering, which none of this changes
// (walCheckpoint and walRestartLog in SQLite's wal.c): a checkpoint syncs
// the log before it copies (its snapshot may hold frames committed but not
// yet synced by a syncer, durable.go), and syncs the database file after
// copying only if it copied the whole log, before it records that it did
// (nBackfill); a connection starts the log over only when nBackfill says the
// whole log was copied. So the log is never written over frames whose pages
// are not on the disk. That is also why the checkpointer's connection keeps
// synchronous=NORMAL: with OFF, a checkpoint would neither sync the log
// before copying nor the database file before the log may start over
// (TestFileAndPragmas checks both connections). The write-back only
// writes earlier what that sync would write; its errors are also reported to
// SQLite's own file description, whose sync then fails.

const (
	// checkpointPages is about how many pages the writer adds to the log
	// between two checkpoints (SQLite's own default is 1000).
	checkpointPages = 2000
	// restartPages is about how long the log grows before it starts over.
	restartPages = 16384
	// pageBytes is the database's page size (SQLite's default).
	pageBytes = 4096

	// writeBackPiece is the range of the database file the checkpointer
	// writes back at a time (and rests after, as long as it took);
	// writeBackStride the largest range it asks about at once where it
	// finds nothing to write; a range that takes less than writeBackIdle
	// had nothing to write.
	writeBackPiece  = 128 << 10
	writeBackStride = 1 << 20
	writeBackIdle   = 50 * time.Microsecond
)

// checkpointer runs the checkpoints the writer asks for; restart asks for
// step 2. ctx is never cancelled: the checkpointer stops when ckptRequest is
// closed, and a checkpoint interrupted halfway gains nothing.
func (s *Store) checkpointer(ctx context.Context) {
	defer close(s.ckptDone)
	for restart := range s.ckptRequest {
		// A failed checkpoint is simply tried again next time: its error
		// is deliberately dropped.
		_, _ = s.cdb.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)")
		s.writeBackDB()
		if !restart {
			continue
		}
		_, _ = s.cdb.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)")
		s.writeBackDB()
		// Wait for the writer's part: two checkpoints cannot run at
		// once.
		s.checkpointStep("finish")
		done := make(chan struct{})
		select {
		case s.ckptFinish <- done:
			<-done
		case <-s.writerDone:
		}
	}
}

// writeBackDB writes back what the checkpoints copied into the database
// file (step 3).
func (s *Store) writeBackDB() {
	if s.dbFile == nil {
		return
	}
	// A failure only leaves the work to the checkpoint's own sync, which
	// reports it (writeBack).
	_ = writeBack(s.dbFile)
	s.checkpointStep("written back")
}

// checkpointStep tells a test's checkpointHook what the checkpointer did.
func (s *Store) checkpointStep(step string) {
	if s.opts.checkpointHook != nil {
		s.opts.checkpointHook(step)
	}
}

// countPages estimates the pages the batch just committed added to the log
// and asks for a checkpoint when they add up: a page for every 4 KiB of rows
// (they fill the last pages of events) and one for the rest, plus the pages
// of event_runs when the batch indexed the tail (index.go).
func (w *writer) countPages() {
	n := 1 + w.rowBytes/pageBytes + w.idx.pages
	w.rowBytes = 0
	w.walPages += n
	w.logPages += n
	if w.logPages >= w.s.opts.restartPages && w.logTooLong() {
		// Step 2 has not caught up (the count is an estimate, and the
		// checkpointer runs behind a busy writer): the writer does it
		// now, which bounds the log whatever the load.
		w.finishCheckpoint(nil)
		return
	}
	if w.walPages < w.s.opts.checkpointPages {
		return
	}
	w.walPages = 0
	select {
	case w.s.ckptRequest <- w.logPages >= w.s.opts.restartPages:
	default: // one is running
	}
}

// logTooLong reports whether the log file holds twice restartPages pages. The
// file's size is the log's real length here: journal_size_limit cuts the file
// back to restartPages pages whenever the log starts over.
func (w *writer) logTooLong() bool {
	fi, err := os.Stat(w.s.path + "-wal")
	return err == nil && fi.Size() >= int64(2*w.s.opts.restartPages)*pageBytes
}

// finishCheckpoint is the writer's part of step 2, between batches; it closes
// done (if any) when finished.
func (w *writer) finishCheckpoint(done chan<- struct{}) {
	if done != nil {
		defer close(done)
	}
	// With no reader in the log, the checkpoint can copy all of it and
	// the next commit starts the log over. Readers that come after see a
	// log wholly copied and read the database file only, so they do not
	// stop that either. Without the gate, under a steady stream of reads
	// some reader always holds the log and it grows with everything
	// written (TestLogBoundedUnderReaders). Reads wait for the few
	// milliseconds this takes, once every restartPages pages.
	w.s.gate.Lock()
	defer w.s.gate.Unlock()
	var busy, logged, copied int
	if err := w.st.checkpoint.QueryRowContext(w.ctx).Scan(&busy, &logged, &copied); err == nil && busy == 0 && logged == copied {
		w.logPages = 0 // the next commit starts the log over
	}
	// Otherwise (a reader holds old pages, or it failed) the next
	// checkpoint tries again.
}

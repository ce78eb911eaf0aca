package sqlite

// Growing the log ahead of its end. On a journaling file system (ext4, xfs)
// an fsync after the file grew must also commit the new size and blocks to
// the file system's journal; an fsync after overwriting blocks the file
// already has only writes the data. On a 2-core VM with ext4 the first took
// 1.5–2.8 ms, the second 0.35 ms. The log grows with every commit until it
// starts over (restartPages pages, checkpoint.go), so without this every
// sync of a new store, and of any store until its log first starts over,
// would pay the larger cost.
//
// So between two batches, when SQLite has written past the zeros it was
// given, the writer appends growChunk bytes of zeros to the log file (never
// past restartPages pages): SQLite then writes its frames over blocks that
// exist, and only the sync that follows the extension pays for the growth,
// once per growChunk. This is safe because SQLite reads a log only up to
// its first frame whose salt and checksum do not match the header's, which
// a zero frame never does: a log longer than its frames is exactly what a
// log that started over is. Only the writer's goroutine writes the log, and
// it extends the file between batches, beyond everything SQLite wrote.

// growChunk is how much the log file is extended at a time. The sync after
// an extension also writes the zeros and commits the new size, so it is
// slower than the others, and every batch waiting for it is late by as much:
// small chunks spread that cost thinly, large ones made the slowest syncs of
// the log. Measured on the 2-core VM (ext4; an fsync after 24 KiB written,
// medians): 0.35–0.47 ms without an extension; with one of 128 KiB 0.63 ms,
// 256 KiB 0.96–1.2 ms, 512 KiB 1.1 ms, 1 MiB 4.1 ms, 2 MiB 3.3–4.1 ms. In
// the store, appending from 128 goroutines to 16 sessions (about 20 MiB of
// log a second), the syncs after an extension took a median 4.1–5.0 ms with 2
// MiB (one sync in a hundred) against 1.9–2.2 ms for the others, and 1.1–1.4
// ms with 256 KiB (one in nine) against 0.75–0.95 ms.
const growChunk = 256 << 10

// growLog extends the log file with zeros when SQLite has written past the
// end of the last extension. Failures (a full disk) are dropped: the log
// then grows as SQLite writes it, which is only slower.
func (w *writer) growLog() {
	if w.s.wal == nil {
		return
	}
	fi, err := w.s.wal.Stat()
	if err != nil {
		return
	}
	size := fi.Size()
	limit := int64(w.s.opts.restartPages) * pageBytes
	if size == w.grownTo || size >= limit {
		// Within the zeros given last time, or as long as the log
		// gets: nothing to do.
		w.grownTo = size
		return
	}
	n := min(int64(growChunk), limit-size)
	if w.zeros == nil {
		w.zeros = make([]byte, growChunk)
	}
	written, _ := w.s.wal.WriteAt(w.zeros[:n], size) // see above: a failure is only slower
	w.grownTo = size + int64(written)
}

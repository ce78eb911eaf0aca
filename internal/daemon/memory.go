package daemon

import (
	"log/slog"
	"runtime/debug"

	"github.com/agentbox/agentbox/internal/residency"
)

// releaseStartGarbage collects the garbage of the daemon's start and
// returns the freed memory to the system. A start allocates a few MiB that
// are garbage once it is done (the API's routes and schemas, SQLite's
// schema parse, the policy's parse, the host probe), and stays under the
// Go runtime's first collection target (4 MiB) while doing so: no
// collection runs, and an idle daemon would keep all of it resident until
// the runtime's periodic collection (every 2 minutes) and its background
// scavenger got to it.
//
// The freed heap pages are given back with MADV_DONTNEED: they leave the
// process's RssAnon and its cgroup's memory.current (measured 1 s after a
// start: RssAnon 5.4 → 5.0 MiB, the heap arena 4.0 → 3.1 MiB). The
// collection itself maps about 0.65 MiB more of the binary's read-only
// data (the stack maps and pointer bitmaps the collector reads), which
// shows in RssFile, so VmRSS hardly moves: those pages are page cache
// shared with every process of the binary, which the kernel can drop, and
// the first collection maps them anyway, a couple of minutes later at the
// latest. It runs once the work it collects after is done, off the
// request path: collecting a heap this small takes about a millisecond of
// CPU.
//
// Then it drops the daemon's mappings of its own binary's read-only pages
// (internal/residency): the start ran the init of every package linked,
// scattered over the whole binary, and each page fault mapped the 64 KiB
// around it, so about 16 MiB of the binary were resident after a start
// that used them once. The pages the daemon goes on using come back on
// their first access, from the page cache (measured 1 s after a start:
// VmRSS 20.2 → 5.8 MiB, RssFile 16.1 → 1.7 MiB).
func releaseStartGarbage(log *slog.Logger) {
	debug.FreeOSMemory()
	ms, err := residency.ReleaseImage()
	if err != nil {
		log.Debug("the binary's start-up pages not released", "err", err)
		return
	}
	log.Debug("start-up memory released", "binary_kib", residency.Resident(ms)>>10)
}

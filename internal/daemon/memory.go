package daemon

import "runtime/debug"

// releaseStartGarbage collects the garbage of the daemon's start and
// returns the freed memory to the system. A start allocates a few MiB that
// are garbage once it is done (the API's routes and schemas, SQLite's
// schema parse, the policy's parse, the host probe), and stays under the
// Go runtime's first collection target (4 MiB) while doing so: no
// collection runs, and an idle daemon would keep all of it resident until
// the runtime's periodic collection (every 2 minutes) and its background
// scavenger got to it. This is a real reduction, not a change of counter:
// the freed heap pages are given back with MADV_DONTNEED, so they leave the
// process's RssAnon, its Pss and its cgroup's memory.current alike.
// It runs once the work it collects after is done, off the request path:
// a collection of a heap this small takes about a millisecond of CPU.
func releaseStartGarbage() { debug.FreeOSMemory() }

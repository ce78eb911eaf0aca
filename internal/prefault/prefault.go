// Package prefault maps, at the start of `agentbox serve`, the read-only
// pages of its own executable (code, read-only data, function tables) in
// one system call, which its start would otherwise fault in one at a time.
//
// A Go program's start runs the init of every package it links, scattered
// over the whole executable, and every fault on a file mapping maps the
// cached pages around it (fault-around, 64 KiB): a daemon's start took
// about 240 faults on the executable, and had nearly all of its 17 MiB
// mapped by its first answer. On a virtual machine a fault is dear: about
// 25-30 µs each on the nested guest the benchmarks run on.
// madvise(MADV_POPULATE_READ) (Linux 5.14) maps the same pages in about
// 0.4 ms (1 ms on a loaded machine, where the faults took 7.7 ms), from the
// page cache, as the faults would (it reads from the disk only what the
// cache lost, as a fault would, but in whole segments). An older kernel
// answers EINVAL, and the start faults as it always did.
//
// Only `serve` does it (its first argument is "serve", the rule
// cmd/agentbox's main follows), and the daemon gives the pages back once its
// start is done (internal/residency), so that its idle resident set stays
// small. The client commands, and the helpers the binary re-executes itself
// as (some long-lived, like a sandbox's init), fault in what they use, as
// before.
//
// Its init runs among the first of the program: the package imports
// nothing that has an init of its own (see prefault_linux.go), so the
// linker, which orders the inits by their packages' paths among those
// whose imports are initialized, puts it before nearly all of them. What
// comes before it (the runtime's start, about 200 faults) it cannot help.
package prefault

// Result is what the start's populate did.
type Result struct {
	// Image is how much of the executable was mapped: its read-only
	// segments, rounded out to pages.
	Image uintptr
	// Errno is madvise's first error (0 if none): EINVAL on a kernel older
	// than 5.14, which has no MADV_POPULATE_READ.
	Errno uintptr
}

// start is what the init did; zero when it did nothing.
var start Result

// Start reports what the populate at the process's start did: zero when
// the process is not `serve`, or on a platform without it.
func Start() Result { return start }

//go:build linux && (amd64 || arm64)

package prefault

import "unsafe"

// The package imports nothing with an init (unsafe only): an import of
// syscall, or of anything above it, would order its init after theirs.
// It reaches the two functions it needs through linkname; the runtime and
// syscall keep both for other modules that do ("Do not remove or change
// the type signature").

//go:linkname runtimeGetAuxv runtime.getAuxv
func runtimeGetAuxv() []uintptr

//go:linkname rawSyscall6 syscall.RawSyscall6
func rawSyscall6(trap, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2, errno uintptr)

const (
	atPHDR   = 3 // auxv: the address of the program headers
	atPHENT  = 4 // auxv: the size of one
	atPHNUM  = 5 // auxv: how many
	atPAGESZ = 6 // auxv: the system's page size

	ptLOAD = 1
	ptPHDR = 6
	pfW    = 2 // a segment's flag: writable

	madvPopulateRead = 22 // Linux 5.14
)

// phdr is an ELF64 program header.
type phdr struct {
	typ, flags            uint32
	off, vaddr, paddr     uint64
	filesz, memsz, palign uint64
}

func init() {
	if serving() {
		start = populateImage()
	}
}

// madvise calls madvise(2) and returns its errno.
func madvise(addr, n, advice uintptr) uintptr {
	_, _, errno := rawSyscall6(sysMadvise, addr, n, advice, 0, 0, 0)
	return errno
}

// populateImage maps the executable's read-only loadable segments, found
// through the program headers the kernel put in the auxiliary vector.
func populateImage() Result {
	var at, ent, num uintptr
	page := uintptr(4096)
	av := runtimeGetAuxv()
	for i := 0; i+1 < len(av); i += 2 {
		switch av[i] {
		case atPHDR:
			at = av[i+1]
		case atPHENT:
			ent = av[i+1]
		case atPHNUM:
			num = av[i+1]
		case atPAGESZ:
			if p := av[i+1]; p != 0 && p&(p-1) == 0 {
				page = p
			}
		}
	}
	if at == 0 || ent < unsafe.Sizeof(phdr{}) || num == 0 || num > 64 {
		return Result{}
	}
	// The headers are in the executable's first mapping, not in Go's
	// memory: the address is converted as a pointer's bits.
	base := *(*unsafe.Pointer)(unsafe.Pointer(&at))
	hdrs := make([]*phdr, num)
	for i := range hdrs {
		hdrs[i] = (*phdr)(unsafe.Add(base, uintptr(i)*ent))
	}
	return populateSegments(hdrs, at, page, madvise)
}

// populateSegments gives madvise(MADV_POPULATE_READ) each read-only
// loadable segment of hdrs, rounded out to pages of page bytes (a power of
// two). at is where the headers
// are: a position-independent executable is loaded at a bias, the
// difference between at and the address its own header (PT_PHDR) gives.
func populateSegments(hdrs []*phdr, at, page uintptr, madvise func(addr, n, advice uintptr) uintptr) Result {
	var bias uintptr
	for _, h := range hdrs {
		if h.typ == ptPHDR {
			bias = at - uintptr(h.vaddr)
		}
	}
	var r Result
	for _, h := range hdrs {
		if h.typ != ptLOAD || h.flags&pfW != 0 || h.filesz == 0 {
			continue
		}
		lo := (uintptr(h.vaddr) + bias) &^ (page - 1)
		hi := (uintptr(h.vaddr) + bias + uintptr(h.filesz) + page - 1) &^ (page - 1)
		if errno := madvise(lo, hi-lo, madvPopulateRead); errno != 0 {
			if r.Errno == 0 {
				r.Errno = errno
			}
			continue
		}
		r.Image += hi - lo
	}
	return r
}

// serving says whether the process is `agentbox serve`: whether its first
// argument, in /proc/self/cmdline, is "serve".
func serving() bool {
	path := [...]byte{'/', 'p', 'r', 'o', 'c', '/', 's', 'e', 'l', 'f', '/', 'c', 'm', 'd', 'l', 'i', 'n', 'e', 0}
	const atFDCWD, oRDONLY, oCLOEXEC = ^uintptr(99), 0, 0o2000000 // AT_FDCWD is -100
	fd, _, errno := rawSyscall6(sysOpenat, atFDCWD, uintptr(unsafe.Pointer(&path[0])), oRDONLY|oCLOEXEC, 0, 0, 0)
	if errno != 0 {
		return false
	}
	var buf [4096]byte
	n, _, errno := rawSyscall6(sysRead, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0, 0)
	rawSyscall6(sysClose, fd, 0, 0, 0, 0, 0)
	if errno != 0 || n > uintptr(len(buf)) {
		return false
	}
	return firstArg(buf[:n]) == "serve"
}

// firstArg is the first argument (after the command's name) of cmdline,
// in the format of /proc/PID/cmdline (NUL-terminated strings); "" if there
// is none. An argument cut short by the end of cmdline (a read that did
// not get all of it) is not one: "" too.
func firstArg(cmdline []byte) string {
	start := -1
	for i, c := range cmdline {
		if c != 0 {
			continue
		}
		if start >= 0 {
			return string(cmdline[start:i])
		}
		start = i + 1
	}
	return ""
}

// Package residency gives back what a process keeps mapped only because
// its start touched it: the pages of its own executable's read-only
// mappings (code, read-only data, the function tables).
//
// A Go program's start runs the init of every package it links, and those
// are scattered over the whole executable; on Linux every page fault on a
// file mapping also maps the cached pages around it (fault-around, 64 KiB).
// So a daemon that did little more than start has nearly its whole binary
// in its resident set: 16 of agentbox's 20 MiB idle RSS were such pages,
// touched once at start and never again. They are clean page-cache pages,
// so dropping the mappings (MADV_DONTNEED) loses nothing: a page that is
// used again is mapped again from the page cache on its next access (a
// minor fault, no I/O while the file stays cached), and the resident set
// is what the process goes on using. The kernel can also reclaim the
// cache pages more easily once no process maps them.
//
// Only mappings where every resident page is the file's own are dropped:
// a read-only private mapping that holds a private copy of a page (one
// written before an mprotect, as a dynamic loader does for RELRO, or a
// debugger's breakpoint) would lose that copy, so such a mapping is left
// alone (its smaps entry counts Anonymous or Swap pages).
package residency

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Mapping is one mapping of the executable that ReleaseImage dropped.
type Mapping struct {
	Start, End uintptr
	// Resident is how much of it was resident before (bytes).
	Resident int64
}

// ReleaseImage drops the process's mappings of its executable's read-only
// pages whose resident pages are all clean file pages, and returns what it
// dropped. It is for a long-lived process once its start is done; the
// pages its later work touches come back on their own.
func ReleaseImage() ([]Mapping, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &st); err != nil {
		return nil, fmt.Errorf("residency: the executable: %w", err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return nil, fmt.Errorf("residency: %w", err)
	}
	ms, err := droppable(f, unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	f.Close()
	if err != nil {
		return nil, err
	}
	var done []Mapping
	for _, m := range ms {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.Start, m.End-m.Start, unix.MADV_DONTNEED); errno != 0 {
			return done, fmt.Errorf("residency: madvise %#x-%#x: %w", m.Start, m.End, errno)
		}
		done = append(done, m)
	}
	return done, nil
}

// Resident sums what ms had resident.
func Resident(ms []Mapping) int64 {
	var n int64
	for _, m := range ms {
		n += m.Resident
	}
	return n
}

// droppable reads smaps (the format of /proc/PID/smaps) and returns the
// mappings of the file on device major:minor with inode ino that are
// private, not writable, and hold no anonymous (private copy) pages.
func droppable(smaps io.Reader, major, minor uint32, ino uint64) ([]Mapping, error) {
	var (
		out  []Mapping
		cur  *Mapping // the current mapping, when it is a candidate
		anon bool     // the current candidate holds private copies
	)
	flush := func() {
		if cur != nil && !anon {
			out = append(out, *cur)
		}
		cur, anon = nil, false
	}
	sc := bufio.NewScanner(smaps)
	for sc.Scan() {
		line := sc.Bytes()
		if key, val, ok := field(line); ok {
			if cur == nil {
				continue
			}
			switch key {
			case "Rss":
				cur.Resident = val
			case "Anonymous", "Swap":
				// Private copies, resident or swapped out. Dirty pages
				// are not a sign of one: a file just written has dirty
				// page-cache pages, which stay in the cache unmapped.
				anon = anon || val != 0
			}
			continue
		}
		// A mapping's header: start-end perms offset dev inode [path].
		flush()
		f := strings.Fields(string(line))
		if len(f) < 5 {
			return nil, fmt.Errorf("residency: unexpected smaps line %q", line)
		}
		perms := f[1]
		if len(perms) != 4 || perms[1] == 'w' || perms[3] != 'p' {
			continue
		}
		dmaj, dmin, ok := strings.Cut(f[3], ":")
		if !ok {
			return nil, fmt.Errorf("residency: unexpected device in smaps line %q", line)
		}
		mj, err1 := strconv.ParseUint(dmaj, 16, 32)
		mn, err2 := strconv.ParseUint(dmin, 16, 32)
		in, err3 := strconv.ParseUint(f[4], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("residency: unexpected smaps line %q", line)
		}
		if uint32(mj) != major || uint32(mn) != minor || in != ino {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("residency: unexpected range in smaps line %q", line)
		}
		cur = &Mapping{Start: uintptr(start), End: uintptr(end)}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("residency: reading smaps: %w", err)
	}
	flush()
	return out, nil
}

// field parses an smaps field line ("Rss:   8532 kB") into its key and
// value in bytes; a mapping's header line is not one.
func field(line []byte) (string, int64, bool) {
	i := bytes.IndexByte(line, ':')
	if i <= 0 || bytes.IndexByte(line[:i], ' ') >= 0 || bytes.IndexByte(line[:i], '-') >= 0 {
		return "", 0, false
	}
	rest := bytes.Fields(line[i+1:])
	if len(rest) == 0 {
		return string(line[:i]), 0, true
	}
	v, err := strconv.ParseInt(string(rest[0]), 10, 64)
	if err != nil {
		return string(line[:i]), 0, true // VmFlags and the like
	}
	if len(rest) > 1 && string(rest[1]) == "kB" {
		v *= 1024
	}
	return string(line[:i]), v, true
}

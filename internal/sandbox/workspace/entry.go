//go:build unix

package workspace

import (
	"bytes"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// upperEntry is one entry of the upper directory, classified.
type upperEntry struct {
	name, rel string
	st        unix.Stat_t
	kind      entryKind
	opaque    bool   // directories: hide everything below on the host
	target    string // symlinks
}

type entryKind int

const (
	kindFile entryKind = iota
	kindDir
	kindSymlink
	kindWhiteout
	kindSpecial
)

// classify reads the upper entry name in the directory open at upFd. With
// light, overlay xattrs are not read (no opaque or xattr-whiteout marks,
// no refusal of redirect and metacopy entries): enough to compare the
// entry with the host.
func classify(upFd int, name, rel string, light bool) (*upperEntry, error) {
	e := &upperEntry{name: name, rel: rel}
	if err := unix.Fstatat(upFd, name, &e.st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, fmt.Errorf("stat upper: %w", err)
	}
	var marks overlayMarks
	switch e.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR, unix.S_IFREG:
		if !light {
			var err error
			if marks, err = readOverlayMarks(upFd, name); err != nil {
				return nil, err
			}
		}
	}
	switch e.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		e.kind = kindDir
		if marks.redirect {
			// A renamed directory whose content still lives in the lower
			// layer under its old name: copying it would lose files.
			return nil, errors.New("overlay redirect_dir entry; mount the overlay with redirect_dir=off")
		}
		e.opaque = marks.opaque
	case unix.S_IFREG:
		e.kind = kindFile
		if marks.metacopy {
			// Metadata-only copy-up: the data is still in the lower
			// layer; copying it would truncate the file.
			return nil, errors.New("overlay metacopy entry; mount the overlay with metacopy=off")
		}
		if marks.whiteout && e.st.Size == 0 {
			e.kind = kindWhiteout
		}
	case unix.S_IFLNK:
		e.kind = kindSymlink
		t, err := readlinkat(upFd, name)
		if err != nil {
			return nil, fmt.Errorf("readlink upper: %w", err)
		}
		e.target = t
	case unix.S_IFCHR:
		if e.st.Rdev == 0 {
			e.kind = kindWhiteout
		} else {
			e.kind = kindSpecial
		}
	default:
		e.kind = kindSpecial
	}
	return e, nil
}

// overlayMarks are the overlay xattrs of an upper entry that matter.
type overlayMarks struct{ opaque, redirect, metacopy, whiteout bool }

// readOverlayMarks lists the xattrs of name (in the directory open at
// dirFd) without opening or following it: one llistxattr, and a read of
// the opaque mark when there is one.
func readOverlayMarks(dirFd int, name string) (overlayMarks, error) {
	var m overlayMarks
	p := fmt.Sprintf("/proc/self/fd/%d/%s", dirFd, name)
	buf := make([]byte, 1024)
	n, err := unix.Llistxattr(p, buf)
	if errors.Is(err, unix.ERANGE) {
		if n, err = unix.Llistxattr(p, nil); err == nil {
			buf = make([]byte, n)
			n, err = unix.Llistxattr(p, buf)
		}
	}
	if err != nil {
		if errors.Is(err, unix.ENOTSUP) {
			return m, nil
		}
		return m, fmt.Errorf("list upper xattrs: %w", err)
	}
	for _, x := range bytes.Split(buf[:n], []byte{0}) {
		for _, pre := range xattrPrefixes {
			key, ok := bytes.CutPrefix(x, []byte(pre))
			if !ok {
				continue
			}
			switch string(key) {
			case "redirect":
				m.redirect = true
			case "metacopy":
				m.metacopy = true
			case "whiteout":
				m.whiteout = true
			case "opaque":
				v := make([]byte, 8)
				if k, err := unix.Lgetxattr(p, string(x), v); err == nil && string(v[:k]) == "y" {
					m.opaque = true
				}
			}
		}
	}
	return m, nil
}

// hostInfo is what the host has where an upper entry goes.
type hostInfo struct {
	exists bool
	st     unix.Stat_t
	target string // symlinks
}

func (h *hostInfo) isDir() bool  { return h.exists && h.st.Mode&unix.S_IFMT == unix.S_IFDIR }
func (h *hostInfo) isReg() bool  { return h.exists && h.st.Mode&unix.S_IFMT == unix.S_IFREG }
func (h *hostInfo) isLink() bool { return h.exists && h.st.Mode&unix.S_IFMT == unix.S_IFLNK }

func (h *hostInfo) typeName() string {
	switch {
	case h.isDir():
		return "dir"
	case h.isReg():
		return "file"
	case h.isLink():
		return "symlink"
	}
	return "special"
}

// lookupHost stats name in the host directory open at hostFd (-1: the
// host has no such directory).
func lookupHost(hostFd int, name string) (hostInfo, error) {
	var h hostInfo
	if hostFd < 0 {
		return h, nil
	}
	if err := unix.Fstatat(hostFd, name, &h.st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return h, nil
		}
		return h, fmt.Errorf("stat host: %w", err)
	}
	h.exists = true
	if h.isLink() {
		h.target, _ = readlinkat(hostFd, name)
	}
	return h, nil
}

// same reports whether applying e would change nothing on the host:
// files by size, mtime and mode (the commit sets the mtime it copies), a
// directory that is there with the same mode and is not opaque, a symlink
// with the same target, a whiteout where the host has nothing.
func same(e *upperEntry, h *hostInfo) bool {
	switch e.kind {
	case kindWhiteout:
		return !h.exists
	case kindFile:
		return h.isReg() && h.st.Size == e.st.Size && h.st.Mtim == e.st.Mtim && h.st.Mode&0o777 == e.st.Mode&0o777
	case kindDir:
		return h.isDir() && !e.opaque && h.st.Mode&0o777 == e.st.Mode&0o777
	case kindSymlink:
		return h.isLink() && h.target == e.target
	}
	return false
}

// sameBytes reports whether the upper and host regular files name (in the
// directories open at upFd and hostFd) hold the same bytes, reading at
// most limit of each.
func sameBytes(upFd, hostFd int, name string, limit int64) bool {
	a, _, errA := readFile(upFd, name, limit, false)
	b, _, errB := readFile(hostFd, name, limit, false)
	return errA == nil && errB == nil && bytes.Equal(a, b)
}

// errTooLarge: a file is longer than what its reader takes.
var errTooLarge = errors.New("file too large")

// readFile reads the regular file name in the directory open at dirFd
// (unix.AT_FDCWD: name is a path), without following a symlink unless
// follow, and returns it with the stat of the descriptor it was read
// from. More than limit bytes is errTooLarge, and anything but a regular
// file an error; it never blocks on a fifo or a device (opened
// non-blocking, checked before reading).
func readFile(dirFd int, name string, limit int64, follow bool) ([]byte, *unix.Stat_t, error) {
	flags := unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Openat(dirFd, name, flags, 0)
	if err != nil {
		return nil, nil, err
	}
	defer closeFd(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, nil, errors.New("not a regular file")
	}
	if st.Size > limit {
		return nil, nil, errTooLarge
	}
	// One byte more than the limit tells a file that grew past it.
	buf := make([]byte, st.Size+1)
	n := 0
	for n < len(buf) {
		m, err := unix.Pread(fd, buf[n:], int64(n))
		if err != nil {
			return nil, nil, err
		}
		if m == 0 {
			break
		}
		n += m
		if int64(n) > limit {
			return nil, nil, errTooLarge
		}
		if n == len(buf) {
			buf = append(buf, make([]byte, min(int64(len(buf)), limit+1-int64(len(buf))))...)
		}
	}
	return buf[:n], &st, nil
}

func readlinkat(dirFd int, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(dirFd, name, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) >= 1<<16 {
			return "", errors.New("symlink target too long")
		}
		buf = make([]byte, 2*len(buf))
	}
}

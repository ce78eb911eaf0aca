//go:build unix

package files

import (
	"io/fs"
	"os"
	"syscall"
)

// ownerOf is the owner of the entry fi describes.
func ownerOf(fi fs.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}

// canChown reports whether this process may give entries away.
func canChown() bool { return os.Geteuid() == 0 }

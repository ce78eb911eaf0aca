//go:build unix

package client

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// openNoFollow opens path for reading, refusing a symbolic link.
func openNoFollow(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
}

// checkPrivate refuses a file that users other than its owner can read or
// write, or that another user owns.
func checkPrivate(path string, st fs.FileInfo) error {
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("token file %s can be read or written by other users (mode %04o); run chmod 600 %s", path, st.Mode().Perm(), path)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("token file %s belongs to user %d, not to you", path, sys.Uid)
	}
	return nil
}

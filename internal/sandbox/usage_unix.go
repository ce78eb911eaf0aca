//go:build unix

package sandbox

import (
	"io/fs"
	"syscall"
)

// allocated is the disk space a file takes: its blocks, not its length.
func allocated(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return 0
}

//go:build !unix

package client

import (
	"fmt"
	"io/fs"
	"os"
)

// openNoFollow opens path for reading, refusing a symbolic link.
func openNoFollow(path string) (*os.File, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("token file %s is a symbolic link", path)
	}
	return os.Open(path)
}

// checkPrivate has no Unix modes or owners to check on this system.
func checkPrivate(string, fs.FileInfo) error { return nil }

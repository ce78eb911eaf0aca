//go:build !linux

package workspace

import "errors"

// readDirents reads directories with Linux's getdents64; elsewhere the
// host's git repositories are not looked for (the daemon runs on Linux
// only; other builds are clients).
func readDirents(int, []byte, func(name []byte, typ uint8)) error {
	return errors.ErrUnsupported
}

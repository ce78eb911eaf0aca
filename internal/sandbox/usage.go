package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// DirUsage is what a host directory tree holds: its entries (the root not
// counted) and the bytes allocated to what is not a directory. (A
// directory's own blocks are bounded by the entry count: a tmpfs, which a
// sandbox's writable layer is, allocates none to them.)
type DirUsage struct {
	Bytes, Files int64
}

// errEnough stops a walk that has seen enough.
var errEnough = errors.New("enough")

// UsageOf measures the tree at dir without following symlinks, and stops
// as soon as it holds more than maxBytes or more than maxFiles entries
// (either <= 0: no bound), so measuring a huge tree costs no more than
// measuring one at the limit. Runtimes size a state directory's writable
// layer by what its host copy already holds (see Spec.StateDirs).
func UsageOf(dir string, maxBytes, maxFiles int64) (DirUsage, error) {
	var u DirUsage
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil // vanished or unreadable below: not counted
		}
		if p == dir {
			return nil
		}
		u.Files++
		if !d.IsDir() {
			if info, err := d.Info(); err == nil {
				u.Bytes += allocated(info)
			}
		}
		if maxFiles > 0 && u.Files > maxFiles || maxBytes > 0 && u.Bytes > maxBytes {
			return errEnough
		}
		return nil
	})
	if errors.Is(err, errEnough) || errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return u, err
}

//go:build !unix

package sandbox

import "io/fs"

// allocated is the disk space a file takes; without block counts, its
// length. (Sandboxes run on Linux only; other builds are clients.)
func allocated(info fs.FileInfo) int64 { return info.Size() }

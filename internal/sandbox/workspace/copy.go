//go:build unix

package workspace

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// errNotShown: the copy is not of what a reviewer was shown.
var errNotShown = errors.New("not what was shown for review")

// copyInto copies the regular file open at src (stat st) to name in the
// host directory open at dirFd: through a temporary name next to it, so
// the final rename is atomic and a half-copied file is never seen under
// its name. Holes stay holes (copySparse). The copy gets perm, the owner
// uid:gid and the source's times (the mtime is what tells the next commit
// the file is already there). verify, when not nil, is asked about the
// finished copy (open at dst) before it is put in place; false discards
// it with errNotShown.
func (c *commit) copyInto(dirFd int, name string, src int, st *unix.Stat_t, perm uint32, uid, gid int, verify func(dst int) bool) error {
	tmp, dst, err := createTemp(dirFd)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		_ = unix.Close(dst) // on success it was closed below; this is the error path
		if !ok {
			c.removeTemp(dirFd, tmp, name)
		}
	}()
	if err := copySparse(dst, src, st.Size); err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	if verify != nil && !verify(dst) {
		return errNotShown
	}
	if err := unix.Fchmod(dst, perm); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	if err := unix.Fchown(dst, uid, gid); err != nil && !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("chown: %w", err)
	}
	if err := unix.Close(dst); err != nil {
		return fmt.Errorf("close copy: %w", err)
	}
	dst = -1
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(dirFd, tmp, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	if err := unix.Renameat(dirFd, tmp, dirFd, name); err != nil {
		return fmt.Errorf("rename into place: %w", err)
	}
	ok = true
	return nil
}

// copySparse copies the first size bytes of src to dst (both at offset
// 0), writing only the data regions SEEK_DATA/SEEK_HOLE report, so a
// sparse file stays sparse on the host: "truncate -s 1G" in a sandbox is
// one gigabyte of holes, not of blocks. A source whose filesystem cannot
// tell holes is copied whole. Data the sandbox appends meanwhile is not
// copied (size was read when the file was opened).
func copySparse(dst, src int, size int64) error {
	buf := make([]byte, 256<<10)
	var off int64
	for off < size {
		data, err := unix.Seek(src, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		hole := size
		if err != nil {
			data = off // no SEEK_DATA here: copy the rest
		} else if h, err := unix.Seek(src, data, unix.SEEK_HOLE); err == nil {
			hole = min(h, size)
		}
		if data >= size {
			break
		}
		for data < hole {
			n, err := unix.Pread(src, buf[:min(int64(len(buf)), hole-data)], data)
			if err != nil {
				return err
			}
			if n == 0 {
				// Truncated under us: what is left is a hole.
				return unix.Ftruncate(dst, size)
			}
			if err := pwriteAll(dst, buf[:n], data); err != nil {
				return err
			}
			data += int64(n)
		}
		off = hole
	}
	return unix.Ftruncate(dst, size)
}

func pwriteAll(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if err != nil {
			return err
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// symlinkInto creates (or replaces) the symlink name -> target in the
// host directory open at dirFd, atomically.
func (c *commit) symlinkInto(dirFd int, name, target string) error {
	var tmp string
	for range 10 {
		tmp = tempName()
		err := unix.Symlinkat(target, dirFd, tmp)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("symlink: %w", err)
		}
		tmp = ""
	}
	if tmp == "" {
		return errors.New("symlink: no free temporary name")
	}
	if err := unix.Fchownat(dirFd, tmp, c.uid, c.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, unix.EPERM) {
		c.removeTemp(dirFd, tmp, name)
		return fmt.Errorf("chown symlink: %w", err)
	}
	if err := unix.Renameat(dirFd, tmp, dirFd, name); err != nil {
		c.removeTemp(dirFd, tmp, name)
		return fmt.Errorf("rename symlink into place: %w", err)
	}
	return nil
}

// removeTemp removes the temporary name of a copy that failed. One that
// stays behind is litter in the user's workspace, so that is an error too.
func (c *commit) removeTemp(dirFd int, tmp, rel string) {
	if err := unix.Unlinkat(dirFd, tmp, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		c.fail(rel, fmt.Errorf("remove temporary %s: %w", tmp, err))
	}
}

// createTemp makes a new file in the directory open at dirFd, open for
// reading (a copy is verified) and writing.
func createTemp(dirFd int) (string, int, error) {
	for range 10 {
		name := tempName()
		fd, err := unix.Openat(dirFd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return "", -1, fmt.Errorf("create temporary file: %w", err)
		}
		return name, fd, nil
	}
	return "", -1, errors.New("create temporary file: no free name")
}

func tempName() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return ".agentbox-commit-" + hex.EncodeToString(b[:])
}

package workspace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"

	"golang.org/x/sys/unix"
)

// readDirents calls each with the name and type (a DT_ constant) of every
// entry of the directory open at fd but "." and "..", reading it from its
// start with getdents64 into buf.
func readDirents(fd int, buf []byte, each func(name []byte, typ uint8)) error {
	if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
		return err
	}
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		// struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2),
		// d_type (1), d_name (NUL-terminated).
		for off := 0; off+19 <= n; {
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen < 19 || off+reclen > n {
				return errors.New("malformed directory entry")
			}
			name := buf[off+19 : off+reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if string(name) != "." && string(name) != ".." {
				each(name, buf[off+18])
			}
			off += reclen
		}
	}
}

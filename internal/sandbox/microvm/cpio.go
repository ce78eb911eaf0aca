package microvm

import (
	"bufio"
	"fmt"
	"io"
	"os"
)

// cpioFile is one entry of an initramfs.
type cpioFile struct {
	Name string // without a leading slash
	Mode uint32 // full st_mode, type bits included
	Data io.Reader
	Size int64
	// RdevMajor and RdevMinor name the device of a device node.
	RdevMajor, RdevMinor uint32
}

// writeCPIO writes entries as a "newc" (SVR4, no CRC) archive, the format
// the kernel unpacks as an initramfs, ending with the TRAILER!!! entry.
func writeCPIO(w io.Writer, files []cpioFile) error {
	bw := bufio.NewWriter(w)
	off := int64(0)
	write := func(p []byte) error {
		n, err := bw.Write(p)
		off += int64(n)
		return err
	}
	pad := func() error {
		if r := off % 4; r != 0 {
			return write(make([]byte, 4-r))
		}
		return nil
	}
	entry := func(ino int, f cpioFile) error {
		// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
		// devminor, rdevmajor, rdevminor, namesize, check
		hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
			ino, f.Mode, 0, 0, 1, 0, f.Size, 0, 0, f.RdevMajor, f.RdevMinor, len(f.Name)+1, 0)
		if err := write([]byte(hdr)); err != nil {
			return err
		}
		if err := write(append([]byte(f.Name), 0)); err != nil {
			return err
		}
		if err := pad(); err != nil {
			return err
		}
		if f.Data != nil {
			n, err := io.CopyN(bw, f.Data, f.Size)
			off += n
			if err != nil {
				return fmt.Errorf("cpio: %s: %w", f.Name, err)
			}
		}
		return pad()
	}
	for i, f := range files {
		if err := entry(i+1, f); err != nil {
			return err
		}
	}
	if err := entry(0, cpioFile{Name: "TRAILER!!!"}); err != nil {
		return err
	}
	return bw.Flush()
}

// writeInitramfs writes an initramfs whose /init is the binary at exe.
func writeInitramfs(path, exe string) error {
	src, err := os.Open(exe)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	err = writeCPIO(out, []cpioFile{
		{Name: "dev", Mode: 0o040755},
		{Name: "dev/console", Mode: 0o020600, RdevMajor: 5, RdevMinor: 1},
		{Name: "init", Mode: 0o100755, Data: src, Size: st.Size()},
	})
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

package files

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// WriteArchive writes the tree at p (a directory, or one file) to out as
// a tar stream, paths relative to p. Symlinks are written as symlinks,
// never followed; devices, fifos and sockets are left out. The tree is
// measured first: past Limits.MaxArchiveEntries or MaxArchiveBytes it
// fails with ErrTooLarge before anything is written.
func (w *Workspace) WriteArchive(ctx context.Context, p string, out io.Writer) error {
	rel, err := CleanPath(p)
	if err != nil {
		return err
	}
	items, err := w.measure(ctx, rel)
	if err != nil {
		return err
	}
	return w.writeTar(ctx, rel, items, out)
}

// PrepareArchive measures the tree at p, as WriteArchive does, and
// returns the function that writes it: its errors come before any byte.
func (w *Workspace) PrepareArchive(ctx context.Context, p string) (func(io.Writer) error, error) {
	rel, err := CleanPath(p)
	if err != nil {
		return nil, err
	}
	items, err := w.measure(ctx, rel)
	if err != nil {
		return nil, err
	}
	return func(out io.Writer) error { return w.writeTar(ctx, rel, items, out) }, nil
}

type item struct {
	rel, name string // name: in the archive
	fi        fs.FileInfo
}

func (w *Workspace) measure(ctx context.Context, rel string) ([]item, error) {
	fi, err := w.root.Lstat(rel)
	if err != nil {
		return nil, mapErr(rel, err)
	}
	if !fi.IsDir() {
		if !fi.Mode().IsRegular() && fi.Mode()&fs.ModeSymlink == 0 {
			return nil, fmt.Errorf("%w: %s is a %s", ErrNotRegular, rel, kindName(fi.Mode()))
		}
		if fi.Size() > w.lim.MaxArchiveBytes {
			return nil, fmt.Errorf("%w: %s: %d bytes, at most %d", ErrTooLarge, rel, fi.Size(), w.lim.MaxArchiveBytes)
		}
		return []item{{rel: rel, name: path.Base(rel), fi: fi}}, nil
	}
	var items []item
	var total int64
	var walk func(dir, prefix string, level int) error
	walk = func(dir, prefix string, level int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if level > w.lim.MaxDepth {
			return fmt.Errorf("%w: %s is deeper than %d levels", ErrTooLarge, rel, w.lim.MaxDepth)
		}
		names, err := w.readDir(dir)
		if err != nil {
			return err
		}
		for _, n := range names {
			child := join(dir, n)
			fi, err := w.root.Lstat(child)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				return mapErr(child, err)
			}
			m := fi.Mode()
			if !m.IsRegular() && !m.IsDir() && m&fs.ModeSymlink == 0 {
				continue // devices, fifos, sockets
			}
			if len(items) >= w.lim.MaxArchiveEntries {
				return fmt.Errorf("%w: %s has more than %d entries", ErrTooLarge, rel, w.lim.MaxArchiveEntries)
			}
			if m.IsRegular() {
				if total += fi.Size(); total > w.lim.MaxArchiveBytes {
					return fmt.Errorf("%w: %s holds more than %d bytes", ErrTooLarge, rel, w.lim.MaxArchiveBytes)
				}
			}
			name := prefix + n
			items = append(items, item{rel: child, name: name, fi: fi})
			if m.IsDir() {
				if err := walk(child, name+"/", level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(rel, "", 1); err != nil {
		return nil, err
	}
	return items, nil
}

func (w *Workspace) writeTar(ctx context.Context, rel string, items []item, out io.Writer) error {
	tw := tar.NewWriter(out)
	for _, it := range items {
		if err := ctx.Err(); err != nil {
			return err
		}
		h := &tar.Header{Name: it.name, Mode: int64(it.fi.Mode().Perm()), ModTime: it.fi.ModTime(), Format: tar.FormatPAX}
		switch m := it.fi.Mode(); {
		case m.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, it.name+"/"
		case m&fs.ModeSymlink != 0:
			target, err := w.root.Readlink(it.rel)
			if err != nil {
				return mapErr(it.rel, err)
			}
			h.Typeflag, h.Linkname = tar.TypeSymlink, target
		default:
			h.Typeflag, h.Size = tar.TypeReg, it.fi.Size()
		}
		if h.Typeflag != tar.TypeReg {
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		f, fi, err := w.openRegular(it.rel)
		if err != nil {
			return err
		}
		// The size written is the measured one: a file that changed
		// meanwhile is cut or fails the stream, never grows it.
		h.Size = min(h.Size, fi.Size())
		if err := tw.WriteHeader(h); err != nil {
			f.Close()
			return err
		}
		_, err = io.CopyN(tw, f, h.Size)
		f.Close()
		if err != nil {
			return fmt.Errorf("files: %s: %w", it.rel, err)
		}
	}
	return tw.Close()
}

// Unpack extracts the tar stream r into the directory p (made if missing,
// with its parents). Every entry is checked before anything is applied:
// names relative and clean (no absolute path, no ".."), regular files,
// directories and symlinks only (no hard links, devices or fifos), no
// setuid, setgid or sticky bit, a symlink's target inside the workspace,
// each path allowed by the commit's rules, within Limits. The entries are
// unpacked into a staging directory inside the workspace, then moved into
// place; on any error before the move nothing is applied.
func (w *Workspace) Unpack(ctx context.Context, p string, r io.Reader) (Entry, error) {
	dest, err := CleanPath(p)
	if err != nil {
		return Entry{}, err
	}
	if w.readOnly != nil {
		return Entry{}, w.readOnly
	}
	if w.sb != nil {
		if dest != "." {
			if err := w.check(ctx, true, dest); err != nil {
				return Entry{}, err
			}
		}
		clean, err := w.cleanArchive(ctx, dest, r)
		if err != nil {
			return Entry{}, err
		}
		if err := w.sb.run(ctx, dest, scriptUnpack, bytes.NewReader(clean), dest); err != nil {
			return Entry{}, err
		}
		return w.sandboxEntry(ctx, dest, "dir", 0), nil
	}
	if fi, err := w.root.Stat(dest); err == nil && !fi.IsDir() {
		return Entry{}, fmt.Errorf("%w: %s is not a directory", ErrConflict, dest)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Entry{}, mapErr(dest, err)
	}
	if dest != "." {
		if err := w.check(ctx, true, dest); err != nil {
			return Entry{}, err
		}
	}
	stage := tempName("staging")
	if err := w.root.Mkdir(stage, 0o700); err != nil {
		return Entry{}, mapErr(stage, err)
	}
	defer func() { _ = w.root.RemoveAll(stage) }()
	staged, err := w.stage(ctx, dest, stage, r)
	if err != nil {
		return Entry{}, err
	}
	// Every target must take what comes: a directory over a
	// directory, anything else over a file, a symlink or nothing.
	for _, s := range staged {
		target := join(dest, s.name)
		fi, err := w.root.Lstat(target)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return Entry{}, mapErr(target, err)
		case fi.IsDir() != s.dir:
			return Entry{}, fmt.Errorf("%w: %s: the archive has a %s where the workspace has a %s", ErrConflict, target, kindWord(s.dir), kindWord(fi.IsDir()))
		case !fi.IsDir() && !fi.Mode().IsRegular() && fi.Mode()&fs.ModeSymlink == 0:
			return Entry{}, fmt.Errorf("%w: %s is a %s", ErrNotRegular, target, kindName(fi.Mode()))
		}
	}
	made := w.missing(dest)
	if err := w.root.MkdirAll(dest, 0o755); err != nil {
		return Entry{}, mapErr(dest, err)
	}
	for _, d := range made {
		if err := w.own(d); err != nil {
			return Entry{}, mapErr(d, err)
		}
	}
	for _, s := range staged {
		target := join(dest, s.name)
		if s.dir {
			if err := w.root.Mkdir(target, s.mode); err == nil {
				if err := w.own(target); err != nil {
					return Entry{}, mapErr(target, err)
				}
			} else if !errors.Is(err, fs.ErrExist) {
				return Entry{}, mapErr(target, err)
			}
			continue
		}
		if err := w.root.Rename(stage+"/"+s.name, target); err != nil {
			return Entry{}, mapErr(target, err)
		}
	}
	return w.Stat(ctx, dest)
}

func kindWord(dir bool) string {
	if dir {
		return "directory"
	}
	return "file"
}

type stagedEntry struct {
	name string // clean, relative to the destination
	dir  bool
	mode fs.FileMode
}

// walkArchive reads the tar stream r, to be unpacked at dest, and hands fn
// each entry that passed every check, with the reader of its content: the
// one place an uploaded archive is judged, whether it is unpacked here
// (stage) or rewritten for a sandbox (cleanArchive). The checks: the
// entry count and the bytes of files bounded, each header by checkHeader
// (names, types, modes), no name twice, nothing below a symlink of the
// archive, and each path by the workspace's judge (protected paths).
func (w *Workspace) walkArchive(ctx context.Context, dest string, r io.Reader, fn func(h *tar.Header, e stagedEntry, content io.Reader) error) error {
	tr := tar.NewReader(r)
	seen, links := map[string]bool{}, map[string]bool{}
	var total int64
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBadArchive, err)
		}
		if n >= w.lim.MaxArchiveEntries {
			return fmt.Errorf("%w: more than %d entries", ErrTooLarge, w.lim.MaxArchiveEntries)
		}
		e, err := checkHeader(h, dest, w.lim)
		if err != nil {
			return err
		}
		if e.name == "." {
			continue // the destination itself
		}
		if seen[e.name] {
			return fmt.Errorf("%w: %s appears twice", ErrBadArchive, e.name)
		}
		seen[e.name] = true
		for d := path.Dir(e.name); d != "."; d = path.Dir(d) {
			if links[d] {
				return fmt.Errorf("%w: %s lies below the symlink %s", ErrBadArchive, e.name, d)
			}
		}
		if h.Typeflag == tar.TypeSymlink {
			links[e.name] = true
		}
		if err := w.check(ctx, e.dir, join(dest, e.name)); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeDir && h.Typeflag != tar.TypeSymlink {
			if total += h.Size; total > w.lim.MaxArchiveBytes {
				return fmt.Errorf("%w: more than %d bytes of files", ErrTooLarge, w.lim.MaxArchiveBytes)
			}
		}
		if err := fn(h, e, tr); err != nil {
			return err
		}
	}
}

// stage unpacks r into the directory stage, the entries judged by
// walkArchive; it returns the entries, parents before children (a parent
// the archive does not list is made, as a directory).
func (w *Workspace) stage(ctx context.Context, dest, stage string, r io.Reader) ([]stagedEntry, error) {
	var out []stagedEntry
	made := map[string]bool{} // the entries staged, and the parents made
	err := w.walkArchive(ctx, dest, r, func(h *tar.Header, e stagedEntry, content io.Reader) error {
		if made[e.name] { // a parent made for an earlier entry
			return fmt.Errorf("%w: %s appears twice", ErrBadArchive, e.name)
		}
		made[e.name] = true
		if parent := path.Dir(e.name); parent != "." && !made[parent] {
			if err := w.stageParents(stage, parent, made, &out); err != nil {
				return err
			}
		}
		at := stage + "/" + e.name
		var err error
		switch h.Typeflag {
		case tar.TypeDir:
			err = w.root.Mkdir(at, 0o700)
		case tar.TypeSymlink:
			err = w.root.Symlink(h.Linkname, at)
		default:
			err = w.stageFile(at, content, h.Size, e.mode)
		}
		if err == nil {
			err = w.own(at)
		}
		if err != nil {
			if errors.Is(err, ErrBadArchive) {
				return err
			}
			return mapErr(e.name, err)
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (w *Workspace) stageParents(stage, parent string, seen map[string]bool, out *[]stagedEntry) error {
	var missing []string
	for d := parent; d != "." && !seen[d]; d = path.Dir(d) {
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		d := missing[i]
		if err := w.root.Mkdir(stage+"/"+d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return mapErr(d, err)
		}
		seen[d] = true
		*out = append(*out, stagedEntry{name: d, dir: true, mode: 0o755})
	}
	return nil
}

func (w *Workspace) stageFile(at string, r io.Reader, size int64, mode fs.FileMode) error {
	f, err := w.root.OpenFile(at, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, io.LimitReader(r, size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = fmt.Errorf("%w: %s ends early", ErrBadArchive, at)
	}
	if err != nil {
		return err
	}
	return w.root.Chmod(at, mode)
}

// checkHeader checks one tar header against the rules of Unpack and
// returns the entry it makes, its name cleaned.
func checkHeader(h *tar.Header, dest string, lim Limits) (stagedEntry, error) {
	name := strings.TrimPrefix(strings.TrimSuffix(h.Name, "/"), "./")
	rel, err := CleanPath(name)
	if err != nil {
		return stagedEntry{}, fmt.Errorf("archive entry %q: %w", h.Name, err)
	}
	if strings.Count(rel, "/") >= lim.MaxDepth {
		return stagedEntry{}, fmt.Errorf("%w: entry %q is deeper than %d levels", ErrTooLarge, h.Name, lim.MaxDepth)
	}
	if h.Mode&0o7000 != 0 {
		return stagedEntry{}, fmt.Errorf("%w: entry %q has a setuid, setgid or sticky bit", ErrBadArchive, h.Name)
	}
	e := stagedEntry{name: rel, mode: fs.FileMode(h.Mode & 0o777)}
	switch h.Typeflag {
	case tar.TypeDir:
		e.dir = true
		if e.mode == 0 {
			e.mode = 0o755
		}
	case tar.TypeReg, '\x00': // '0', and the old format's NUL
		if h.Size < 0 || h.Size > lim.MaxArchiveBytes {
			return stagedEntry{}, fmt.Errorf("%w: entry %q: %d bytes", ErrTooLarge, h.Name, h.Size)
		}
	case tar.TypeSymlink:
		if h.Linkname == "" || path.IsAbs(h.Linkname) || strings.ContainsRune(h.Linkname, 0) {
			return stagedEntry{}, fmt.Errorf("%w: symlink %q points outside the workspace", ErrOutside, h.Name)
		}
		// Resolved lexically from where it will be: it must stay in the
		// workspace.
		to := path.Join(dest, path.Dir(rel), h.Linkname)
		if to == ".." || strings.HasPrefix(to, "../") {
			return stagedEntry{}, fmt.Errorf("%w: symlink %q -> %q points outside the workspace", ErrOutside, h.Name, h.Linkname)
		}
	case tar.TypeLink:
		return stagedEntry{}, fmt.Errorf("%w: entry %q is a hard link", ErrBadArchive, h.Name)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return stagedEntry{}, fmt.Errorf("%w: entry %q is a device or fifo", ErrNotRegular, h.Name)
	default:
		return stagedEntry{}, fmt.Errorf("%w: entry %q has type %q", ErrBadArchive, h.Name, h.Typeflag)
	}
	return e, nil
}

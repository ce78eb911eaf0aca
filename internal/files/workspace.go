package files

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"syscall"
)

// Judge is the check every change passes: the sandbox commit's rules for
// the session (workspace.Gate.Check). It returns the rule that refuses a
// change at rel, or ok.
type Judge func(rel string, isDir bool) (rule string, ok bool)

// Workspace is one session's workspace, opened for one request.
type Workspace struct {
	root  *os.Root
	judge func(ctx context.Context) (Judge, error)
	lim   Limits
	// readOnly refuses every change with it (ErrSandboxLive), nil
	// allows them.
	readOnly error
	j        Judge // made by judge on the first change
	// sb, when set, makes the changes inside a live sandbox.
	sb *Sandboxed
	// view: root is a live sandbox's view (Options.View); until ends
	// its watches.
	view  bool
	until <-chan struct{}
	// owner is given to new entries when chown is set: the workspace
	// root's, as the sandbox commit gives them (the daemon runs as root,
	// the workspace is its user's).
	uid, gid int
	chown    bool
}

// Options say how a workspace is opened.
type Options struct {
	// Judge makes the check of changes; nil allows every change (tests).
	Judge func(ctx context.Context) (Judge, error)
	// ReadOnly, when set, is the error every change is refused with.
	ReadOnly error
	// Sandboxed, when set, makes every change inside that live sandbox
	// (after the same checks), never on the host tree.
	Sandboxed *Sandboxed
	// View, when set, is what the workspace reads instead of the
	// directory Open is given: a live sandbox's view of it
	// (sandbox.WorkspaceViewer), the agent's uncommitted work included.
	// The workspace takes it over (Close closes it). Changes are never
	// made through a view: they need Sandboxed, and are refused without
	// it.
	View *os.Root
	// Until, when set, ends every watch when it closes: the view's
	// sandbox is gone (a client then watches anew, and sees the tree
	// that replaced it).
	Until  <-chan struct{}
	Limits Limits
}

// Open opens the workspace directory dir, or takes o.View.
func Open(dir string, o Options) (*Workspace, error) {
	r := o.View
	if r == nil {
		var err error
		if r, err = os.OpenRoot(dir); err != nil {
			return nil, fmt.Errorf("files: open workspace: %w", err)
		}
	}
	w := &Workspace{root: r, judge: o.Judge, lim: o.Limits.withDefaults(), readOnly: o.ReadOnly, sb: o.Sandboxed,
		view: o.View != nil, until: o.Until}
	if w.view && w.sb == nil && w.readOnly == nil {
		w.readOnly = fmt.Errorf("%w: a view of a live sandbox is changed only inside it", ErrSandboxLive)
	}
	if fi, err := r.Stat("."); err == nil && canChown() {
		w.uid, w.gid, w.chown = ownerOf(fi)
	}
	return w, nil
}

// own gives the new entry rel (not followed) the workspace's owner.
func (w *Workspace) own(rel string) error {
	if !w.chown {
		return nil
	}
	return w.root.Lchown(rel, w.uid, w.gid)
}

// missing returns the ancestors of rel, and rel, that do not exist yet,
// parents first: what MkdirAll will make.
func (w *Workspace) missing(rel string) []string {
	var out []string
	for d := rel; d != "."; d = path.Dir(d) {
		if _, err := w.root.Lstat(d); err == nil {
			break
		}
		out = append([]string{d}, out...)
	}
	return out
}

// Close releases the workspace.
func (w *Workspace) Close() error { return w.root.Close() }

// Limits are the workspace's limits, defaults applied.
func (w *Workspace) Limits() Limits { return w.lim }

// check refuses a change at each of rels (clean paths) when the
// workspace is read-only or the judge refuses it.
func (w *Workspace) check(ctx context.Context, isDir bool, rels ...string) error {
	if w.readOnly != nil {
		return w.readOnly
	}
	for _, rel := range rels {
		if rel == "." {
			return fmt.Errorf("%w: the workspace root itself", ErrProtected)
		}
	}
	if w.judge == nil {
		return nil
	}
	if w.j == nil {
		j, err := w.judge(ctx)
		if err != nil {
			return err
		}
		w.j = j
	}
	for _, rel := range rels {
		if rule, ok := w.j(rel, isDir); !ok {
			return fmt.Errorf("%w: %s (%s)", ErrProtected, rel, rule)
		}
	}
	return nil
}

// Stat describes the entry at p without following a final symlink.
func (w *Workspace) Stat(ctx context.Context, p string) (Entry, error) {
	rel, err := CleanPath(p)
	if err != nil {
		return Entry{}, err
	}
	fi, err := w.root.Lstat(rel)
	if err != nil {
		return Entry{}, mapErr(rel, err)
	}
	return entryOf(rel, fi), nil
}

// List lists the directory at p down to depth levels (1: its entries), in
// path order, at most Limits.MaxListEntries; truncated says some were
// left out. Symlinks are listed, never followed.
func (w *Workspace) List(ctx context.Context, p string, depth int) (entries []Entry, truncated bool, err error) {
	rel, err := CleanPath(p)
	if err != nil {
		return nil, false, err
	}
	fi, err := w.root.Stat(rel)
	if err != nil {
		return nil, false, mapErr(rel, err)
	}
	if !fi.IsDir() {
		return nil, false, fmt.Errorf("%w: %s is not a directory", ErrConflict, rel)
	}
	depth = min(max(depth, 1), w.lim.MaxDepth)
	entries = []Entry{}
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		names, err := w.readDir(dir)
		if err != nil {
			return err
		}
		for _, name := range names {
			if len(entries) >= w.lim.MaxListEntries {
				truncated = true
				return nil
			}
			child := join(dir, name)
			fi, err := w.root.Lstat(child)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue // removed meanwhile
				}
				return mapErr(child, err)
			}
			entries = append(entries, entryOf(child, fi))
			if fi.IsDir() && level < depth {
				if err := walk(child, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(rel, 1); err != nil {
		return nil, false, err
	}
	return entries, truncated, nil
}

// readDir returns the sorted names in the directory rel.
func (w *Workspace) readDir(rel string) ([]string, error) {
	d, err := w.root.Open(rel)
	if err != nil {
		return nil, mapErr(rel, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, mapErr(rel, err)
	}
	slices.Sort(names)
	return names, nil
}

func join(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

// openRegular opens the regular file at rel for reading, following
// symlinks only inside the workspace; a fifo is opened without blocking
// and refused like a device or socket.
func (w *Workspace) openRegular(rel string) (*os.File, fs.FileInfo, error) {
	f, err := w.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, mapErr(rel, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, mapErr(rel, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %s is a %s", ErrNotRegular, rel, kindName(fi.Mode()))
	}
	return f, fi, nil
}

func kindName(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// Read opens the regular file at p for reading from offset, at most
// length bytes (0: to the end); the read may not exceed
// Limits.MaxFileBytes. The caller closes the reader.
func (w *Workspace) Read(ctx context.Context, p string, offset, length int64) (io.ReadCloser, int64, error) {
	rel, err := CleanPath(p)
	if err != nil {
		return nil, 0, err
	}
	if offset < 0 || length < 0 {
		return nil, 0, fmt.Errorf("%w: negative offset or length", ErrBadPath)
	}
	f, fi, err := w.openRegular(rel)
	if err != nil {
		return nil, 0, err
	}
	n := max(fi.Size()-offset, 0)
	if length > 0 {
		n = min(n, length)
	}
	if n > w.lim.MaxFileBytes {
		f.Close()
		return nil, 0, fmt.Errorf("%w: %s: %d bytes to read, at most %d per request (use offset and length)", ErrTooLarge, rel, n, w.lim.MaxFileBytes)
	}
	return readCloser{io.NewSectionReader(f, offset, n), f}, n, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// Write replaces (or creates) the regular file at p with data, atomically:
// the bytes go to a new file beside it, which is renamed over it, so a
// symlink, fifo or device there is never written through. The parent
// directory must exist. An existing file keeps its permission bits.
func (w *Workspace) Write(ctx context.Context, p string, data []byte) (Entry, error) {
	rel, err := CleanPath(p)
	if err != nil {
		return Entry{}, err
	}
	if int64(len(data)) > w.lim.MaxFileBytes {
		return Entry{}, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(data), w.lim.MaxFileBytes)
	}
	if err := w.check(ctx, false, rel); err != nil {
		return Entry{}, err
	}
	if w.sb != nil {
		if err := w.sb.run(ctx, rel, scriptWrite, bytes.NewReader(data), rel); err != nil {
			return Entry{}, err
		}
		return w.sandboxEntry(ctx, rel, "file", int64(len(data))), nil
	}
	perm := fs.FileMode(0o644)
	uid, gid := w.uid, w.gid
	switch fi, err := w.root.Lstat(rel); {
	case err == nil && fi.Mode().IsRegular():
		perm = fi.Mode().Perm()
		if u, g, ok := ownerOf(fi); ok {
			uid, gid = u, g // a replaced file keeps its owner
		}
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		// Replaced by the file, never written through.
	case err == nil && fi.IsDir():
		return Entry{}, fmt.Errorf("%w: %s is a directory", ErrConflict, rel)
	case err == nil:
		return Entry{}, fmt.Errorf("%w: %s is a %s", ErrNotRegular, rel, kindName(fi.Mode()))
	case !errors.Is(err, fs.ErrNotExist):
		return Entry{}, mapErr(rel, err)
	}
	if err := w.writeNew(rel, data, perm, uid, gid); err != nil {
		return Entry{}, err
	}
	return w.Stat(ctx, rel)
}

// writeNew writes data to a temporary file in rel's directory and renames
// it to rel.
func (w *Workspace) writeNew(rel string, data []byte, perm fs.FileMode, uid, gid int) error {
	tmp := join(path.Dir(rel), tempName("upload"))
	f, err := w.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return mapErr(rel, err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = w.root.Chmod(tmp, perm) // the umask narrowed it
	}
	if err == nil && w.chown {
		err = w.root.Lchown(tmp, uid, gid)
	}
	if err == nil {
		err = w.root.Rename(tmp, rel)
	}
	if err != nil {
		_ = w.root.Remove(tmp)
		return mapErr(rel, err)
	}
	return nil
}

// tempName is a fresh hidden name for a file the package makes and
// renames away.
func tempName(what string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return ".agentbox-" + what + "-" + hex.EncodeToString(b[:])
}

// Mkdir makes the directory p (and its missing parents with parents).
func (w *Workspace) Mkdir(ctx context.Context, p string, parents bool) (Entry, error) {
	rel, err := CleanPath(p)
	if err != nil {
		return Entry{}, err
	}
	if err := w.check(ctx, true, rel); err != nil {
		return Entry{}, err
	}
	if w.sb != nil {
		script := scriptMkdir
		if parents {
			script = scriptMkdirP
		}
		if err := w.sb.run(ctx, rel, script, nil, rel); err != nil {
			return Entry{}, err
		}
		return w.sandboxEntry(ctx, rel, "dir", 0), nil
	}
	made := []string{rel}
	if parents {
		made = w.missing(rel)
		err = w.root.MkdirAll(rel, 0o755)
		if err == nil {
			if fi, serr := w.root.Lstat(rel); serr == nil && !fi.IsDir() {
				err = fmt.Errorf("%w: %s is not a directory", ErrConflict, rel)
			}
		}
	} else {
		err = w.root.Mkdir(rel, 0o755)
	}
	if err != nil {
		if errors.Is(err, ErrConflict) {
			return Entry{}, err
		}
		return Entry{}, mapErr(rel, err)
	}
	for _, d := range made {
		if err := w.own(d); err != nil {
			return Entry{}, mapErr(d, err)
		}
	}
	return w.Stat(ctx, rel)
}

// Move renames from to to. Without overwrite an existing to is refused;
// with it, a file or empty directory there is replaced.
func (w *Workspace) Move(ctx context.Context, from, to string, overwrite bool) (Entry, error) {
	src, err := CleanPath(from)
	if err != nil {
		return Entry{}, err
	}
	dst, err := CleanPath(to)
	if err != nil {
		return Entry{}, err
	}
	if w.sb != nil {
		// The sandbox's view decides what is there; the host tree's
		// entries below a directory are judged where they would go.
		typ := "file"
		fi, err := w.root.Lstat(src)
		isDir := err == nil && fi.IsDir()
		if err := w.check(ctx, isDir, src, dst); err != nil {
			return Entry{}, err
		}
		if isDir {
			typ = "dir"
			if err := w.checkTree(ctx, src, dst); err != nil {
				return Entry{}, err
			}
		}
		flag := "0"
		if overwrite {
			flag = "1"
		}
		if err := w.sb.run(ctx, dst, scriptMove, nil, src, dst, flag); err != nil {
			return Entry{}, err
		}
		return w.sandboxEntry(ctx, dst, typ, 0), nil
	}
	fi, err := w.root.Lstat(src)
	if err != nil {
		return Entry{}, mapErr(src, err)
	}
	if err := w.check(ctx, fi.IsDir(), src, dst); err != nil {
		return Entry{}, err
	}
	if fi.IsDir() {
		// Everything below moves too: judge each path it would take.
		if err := w.checkTree(ctx, src, dst); err != nil {
			return Entry{}, err
		}
	}
	if !overwrite {
		if _, err := w.root.Lstat(dst); err == nil {
			return Entry{}, fmt.Errorf("%w: %s", ErrExists, dst)
		}
	}
	if err := w.root.Rename(src, dst); err != nil {
		return Entry{}, mapErr(dst, err)
	}
	return w.Stat(ctx, dst)
}

// checkTree judges every entry below the directory src as if it were at
// the same place below dst (and where it leaves, below src).
func (w *Workspace) checkTree(ctx context.Context, src, dst string) error {
	n := 0
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		if level > w.lim.MaxDepth {
			return fmt.Errorf("%w: deeper than %d levels", ErrTooLarge, w.lim.MaxDepth)
		}
		names, err := w.readDir(dir)
		if err != nil {
			return err
		}
		for _, name := range names {
			if n++; n > w.lim.MaxArchiveEntries {
				return fmt.Errorf("%w: more than %d entries", ErrTooLarge, w.lim.MaxArchiveEntries)
			}
			child := join(dir, name)
			fi, err := w.root.Lstat(child)
			if err != nil {
				return mapErr(child, err)
			}
			moved := dst + child[len(src):]
			if err := w.check(ctx, fi.IsDir(), child, moved); err != nil {
				return err
			}
			if fi.IsDir() {
				if err := walk(child, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(src, 1)
}

// Delete removes p; a non-empty directory only with recursive.
func (w *Workspace) Delete(ctx context.Context, p string, recursive bool) error {
	rel, err := CleanPath(p)
	if err != nil {
		return err
	}
	if w.sb != nil {
		if err := w.check(ctx, false, rel); err != nil {
			return err
		}
		script := scriptRemove
		if recursive {
			if fi, err := w.root.Lstat(rel); err == nil && fi.IsDir() {
				if err := w.checkTree(ctx, rel, rel); err != nil {
					return err
				}
			}
			script = scriptRemoveR
		}
		return w.sb.run(ctx, rel, script, nil, rel)
	}
	fi, err := w.root.Lstat(rel)
	if err != nil {
		return mapErr(rel, err)
	}
	if err := w.check(ctx, fi.IsDir(), rel); err != nil {
		return err
	}
	if fi.IsDir() && recursive {
		if err := w.checkTree(ctx, rel, rel); err != nil {
			return err
		}
		return mapErr(rel, w.root.RemoveAll(rel))
	}
	return mapErr(rel, w.root.Remove(rel))
}

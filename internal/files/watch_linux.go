package files

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

const watchMask = unix.IN_CREATE | unix.IN_CLOSE_WRITE | unix.IN_MODIFY | unix.IN_DELETE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_ONLYDIR

// Watch reports the changes below the directory p, at every depth (up to
// Limits.MaxWatchDirs directories), on the returned channel until ctx
// ends or the kernel's queue overflows; then the channel is closed (a
// client lists again and watches anew). Directories are watched through
// descriptors opened inside the workspace, so a symlink swapped in never
// makes it watch a directory outside.
func (w *Workspace) Watch(ctx context.Context, p string) (<-chan Change, error) {
	rel, err := CleanPath(p)
	if err != nil {
		return nil, err
	}
	if fi, err := w.root.Stat(rel); err != nil {
		return nil, mapErr(rel, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrConflict, rel)
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("files: watch: %w", err)
	}
	f := os.NewFile(uintptr(fd), "inotify")
	wt := &watcher{w: w, fd: fd, f: f, dirs: map[int]string{}}
	if err := wt.addTree(rel); err != nil {
		f.Close()
		return nil, err
	}
	ch := make(chan Change, 64)
	if w.until != nil {
		// The view's sandbox is gone: its tree no longer changes.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		until := w.until
		go func() {
			select {
			case <-until:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	stop := context.AfterFunc(ctx, func() { f.Close() })
	go func() {
		defer close(ch)
		defer stop()
		defer f.Close()
		wt.run(ctx, ch)
	}()
	return ch, nil
}

type watcher struct {
	w    *Workspace
	fd   int
	f    *os.File
	dirs map[int]string // watch descriptor → directory
	n    int            // watches added
}

// addTree watches the directory rel and every directory below it.
func (wt *watcher) addTree(rel string) error {
	if wt.n >= wt.w.lim.MaxWatchDirs {
		return nil // bounded: deeper changes go unreported
	}
	d, err := wt.w.root.Open(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return mapErr(rel, err)
	}
	fi, err := d.Stat()
	if err != nil || !fi.IsDir() {
		d.Close()
		return nil
	}
	wd, err := unix.InotifyAddWatch(wt.fd, "/proc/self/fd/"+strconv.Itoa(int(d.Fd())), watchMask)
	names, _ := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("files: watch %s: %w", rel, err)
	}
	wt.dirs[wd] = rel
	wt.n++
	for _, n := range names {
		if ours(n) {
			continue
		}
		child := join(rel, n)
		if fi, err := wt.w.root.Lstat(child); err == nil && fi.IsDir() {
			if err := wt.addTree(child); err != nil {
				return err
			}
		}
	}
	return nil
}

func (wt *watcher) run(ctx context.Context, ch chan<- Change) {
	buf := make([]byte, 64<<10)
	moved := map[uint32]string{} // cookie → the old path of a rename
	for {
		n, err := wt.f.Read(buf)
		if err != nil || n < unix.SizeofInotifyEvent {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				return
			}
			dir, ok := wt.dirs[int(ev.Wd)]
			if !ok {
				continue
			}
			if ev.Mask&unix.IN_IGNORED != 0 {
				delete(wt.dirs, int(ev.Wd))
				continue
			}
			name := cstring(nameBytes)
			if name == "" {
				continue // about the directory itself (DELETE_SELF): its parent reports it
			}
			p := join(dir, name)
			var c Change
			switch m := ev.Mask; {
			case m&unix.IN_CREATE != 0:
				if ours(name) {
					continue
				}
				c = Change{p, OpCreate}
				if m&unix.IN_ISDIR != 0 {
					_ = wt.addTree(p)
				}
			case m&(unix.IN_CLOSE_WRITE|unix.IN_MODIFY) != 0:
				if ours(name) {
					continue
				}
				c = Change{p, OpWrite}
			case m&unix.IN_DELETE != 0:
				if ours(name) {
					continue
				}
				c = Change{p, OpRemove}
			case m&unix.IN_MOVED_FROM != 0:
				moved[ev.Cookie] = p
				if ours(name) {
					continue
				}
				c = Change{p, OpRename}
			case m&unix.IN_MOVED_TO != 0:
				from, known := moved[ev.Cookie]
				delete(moved, ev.Cookie)
				switch {
				case ours(name):
					continue
				case known && ours(baseName(from)):
					c = Change{p, OpWrite} // a write's new file put in place
				case known:
					c = Change{p, OpRename}
				default:
					c = Change{p, OpCreate} // from outside the watched tree
				}
				if m&unix.IN_ISDIR != 0 {
					_ = wt.addTree(p)
				}
			default:
				continue
			}
			if len(moved) > 1024 {
				clear(moved)
			}
			select {
			case ch <- c:
			case <-ctx.Done():
				return
			}
		}
	}
}

func baseName(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}

func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

package files

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Sandboxed says that the workspace is a live sandbox's: its changes are
// made inside the sandbox, by small /bin/sh commands started there (as
// the mock agent's file steps are), so that they land in the sandbox's
// view of the workspace, which its agent sees at once, and reach the host
// only through the sandbox's checked commit, like the agent's own. Reads
// are of the sandbox's view too when the workspace is opened on it
// (Options.View).
type Sandboxed struct {
	Sandbox sandbox.Sandbox
	// Dir is the workspace as the sandbox shows it.
	Dir string
}

// sandboxTimeout bounds each command a change starts in the sandbox.
const sandboxTimeout = time.Minute

// Exit codes of the scripts, each a refusal the API names.
const (
	exitNotFound = 3 // the path, or its directory, is missing
	exitConflict = 5 // a directory where a file goes, or the reverse; not empty
	exitExists   = 6 // the target exists
	exitSpecial  = 7 // a device, fifo or socket
)

// The scripts, run by /bin/sh with the paths as $1 and $2 (never
// interpolated). None follows a symlink at the path it changes: a write
// goes to a new file renamed over it (mv -T), a removal removes the link.
const (
	scriptWrite = `d=$(dirname -- "$1")
[ -d "$d" ] || exit 3
if [ -L "$1" ]; then :; elif [ -d "$1" ]; then exit 5; elif [ -e "$1" ] && [ ! -f "$1" ]; then exit 7; fi
t="$d/.agentbox-upload-$$"
cat > "$t" && mv -fT -- "$t" "$1" || { rm -f -- "$t"; exit 1; }`
	scriptMkdir   = `[ -e "$1" ] || [ -L "$1" ] && exit 6; [ -d "$(dirname -- "$1")" ] || exit 3; mkdir -- "$1"`
	scriptMkdirP  = `[ -d "$1" ] && [ ! -L "$1" ] && exit 0; [ -e "$1" ] || [ -L "$1" ] && exit 5; mkdir -p -- "$1"`
	scriptMove    = `[ -e "$1" ] || [ -L "$1" ] || exit 3; if [ -e "$2" ] || [ -L "$2" ]; then [ "$3" = 1 ] || exit 6; fi; mv -fT -- "$1" "$2"`
	scriptRemove  = `[ -e "$1" ] || [ -L "$1" ] || exit 3; if [ -d "$1" ] && [ ! -L "$1" ]; then rmdir -- "$1" 2>/dev/null || exit 5; else rm -f -- "$1"; fi`
	scriptRemoveR = `[ -e "$1" ] || [ -L "$1" ] || exit 3; rm -rf -- "$1"`
	scriptUnpack  = `mkdir -p -- "$1" && tar -x --no-same-owner --no-same-permissions --no-overwrite-dir -C "$1" -f -`
)

// run runs script in the sandbox with args; it maps the scripts' exit
// codes to the package's errors.
func (s *Sandboxed) run(ctx context.Context, rel, script string, stdin io.Reader, args ...string) error {
	var errOut bytes.Buffer
	cmd := sandbox.Cmd{
		Args:    append([]string{"/bin/sh", "-c", script, "sh"}, args...),
		Dir:     s.Dir,
		Stdin:   stdin,
		Stderr:  &sandbox.LimitedWriter{W: &errOut, N: 4 << 10},
		Timeout: sandboxTimeout,
	}
	p, err := s.Sandbox.Start(ctx, cmd)
	if errors.Is(err, sandbox.ErrClosed) {
		return fmt.Errorf("%w: it closed meanwhile; try again", ErrSandboxLive)
	}
	if err != nil {
		return fmt.Errorf("files: start in the sandbox: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = p.Signal(syscall.SIGKILL) })
	ex, err := p.Wait()
	stop()
	switch {
	case err != nil:
		return fmt.Errorf("files: in the sandbox: %w", err)
	case ctx.Err() != nil:
		return ctx.Err()
	case ex.Reason != "":
		return fmt.Errorf("files: %s: stopped by the sandbox: %s: %s", rel, ex.Reason, ex.Message)
	}
	switch ex.Code {
	case 0:
		return nil
	case exitNotFound:
		return fmt.Errorf("%w: %s (in the session's sandbox)", ErrNotFound, rel)
	case exitConflict:
		return fmt.Errorf("%w: %s (in the session's sandbox)", ErrConflict, rel)
	case exitExists:
		return fmt.Errorf("%w: %s (in the session's sandbox)", ErrExists, rel)
	case exitSpecial:
		return fmt.Errorf("%w: %s (in the session's sandbox)", ErrNotRegular, rel)
	}
	return fmt.Errorf("files: %s: in the session's sandbox: exit %d: %s", rel, ex.Code, strings.TrimSpace(errOut.String()))
}

// sandboxEntry describes what a change made in the sandbox: as the view
// shows it when there is one; otherwise as made (the host tree shows it
// only after the sandbox's next commit).
func (w *Workspace) sandboxEntry(ctx context.Context, rel, typ string, size int64) Entry {
	if w.view {
		if e, err := w.Stat(ctx, rel); err == nil {
			return e
		}
	}
	mode := fs.FileMode(0o644)
	if typ == "dir" {
		mode = 0o755
	}
	return Entry{Path: rel, Name: path.Base(rel), Type: typ, Size: size, Mode: mode, ModTime: time.Now()}
}

// cleanArchive reads the tar stream r whole, its entries judged by
// walkArchive as Unpack's are, and writes again only what passed: names
// clean, modes the permission bits, no owner.
func (w *Workspace) cleanArchive(ctx context.Context, dest string, r io.Reader) ([]byte, error) {
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	err := w.walkArchive(ctx, dest, r, func(h *tar.Header, e stagedEntry, content io.Reader) error {
		nh := &tar.Header{Name: e.name, Mode: int64(e.mode), ModTime: h.ModTime, Format: tar.FormatPAX}
		switch h.Typeflag {
		case tar.TypeDir:
			nh.Typeflag, nh.Name = tar.TypeDir, e.name+"/"
		case tar.TypeSymlink:
			nh.Typeflag, nh.Linkname = tar.TypeSymlink, h.Linkname
		default:
			nh.Typeflag, nh.Size = tar.TypeReg, h.Size
		}
		if err := tw.WriteHeader(nh); err != nil {
			return err
		}
		if nh.Typeflag == tar.TypeReg {
			if n, err := io.Copy(tw, io.LimitReader(content, h.Size)); err != nil || n != h.Size {
				return fmt.Errorf("%w: %s ends early", ErrBadArchive, e.name)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

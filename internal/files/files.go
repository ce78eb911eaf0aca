// Package files serves the files of a session's workspace to the API:
// listing, stat, ranged reads, writes, mkdir, move, delete, tar upload and
// download, and change notifications. Every operation is confined to the
// workspace by an os.Root (no ".." or symlink leaves it, whoever swaps
// entries meanwhile), bounded (Limits), refuses devices, fifos and
// sockets, and every change is judged first by the sandbox commit's own
// rules (workspace.Gate): what a commit would drop, the API refuses.
package files

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/errkind"
)

// Errors, each of an errkind kind; the HTTP layer gives each a problem type.
var (
	// ErrOutside: the path leaves the workspace (absolute, "..", or a
	// symlink on the way that points out of it).
	ErrOutside = errkind.New(errkind.Invalid, "path outside the workspace")
	// ErrNotFound: no file or directory at the path.
	ErrNotFound = errkind.New(errkind.NotFound, "no such file or directory")
	// ErrNotRegular: a device, fifo or socket, or a directory where a
	// regular file is needed.
	ErrNotRegular = errkind.New(errkind.Invalid, "not a regular file")
	// ErrTooLarge: past one of the Limits.
	ErrTooLarge = errkind.New(errkind.Invalid, "too large")
	// ErrProtected: the sandbox commit would drop this change.
	ErrProtected = errkind.New(errkind.Policy, "protected path")
	// ErrExists: the target exists and the operation does not replace it.
	ErrExists = errkind.New(errkind.Conflict, "already exists")
	// ErrConflict: the target is of the wrong kind (not a directory, not
	// empty).
	ErrConflict = errkind.New(errkind.Conflict, "conflicting file type")
	// ErrBadArchive: the tar stream is malformed or has a forbidden entry.
	ErrBadArchive = errkind.New(errkind.Invalid, "invalid archive")
	// ErrSandboxLive: a change to a session whose sandbox runs (see
	// docs/ARCHITECTURE.md, "Workspace files").
	ErrSandboxLive = errkind.New(errkind.Conflict, "the session's sandbox is live")
)

// Limits bound what one request may read, write or list. Zero fields take
// the defaults.
type Limits struct {
	MaxFileBytes      int64 // a read's length, a write's size (16 MiB)
	MaxArchiveBytes   int64 // regular file bytes in a tar, up or down (64 MiB)
	MaxArchiveEntries int   // entries in a tar, up or down (10 000)
	MaxListEntries    int   // entries of one listing (10 000)
	MaxDepth          int   // listing depth and archive nesting (64)
	MaxWatchDirs      int   // directories one watch follows (1024)
}

// Default limits.
const (
	DefaultMaxFileBytes      = 16 << 20
	DefaultMaxArchiveBytes   = 64 << 20
	DefaultMaxArchiveEntries = 10_000
	DefaultMaxListEntries    = 10_000
	DefaultMaxDepth          = 64
	DefaultMaxWatchDirs      = 1024
)

func (l Limits) withDefaults() Limits {
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = DefaultMaxFileBytes
	}
	if l.MaxArchiveBytes <= 0 {
		l.MaxArchiveBytes = DefaultMaxArchiveBytes
	}
	if l.MaxArchiveEntries <= 0 {
		l.MaxArchiveEntries = DefaultMaxArchiveEntries
	}
	if l.MaxListEntries <= 0 {
		l.MaxListEntries = DefaultMaxListEntries
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxWatchDirs <= 0 {
		l.MaxWatchDirs = DefaultMaxWatchDirs
	}
	return l
}

// Entry describes one file, directory or symlink.
type Entry struct {
	Path    string // slash-separated, relative to the workspace; "." is the root
	Name    string
	Type    string // "file", "dir", "symlink" or "other" (device, fifo, socket)
	Size    int64
	Mode    fs.FileMode // permission bits only
	ModTime time.Time
}

func entryOf(rel string, fi fs.FileInfo) Entry {
	e := Entry{Path: rel, Name: path.Base(rel), Size: fi.Size(), Mode: fi.Mode().Perm(), ModTime: fi.ModTime()}
	switch m := fi.Mode(); {
	case m.IsRegular():
		e.Type = "file"
	case m.IsDir():
		e.Type, e.Size = "dir", 0
	case m&fs.ModeSymlink != 0:
		e.Type = "symlink"
	default:
		e.Type = "other"
	}
	if rel == "." {
		e.Name = "."
	}
	return e
}

// maxPathBytes and maxNameBytes bound a path and each of its components.
const (
	maxPathBytes = 4096
	maxNameBytes = 255
)

// CleanPath checks p, a path as a client gives it (slash-separated,
// relative to the workspace; "" and "." are the root), and returns it in
// the form the package uses. It refuses, with ErrOutside, absolute paths
// and any ".." component, and with ErrBadPath what is not a clean path
// (empty components, ".", NUL, invalid UTF-8, over-long): a path is never
// silently reinterpreted.
func CleanPath(p string) (string, error) {
	if p == "" || p == "." {
		return ".", nil
	}
	if len(p) > maxPathBytes {
		return "", fmt.Errorf("%w: path longer than %d bytes", ErrTooLarge, maxPathBytes)
	}
	if strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`) {
		return "", fmt.Errorf("%w: %q is absolute", ErrOutside, p)
	}
	if !utf8.ValidString(p) || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: %q is not a valid path", ErrBadPath, p)
	}
	for seg := range strings.SplitSeq(p, "/") {
		switch {
		case seg == "..":
			return "", fmt.Errorf("%w: %q has a \"..\" component", ErrOutside, p)
		case seg == "" || seg == ".":
			return "", fmt.Errorf("%w: %q is not clean (empty or \".\" component)", ErrBadPath, p)
		case len(seg) > maxNameBytes:
			return "", fmt.Errorf("%w: a component of %q is longer than %d bytes", ErrBadPath, p, maxNameBytes)
		}
	}
	return p, nil
}

// ErrBadPath: the path is malformed (not clean, NUL, invalid UTF-8).
var ErrBadPath = errkind.New(errkind.Invalid, "invalid path")

// mapErr turns the errors of os.Root into the package's.
func mapErr(rel string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case isEscape(err):
		return fmt.Errorf("%w: %s", ErrOutside, rel)
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("%w: %s: %s", ErrConflict, rel, errno(err))
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %s", ErrNotFound, rel)
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("%w: %s", ErrExists, rel)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%w: %s: too many symbolic links", ErrOutside, rel)
	}
	return fmt.Errorf("files: %s: %w", rel, err)
}

func errno(err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en.Error()
	}
	return err.Error()
}

// isEscape reports whether err is os.Root's refusal of a path that leaves
// it. os does not export the error; its text is pinned by
// TestEscapeErrorText.
func isEscape(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

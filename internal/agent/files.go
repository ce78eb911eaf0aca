package agent

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Dir is an adapter's own directory on the host (its agent's homes): Path
// when set, else a fresh directory named Prefix* under TempBase (the
// system's temp dir when "" or not a directory), never a fixed path of a
// shared directory, which another local user could make first and swap
// for a symbolic link. It is made on first use (Make); Made tells where it
// is without making it.
type Dir struct {
	Path, TempBase, Prefix string

	mu   sync.Mutex
	made string
	err  error
}

// Make returns the directory, making it (mode 0700) on the first call.
func (d *Dir) Make() (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.made != "" || d.err != nil {
		return d.made, d.err
	}
	if d.Path != "" {
		if d.err = os.MkdirAll(d.Path, 0o700); d.err == nil {
			d.made = d.Path
		}
		return d.made, d.err
	}
	base := d.TempBase
	if fi, err := os.Stat(base); base != "" && (err != nil || !fi.IsDir()) {
		base = ""
	}
	d.made, d.err = os.MkdirTemp(base, d.Prefix)
	return d.made, d.err
}

// Made returns the directory without making anything: Path, or the
// temporary directory once Make made it; "" when there is none yet.
func (d *Dir) Made() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.Path != "" {
		return d.Path
	}
	return d.made
}

// RemoveSessionDir removes parent/sessionID, a session's own directory (a
// sandboxed session's home: see SandboxNeeder). sessionID must be one path
// element; a missing directory (or parent "": none was ever made) is not
// an error.
func RemoveSessionDir(parent, sessionID string) error {
	if !PlainName(sessionID) {
		return fmt.Errorf("agent: %q is not a session id", sessionID)
	}
	if parent == "" {
		return nil
	}
	dir := filepath.Join(parent, sessionID)
	if err := os.RemoveAll(dir); err == nil || os.Geteuid() == 0 {
		return err
	}
	// The agent may have left directories it cannot write (a non-root
	// daemon then cannot empty them): make them writable, never
	// following a symlink (WalkDir does not), and try again.
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700) // best effort: RemoveAll reports what is left
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// PlainName reports whether name can name a directory of its own below
// another (a session's home, an agent's directory): one path element,
// not "." or "..".
func PlainName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\\\x00")
}

// ReadFileIn reads the file at path when it is inside dir (symbolic links
// may not lead out of it) and holds at most max bytes: the old text of a
// file an agent changes, for the change's diff. ok is false otherwise.
func ReadFileIn(dir, path string, max int64) (text string, ok bool) {
	rel, err := filepath.Rel(dir, path)
	if err != nil || !filepath.IsLocal(rel) {
		return "", false
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", false
	}
	defer root.Close()
	f, err := root.Open(rel)
	if err != nil {
		return "", false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil || int64(len(b)) > max {
		return "", false
	}
	return string(b), true
}

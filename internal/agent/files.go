package agent

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// HomeDir makes an adapter's own directory: dir when it is set, else a new
// one under the temp dir named prefix*. Adapters call it once, on first
// use (sync.OnceValues).
func HomeDir(dir, prefix string) (string, error) {
	if dir != "" {
		return dir, os.MkdirAll(dir, 0o700)
	}
	return os.MkdirTemp("", prefix)
}

// RemoveSessionDir removes parent/sessionID, a session's own directory (a
// sandboxed session's home: see StateRemover). sessionID must be one path
// element; a missing directory is not an error.
func RemoveSessionDir(parent, sessionID string) error {
	if !PlainName(sessionID) {
		return fmt.Errorf("agent: %q is not a session id", sessionID)
	}
	return os.RemoveAll(filepath.Join(parent, sessionID))
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

package daemon

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/client"
)

// localToken returns the token of a daemon started without one, as Jupyter
// and similar local servers do: the token in DATA_DIR/token, made (32
// random bytes, mode 0600) when there is none, and kept across restarts so
// clients keep working. The CLI and client.WithLocalToken read the same
// file (and send it only to a daemon socket of their user or root). A
// token file others can read, or another user owns, is refused.
func localToken(dataDir string) (tok, path string, err error) {
	path = filepath.Join(dataDir, client.TokenFileName)
	tok, err = client.ReadTokenFile(path)
	switch {
	case err == nil:
		return tok, path, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", path, fmt.Errorf("%w (remove it, and the daemon makes a new one)", err)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", path, fmt.Errorf("token: %w", err)
	}
	tok = base64.RawURLEncoding.EncodeToString(b[:])
	// Written aside and linked into place, so that no reader sees a part
	// of it and two daemons starting at once end up with the same one.
	f, err := os.CreateTemp(dataDir, ".token-*") // mode 0600
	if err != nil {
		return "", path, fmt.Errorf("token: %w", err)
	}
	defer func() { _ = os.Remove(f.Name()) }() // linked or not, the temporary name goes
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		return "", path, fmt.Errorf("token: %w", err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return "", path, fmt.Errorf("token: %w", err)
	}
	if err := os.Link(f.Name(), path); errors.Is(err, fs.ErrExist) {
		tok, err = client.ReadTokenFile(path)
		return tok, path, err
	} else if err != nil {
		return "", path, fmt.Errorf("token: %w", err)
	}
	return tok, path, nil
}

package client

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// TokenFileName is the file, in its data directory, where a daemon started
// without a token keeps the one it made (see LocalToken).
const TokenFileName = "token"

// DataDir is the data directory of a daemon started with no --data-dir:
// $AGENTBOX_DATA_DIR if set, else $XDG_DATA_HOME/agentbox (an absolute
// XDG_DATA_HOME only), else $HOME/.local/share/agentbox. getenv reads the
// environment (os.Getenv, or a replacement in tests).
func DataDir(getenv func(string) string) (string, error) {
	if dir := getenv("AGENTBOX_DATA_DIR"); dir != "" {
		return dir, nil
	}
	if dir := getenv("XDG_DATA_HOME"); dir != "" && filepath.IsAbs(dir) {
		return filepath.Join(dir, "agentbox"), nil
	}
	if home := getenv("HOME"); home != "" {
		return filepath.Join(home, ".local", "share", "agentbox"), nil
	}
	return "", errors.New("client: no data directory: set AGENTBOX_DATA_DIR or HOME")
}

// ReadTokenFile reads a daemon's token file. It refuses a file that is not
// a regular file of the current user that only its owner can read or
// write: a token others can read is no secret. A missing file is an error
// satisfying errors.Is(err, fs.ErrNotExist).
func ReadTokenFile(path string) (string, error) {
	f, err := openNoFollow(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("token file %s is not a regular file", path)
	}
	if err := checkPrivate(path, st); err != nil {
		return "", err
	}
	b := make([]byte, 1024)
	n, err := f.Read(b)
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b[:n]))
	if tok == "" || strings.ContainsFunc(tok, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		return "", fmt.Errorf("token file %s does not hold a token", path)
	}
	return tok, nil
}

// LocalToken returns the token of the daemon at baseURL when that daemon
// runs on this machine (see isLocalURL: a loopback address, localhost or a
// unix socket):
// the one in the token file of the data directory getenv names (see
// DataDir), which a daemon started without --token writes. It returns ""
// and no error when baseURL is not local or there is no token file: a
// local token is never sent to another host.
func LocalToken(baseURL string, getenv func(string) string) (string, error) {
	if !isLocalURL(baseURL) {
		return "", nil
	}
	dir, err := DataDir(getenv)
	if err != nil {
		return "", nil
	}
	tok, err := ReadTokenFile(filepath.Join(dir, TokenFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return tok, err
}

// WithLocalToken sends the token LocalToken finds for the client's base
// URL in the environment getenv reads (os.Getenv when nil), if any;
// WithToken wins over it. Such a token is sent only to a daemon whose
// socket belongs to this user or to root, where the system can tell
// (Linux: the peer credentials of a unix socket, the owner of a loopback
// TCP connection's server socket): another local user who takes the
// daemon's port while it is down gets a refused connection, not the
// token. Elsewhere it is sent to whatever listens at the URL.
func WithLocalToken(getenv func(string) string) Option {
	if getenv == nil {
		getenv = os.Getenv
	}
	return func(c *config) { c.localEnv = getenv }
}

// isLocalURL reports whether baseURL names this machine: a unix socket, a
// loopback address, localhost, or the unspecified address (0.0.0.0, ::),
// which a daemon listening on every address logs as its URL and which a
// connection reaches this machine by.
func isLocalURL(baseURL string) bool {
	u, err := url.Parse(baseURL)
	if err != nil {
		return false
	}
	switch u.Scheme {
	case "unix":
		return true
	case "http", "https":
	default:
		return false
	}
	host := u.Hostname()
	if h, _, err := net.SplitHostPort(u.Host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && (ip.Unmap().IsLoopback() || ip.Unmap().IsUnspecified())
}

package client_test

import (
	"errors"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/client"
)

func TestDataDir(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"AGENTBOX_DATA_DIR": "/d", "XDG_DATA_HOME": "/x", "HOME": "/h"}, "/d"},
		{map[string]string{"XDG_DATA_HOME": "/x", "HOME": "/h"}, "/x/agentbox"},
		{map[string]string{"XDG_DATA_HOME": "relative", "HOME": "/h"}, "/h/.local/share/agentbox"},
		{map[string]string{"HOME": "/h"}, "/h/.local/share/agentbox"},
	}
	for _, tt := range tests {
		got, err := client.DataDir(func(k string) string { return tt.env[k] })
		if err != nil || got != tt.want {
			t.Errorf("DataDir(%v) = %q, %v; want %q", tt.env, got, err, tt.want)
		}
	}
	if _, err := client.DataDir(func(string) string { return "" }); err == nil {
		t.Error("DataDir with no environment succeeded")
	}
}

func writeToken(t *testing.T, dir, tok string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, client.TokenFileName)
	if err := os.WriteFile(path, []byte(tok), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadTokenFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writeToken(t, dir, "tok-123\n", 0o600)
	if tok, err := client.ReadTokenFile(good); err != nil || tok != "tok-123" {
		t.Fatalf("ReadTokenFile = %q, %v", tok, err)
	}
	for name, setup := range map[string]func(dir string) string{
		"readable by others": func(dir string) string { return writeToken(t, dir, "tok", 0o644) },
		"writable by group":  func(dir string) string { return writeToken(t, dir, "tok", 0o620) },
		"empty":              func(dir string) string { return writeToken(t, dir, "\n", 0o600) },
		"spaces in it":       func(dir string) string { return writeToken(t, dir, "a b", 0o600) },
		"a symbolic link": func(dir string) string {
			p := filepath.Join(dir, "link")
			if err := os.Symlink(good, p); err != nil {
				t.Fatal(err)
			}
			return p
		},
		"a directory": func(dir string) string { return dir },
	} {
		if tok, err := client.ReadTokenFile(setup(t.TempDir())); err == nil {
			t.Errorf("%s: ReadTokenFile = %q, want an error", name, tok)
		}
	}
	if _, err := client.ReadTokenFile(filepath.Join(dir, "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
}

// TestLocalToken: the token file is read for a daemon on this machine and
// never sent anywhere else.
func TestLocalToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeToken(t, dir, "local-tok", 0o600)
	env := func(k string) string {
		if k == "AGENTBOX_DATA_DIR" {
			return dir
		}
		return ""
	}
	for url, want := range map[string]string{
		"http://127.0.0.1:7777":        "local-tok",
		"http://localhost:7777":        "local-tok",
		"http://[::1]:7777":            "local-tok",
		"http://127.8.9.1":             "local-tok",
		"http://0.0.0.0:7777":          "local-tok", // a wildcard listener's own URL
		"http://[::]:7777":             "local-tok",
		"unix:///run/agentbox.sock":    "local-tok",
		"https://agentbox.example.com": "",
		"http://10.0.0.5:7777":         "",
		"http://localhost.example:1":   "",
		"http://127.0.0.1.nip.io:7777": "",
	} {
		if got, err := client.LocalToken(url, env); err != nil || got != want {
			t.Errorf("LocalToken(%s) = %q, %v; want %q", url, got, err, want)
		}
	}
	if got, err := client.LocalToken("http://127.0.0.1:1", func(string) string { return "/nonexistent" }); got != "" || err != nil {
		t.Errorf("no token file: %q, %v", got, err)
	}
}

// tokenEnv is an environment naming dir as the data directory.
func tokenEnv(dir string) func(string) string {
	return func(k string) string {
		if k == "AGENTBOX_DATA_DIR" {
			return dir
		}
		return ""
	}
}

// authServer serves health on ln and records the Authorization header of
// every request it gets.
type authServer struct {
	mu   sync.Mutex
	seen []string
	srv  *http.Server
}

func serveAuth(t *testing.T, ln net.Listener) *authServer {
	t.Helper()
	a := &authServer{}
	a.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen = append(a.seen, r.Header.Get("Authorization"))
		a.mu.Unlock()
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = a.srv.Close()
		<-done
	})
	return a
}

func (a *authServer) last() (string, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.seen) == 0 {
		return "", 0
	}
	return a.seen[len(a.seen)-1], len(a.seen)
}

func TestWithLocalToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeToken(t, dir, "from-file", 0o600)
	env := tokenEnv(dir)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "d.sock")
	unix, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	for url, srv := range map[string]*authServer{"http://" + tcp.Addr().String(): serveAuth(t, tcp), "unix://" + sock: serveAuth(t, unix)} {
		for _, tt := range []struct {
			opts []client.Option
			want string
		}{
			{[]client.Option{client.WithLocalToken(env)}, "Bearer from-file"},
			{[]client.Option{client.WithLocalToken(env), client.WithToken("given")}, "Bearer given"},
			{nil, ""},
		} {
			c, err := client.New(url, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Health(t.Context()); err != nil {
				t.Fatalf("%s: %v", url, err)
			}
			if got, _ := srv.last(); got != tt.want {
				t.Errorf("%s: Authorization %q, want %q", url, got, tt.want)
			}
			c.CloseIdleConnections()
		}
	}
}

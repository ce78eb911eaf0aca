// Package sdktest runs the real agentbox daemon for the tests of the
// clients in other languages (internal/sdkgen/typescript, .../python):
// the binary built once per test binary, `agentbox serve` on a fresh data
// directory and a free loopback port (or a unix socket), its address and
// token.
package sdktest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

var (
	buildOnce sync.Once
	binDir    string
	binErr    error
)

// Binary builds the agentbox binary once for the test binary's tests and
// returns its path. The caller's TestMain calls RemoveBinary.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "agentbox-sdktest-"); binErr != nil {
			return
		}
		// Not bound to the test that asked first: the binary serves
		// every test of the package.
		cmd := exec.CommandContext(context.Background(), "go", "build", "-o", filepath.Join(binDir, "agentbox"), "github.com/agentbox/agentbox/cmd/agentbox")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("building agentbox: %w\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return filepath.Join(binDir, "agentbox")
}

// RemoveBinary removes what Binary built.
func RemoveBinary() {
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}

// Daemon is a running `agentbox serve`.
type Daemon struct {
	URL, Token, DataDir string
}

// Start starts `agentbox serve` (bin, with the extra flags args) on a
// fresh data directory and a free loopback port, with env added to its
// environment, waits until it answers and reads the token it wrote. It is
// killed at the end of the test, its log shown if the test failed.
func Start(t testing.TB, bin string, args []string, env ...string) Daemon {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return start(t, bin, addr, "http://"+addr, args, env)
}

// StartUnix is Start with the daemon listening on a unix socket in a fresh
// directory; its URL is unix:///…/agentbox.sock.
func StartUnix(t testing.TB, bin string, args []string, env ...string) Daemon {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agentbox.sock")
	return start(t, bin, "unix:"+sock, "unix://"+sock, args, env)
}

// start runs the daemon listening on listen (a --listen value), which
// clients reach at url.
func start(t testing.TB, bin, listen, url string, args, env []string) Daemon {
	t.Helper()
	dataDir := t.TempDir()
	logs := &lockedBuffer{}
	// Detached from the test's context on purpose: the cleanup below
	// kills it, after the test's own cleanups have used it.
	cmd := exec.CommandContext(context.Background(), bin, append([]string{"serve", "--listen", listen, "--data-dir", dataDir}, args...)...)
	cmd.Env = append([]string{"HOME=" + dataDir, "PATH=/usr/bin:/bin"}, env...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs.String())
		}
	})
	c, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	// Generous: the machine may be loaded by other test packages.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.Health(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not healthy after 60s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	tok, err := client.ReadTokenFile(filepath.Join(dataDir, client.TokenFileName))
	if err != nil {
		t.Fatalf("the daemon's token: %v", err)
	}
	return Daemon{URL: url, Token: tok, DataDir: dataDir}
}

// lockedBuffer is the daemon's log: its stdout and stderr are copied into
// it concurrently.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

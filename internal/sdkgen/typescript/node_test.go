package typescript

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// TestNodeSDK runs the SDK's own tests (node --test) against the real
// daemon binary, started here with the mock agent, its address and token
// in AGENTBOX_URL and AGENTBOX_TOKEN.
func TestNodeSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon: not in -short")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed (scripts/setup installs it): cannot run the TypeScript SDK's tests")
	}
	bin := buildDaemon(t)
	url, token := startDaemon(t, bin)

	sdk, err := filepath.Abs(sdkDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=tap", "test/")
	cmd.Dir = sdk
	cmd.Env = append(os.Environ(), "AGENTBOX_URL="+url, "AGENTBOX_TOKEN="+token, "NODE_OPTIONS=")
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("node --test: %v", err)
	}
	// Every test ran: none but the files step may skip, and only when the
	// daemon has no files API.
	if !bytes.Contains(out, []byte("\n# pass ")) || bytes.Contains(out, []byte("AGENTBOX_URL is not set")) {
		t.Fatalf("the daemon tests did not run")
	}
}

// buildDaemon builds the agentbox binary into a temporary directory.
func buildDaemon(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agentbox")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "../../../cmd/agentbox")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building agentbox: %v\n%s", err, out)
	}
	return bin
}

// startDaemon starts `agentbox serve` on a fresh data directory and a free
// loopback port, waits until it answers, and returns its URL and the token
// it wrote to its data directory.
func startDaemon(t *testing.T, bin string) (url, token string) {
	t.Helper()
	dataDir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	url = "http://" + addr

	logs := &lockedBuffer{}
	cmd := exec.Command(bin, "serve", "--listen", addr, "--data-dir", dataDir)
	cmd.Env = []string{"HOME=" + dataDir, "PATH=/usr/bin:/bin"}
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
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		_, err := c.Health(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not healthy: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	token, err = client.ReadTokenFile(filepath.Join(dataDir, client.TokenFileName))
	if err != nil {
		t.Fatal(err)
	}
	return url, token
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

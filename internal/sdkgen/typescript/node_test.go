package typescript

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// TestNodeSDK runs the SDK's own tests (node --test) against the real
// daemon binary, started here with the mock agent, its address and token
// in AGENTBOX_URL and AGENTBOX_TOKEN.
func TestNodeSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon: not in -short")
	}
	node := requireNode(t)
	url, token := startDaemon(t, buildDaemon(t))
	out := runNode(t, node, "", "AGENTBOX_URL="+url, "AGENTBOX_TOKEN="+token)
	// Every test ran: none but the claude one (TestNodeSDKClaude's) may
	// skip.
	if bytes.Contains(out, []byte("AGENTBOX_URL is not set")) {
		t.Fatalf("the daemon tests did not run")
	}
	if m := regexp.MustCompile(`(?m)^# skipped (\d+)$`).FindSubmatch(out); m == nil || string(m[1]) != "1" {
		t.Fatalf("node --test skipped %q tests, want 1 (the claude one)", m)
	}
}

// requireNode returns the node binary, skipping without one.
func requireNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed (scripts/setup installs it): cannot run the TypeScript SDK's tests")
	}
	return node
}

// runNode runs the SDK's tests (those whose name matches pattern, when
// set) with env added, failing when any fails, and returns their TAP output.
func runNode(t *testing.T, node, pattern string, env ...string) []byte {
	t.Helper()
	sdk, err := filepath.Abs(sdkDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	args := []string{"--test", "--test-reporter=tap"}
	if pattern != "" {
		args = append(args, "--test-name-pattern="+pattern)
	}
	cmd := exec.CommandContext(ctx, node, append(args, "test/")...)
	cmd.Dir = sdk
	cmd.Env = append(append(os.Environ(), "NODE_OPTIONS="), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("node --test: %v", err)
	}
	return out
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
// loopback port, with env added to its environment, waits until it
// answers, and returns its URL and the token it wrote to its data
// directory.
func startDaemon(t *testing.T, bin string, env ...string) (url, token string) {
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

// TestNodeSDKClaude runs the SDK's claude test: the real Claude Code CLI
// (from the agent cache, which scripts/test fills) under the real daemon,
// against internal/fakellm's permission scenario.
func TestNodeSDKClaude(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon and claude: not in -short")
	}
	in := agenttest.RequireInstalled(t, "claude")
	t.Logf("claude %s", in.Version)
	node := requireNode(t)
	llm, err := fakellm.Start(t.Context(), fakellm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = llm.Close() })
	// The daemon finds the CLI in the same cache: DIR/agents/….
	cache := filepath.Dir(in.Binary)
	for filepath.Base(cache) != "agents" && cache != "/" {
		cache = filepath.Dir(cache)
	}
	url, token := startDaemon(t, buildDaemon(t), "AGENTBOX_CACHE_DIR="+filepath.Dir(cache))
	out := runNode(t, node, "claude:", "AGENTBOX_URL="+url, "AGENTBOX_TOKEN="+token,
		"AGENTBOX_FAKELLM_URL="+llm.ScenarioURL(fakellm.ScenarioPermission))
	if !regexp.MustCompile(`(?m)^ok \d+ - claude: [^#\n]*$`).Match(out) {
		t.Fatal("the claude test did not run")
	}
}

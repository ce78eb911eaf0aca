package python

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// python is Debian's interpreter, with python3-httpx and python3-pytest
// (scripts/setup installs them); a python3 earlier on PATH may be another
// one without them.
const python = "/usr/bin/python3"

// proxyHost is where the tests' proxy, which cuts connections, listens.
const proxyHost = "127.0.0.2"

// TestPythonSDK runs the Python SDK's pytest suite (sdks/python/tests)
// against the real daemon binary with its mock agent: the sync and async
// clients' flow, resume after a cut, problem+json errors, the local token.
func TestPythonSDK(t *testing.T) {
	requirePython(t)
	d := startDaemon(t, daemonBinary(t))
	runPytest(t, d, nil, "--ignore", "tests/test_claude.py", "tests")
}

// TestPythonSDKClaude runs the same flow with the real Claude Code CLI
// (from the agent cache, as make test installs it) against the fake LLM:
// its Write tool asks for permission, the client allows it, the file is
// read back.
func TestPythonSDKClaude(t *testing.T) {
	requirePython(t)
	in := agenttest.RequireInstalled(t, "claude")
	t.Logf("claude %s", in.Version)
	llm, err := fakellm.Start(t.Context(), fakellm.Options{Default: fakellm.ScenarioWrite})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { llm.Close() })
	// The daemon finds the CLI in the same cache: DIR/agents/….
	cache := filepath.Dir(in.Binary)
	for filepath.Base(cache) != "agents" && cache != "/" {
		cache = filepath.Dir(cache)
	}
	d := startDaemon(t, daemonBinary(t), "AGENTBOX_CACHE_DIR="+filepath.Dir(cache))
	runPytest(t, d, []string{
		"AGENTBOX_TEST_LLM_URL=" + llm.ScenarioURL(fakellm.ScenarioWrite),
		"AGENTBOX_TEST_LLM_KEY=" + agenttest.FakeKey,
	}, "tests/test_claude.py")
}

func requirePython(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the daemon runs on Linux only")
	}
	if out, err := exec.Command(python, "-c", "import httpx, pytest").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import httpx and pytest (run scripts/setup: apt-get install python3-httpx python3-pytest): %v\n%s", python, err, out)
	}
}

// runPytest runs pytest in sdks/python with the daemon's address, token
// and data directory (and env) in its environment, and fails on a failed
// test or on any skip but, when not root, the tests that need root.
func runPytest(t *testing.T, d daemon, env []string, args ...string) {
	t.Helper()
	sdk, err := filepath.Abs(sdkDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, append([]string{"-m", "pytest", "-p", "no:cacheprovider", "-v", "-rs"}, args...)...)
	cmd.Dir = sdk
	cmd.Env = append(os.Environ(),
		"PYTHONPATH="+sdk,
		"PYTHONDONTWRITEBYTECODE=1",
		"AGENTBOX_URL="+d.url,
		"AGENTBOX_TOKEN="+d.token,
		"AGENTBOX_TEST_DATA_DIR="+d.dataDir,
		"AGENTBOX_TEST_PROXY_HOST="+proxyHost,
	)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if err != nil {
		t.Fatalf("pytest: %v", err)
	}
	for _, line := range regexp.MustCompile(`(?m)^SKIPPED .*$`).FindAllString(string(out), -1) {
		if os.Geteuid() == 0 || !strings.Contains(line, "needs root") {
			t.Errorf("unexpected skip: %s", line)
		}
	}
	if !regexp.MustCompile(`(?m)^=+ .*\d+ passed`).Match(out) {
		t.Errorf("pytest reported no passed tests")
	}
}

var (
	buildOnce sync.Once
	binDir    string
	binErr    error
)

// TestMain removes the daemon binary the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// daemonBinary builds the agentbox binary once for the package's tests.
func daemonBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "agentbox-sdkgen-python-")
		if binErr == nil {
			binErr = buildDaemon(filepath.Join(binDir, "agentbox"))
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return filepath.Join(binDir, "agentbox")
}

// buildDaemon builds the agentbox binary into bin.
func buildDaemon(bin string) error {
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/agentbox")
	cmd.Dir = filepath.Join("..", "..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building agentbox: %w\n%s", err, out)
	}
	return nil
}

type daemon struct {
	url, token, dataDir string
}

// lockedBuffer collects the daemon's output from its two streams.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startDaemon starts `agentbox serve` on a fresh data directory and a free
// loopback port, with env added to its environment, and waits until it
// answers; it is killed at the end of the test.
func startDaemon(t *testing.T, bin string, env ...string) daemon {
	t.Helper()
	dataDir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	logs := &lockedBuffer{}
	// The tests' cutting proxy listens on proxyHost, a loopback address the
	// daemon must answer by at the proxy's port.
	cmd := exec.Command(bin, "serve", "--listen", addr, "--data-dir", dataDir, "--allowed-hosts", proxyHost)
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
	url := "http://" + addr
	c, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		_, err := c.Health(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not healthy after 60s: %v\n%s", err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	tok, err := client.ReadTokenFile(filepath.Join(dataDir, client.TokenFileName))
	if err != nil {
		t.Fatal(fmt.Errorf("the daemon's token: %w", err))
	}
	return daemon{url: url, token: tok, dataDir: dataDir}
}

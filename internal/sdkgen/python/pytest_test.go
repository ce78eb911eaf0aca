package python

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/fakellm"
	"github.com/agentbox/agentbox/internal/sdkgen/sdktest"
)

// python is Debian's interpreter, with python3-httpx and python3-pytest
// (scripts/setup installs them); a python3 earlier on PATH may be another
// one without them.
const python = "/usr/bin/python3"

// proxyHost is where the tests' proxy, which cuts connections, listens.
const proxyHost = "127.0.0.2"

// daemonArgs: the tests' cutting proxy listens on proxyHost, a loopback
// address the daemon must answer by at the proxy's port.
var daemonArgs = []string{"--allowed-hosts", proxyHost}

// TestPythonSDK runs the Python SDK's pytest suite (sdks/python/tests)
// against the real daemon binary with its mock agent: the sync and async
// clients' flow, resume after a cut, problem+json errors, the local token.
func TestPythonSDK(t *testing.T) {
	requirePython(t)
	d := sdktest.Start(t, sdktest.Binary(t), daemonArgs)
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
	d := sdktest.Start(t, sdktest.Binary(t), daemonArgs, "AGENTBOX_CACHE_DIR="+filepath.Dir(cache))
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
func runPytest(t *testing.T, d sdktest.Daemon, env []string, args ...string) {
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
		"AGENTBOX_URL="+d.URL,
		"AGENTBOX_TOKEN="+d.Token,
		"AGENTBOX_TEST_DATA_DIR="+d.DataDir,
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

// TestMain removes the daemon binary the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	sdktest.RemoveBinary()
	os.Exit(code)
}

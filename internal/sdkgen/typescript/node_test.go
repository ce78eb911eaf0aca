package typescript

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/fakellm"
	"github.com/agentbox/agentbox/internal/sdkgen/sdktest"
)

// TestNodeSDK runs the SDK's own tests (node --test) against the real
// daemon binary, started here with the mock agent, its address and token
// in AGENTBOX_URL and AGENTBOX_TOKEN.
func TestNodeSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon: not in -short")
	}
	node := requireNode(t)
	d := sdktest.Start(t, sdktest.Binary(t), nil)
	out := runNode(t, node, "", "AGENTBOX_URL="+d.URL, "AGENTBOX_TOKEN="+d.Token)
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

// TestMain removes the daemon binary the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	sdktest.RemoveBinary()
	os.Exit(code)
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
	d := sdktest.Start(t, sdktest.Binary(t), nil, "AGENTBOX_CACHE_DIR="+filepath.Dir(cache))
	out := runNode(t, node, "claude:", "AGENTBOX_URL="+d.URL, "AGENTBOX_TOKEN="+d.Token,
		"AGENTBOX_FAKELLM_URL="+llm.ScenarioURL(fakellm.ScenarioPermission))
	if !regexp.MustCompile(`(?m)^ok \d+ - claude: [^#\n]*$`).Match(out) {
		t.Fatal("the claude test did not run")
	}
}

// TestNodeSDKUnix runs the SDK's tests again against a daemon listening on
// a unix socket, with no AGENTBOX_TOKEN: every request and event stream
// goes over the socket, with the token the client reads from the daemon's
// data directory (AGENTBOX_DATA_DIR).
func TestNodeSDKUnix(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon: not in -short")
	}
	node := requireNode(t)
	d := sdktest.StartUnix(t, sdktest.Binary(t), nil)
	out := runNode(t, node, "", "AGENTBOX_URL="+d.URL, "AGENTBOX_TOKEN=", "AGENTBOX_DATA_DIR="+d.DataDir)
	if !regexp.MustCompile(`(?m)^ok \d+ - flow: create a session`).Match(out) {
		t.Fatalf("the flow did not run over the unix socket")
	}
	if m := regexp.MustCompile(`(?m)^# skipped (\d+)$`).FindSubmatch(out); m == nil || string(m[1]) != "1" {
		t.Fatalf("node --test skipped %q tests, want 1 (the claude one)", m)
	}
}

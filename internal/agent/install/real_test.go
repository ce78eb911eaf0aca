package install_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/install"
)

// TestRealClaude installs the real, pinned Claude Code from the npm registry.
//
// With AGENTBOX_TEST_NPM=1, or in CI (CI=true), it installs into a fresh
// temporary cache, so the whole path (npm, postinstall, verification,
// manifest, rename) runs every time. Otherwise it goes through the normal
// cache, which scripts/test has already filled, so it checks what the
// adapters will use and costs nothing. It never skips: without npm and
// without a cached install it fails and says what to install.
func TestRealClaude(t *testing.T) {
	fresh := os.Getenv("AGENTBOX_TEST_NPM") == "1" || os.Getenv("CI") == "true"
	if fresh {
		t.Setenv(install.EnvCacheDir, t.TempDir())
	}
	if _, ok, err := install.Lookup("claude"); err != nil {
		t.Fatal(err)
	} else if !ok {
		if _, err := exec.LookPath("npm"); err != nil {
			t.Fatal("npm is not installed, and this test needs it to install Claude Code from the npm registry: " +
				"run scripts/setup (as root it runs apt-get install nodejs npm)")
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	got, err := install.Ensure(ctx, "claude", t.Output())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("claude %s at %s in %v (fresh cache: %v)", got.Version, got.Binary, time.Since(start).Round(time.Millisecond), fresh)
	if got.Name != "claude" || got.Package != "@anthropic-ai/claude-code" || got.Version != "2.1.332" ||
		!strings.HasSuffix(got.Binary, "/claude@2.1.332/node_modules/.bin/claude") || !strings.HasPrefix(got.Binary, got.Dir+"/") {
		t.Errorf("installed %+v", got)
	}
	if !strings.Contains(got.VerifiedOutput, "2.1.332") {
		t.Errorf("verified output %q", got.VerifiedOutput)
	}

	// The binary runs on its own (it is native: no node on PATH).
	vctx, vcancel := context.WithTimeout(ctx, time.Minute)
	defer vcancel()
	cmd := exec.CommandContext(vctx, got.Binary, "--version")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "DISABLE_AUTOUPDATER=1"}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "2.1.332 (Claude Code)") {
		t.Errorf("claude --version: %v: %q", err, out)
	}

	// Now cached: found without npm (none on PATH), quickly.
	t.Setenv("PATH", "/nonexistent")
	start = time.Now()
	again, err := install.Ensure(ctx, "claude", t.Output())
	if err != nil || again != got {
		t.Fatalf("second Ensure: %+v, %v", again, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the cached Ensure took %v", d)
	}
	if ok, version, path := install.Status("claude"); !ok || version != "2.1.332" || path != got.Binary {
		t.Errorf("Status: %v %q %q", ok, version, path)
	}
}

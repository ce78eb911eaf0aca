package typescript

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// tscVersion is the TypeScript compiler that checks the SDK's declarations;
// scripts/test installs it (pinned, from npm) into the cache.
const tscVersion = "5.9.3"

// tscPath returns where scripts/test installs tsc: under
// $AGENTBOX_CACHE_DIR, else $XDG_CACHE_HOME/agentbox, else
// ~/.cache/agentbox, as the agent CLIs.
func tscPath() string {
	dir := os.Getenv("AGENTBOX_CACHE_DIR")
	if dir == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if !filepath.IsAbs(base) {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(base, "agentbox")
	}
	return filepath.Join(dir, "typescript", tscVersion, "node_modules", "typescript", "bin", "tsc")
}

// TestTypes type-checks the SDK's declarations, generated and hand-written,
// and test/types.check.ts (the README's flow, and what the types must
// refuse) with tsc in strict mode.
func TestTypes(t *testing.T) {
	tsc := tscPath()
	if _, err := os.Stat(tsc); err != nil {
		t.Skipf("TypeScript %s is not installed at %s (scripts/test installs it): the declarations are not type-checked", tscVersion, tsc)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed (scripts/setup installs it)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, tsc, "-p", sdkDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tsc -p %s: %v\n%s", sdkDir, err, out)
	}
}

package codex

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHomeUnderTempIsUnavailable: codex cannot create its sandbox helper
// under the temp dir, so the adapter says so instead of failing every turn.
func TestHomeUnderTempIsUnavailable(t *testing.T) {
	bin := func() (string, string, error) { return "/bin/true", "0.171.0", nil }
	for _, tc := range []struct {
		home      string
		available bool
	}{
		{filepath.Join(os.TempDir(), "x", "codex-home"), false},
		{os.TempDir(), false},
		{"/var/lib/agentbox/agents/codex/home", true},
		{os.TempDir() + "-not-really", true},
	} {
		info := New(Options{Binary: bin, Home: tc.home}).Info(context.Background())
		if info.Available != tc.available {
			t.Errorf("home %s: available %v (%s), want %v", tc.home, info.Available, info.Reason, tc.available)
		}
		if !tc.available && !strings.Contains(info.Reason, "--data-dir") {
			t.Errorf("home %s: reason %q does not say what to do", tc.home, info.Reason)
		}
	}
}

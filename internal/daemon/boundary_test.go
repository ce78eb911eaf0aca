package daemon_test

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/daemon"
)

// TestBoundaryOnlyInABoundary: the boundary mode (serve --boundary, which
// no API request can set) is refused by a daemon that is not inside a
// provider's container, so a local daemon's clients never get its
// unsandboxed runtime; an unknown boundary is refused by name.
func TestBoundaryOnlyInABoundary(t *testing.T) {
	for _, tc := range []struct{ boundary, want string }{
		{"container", "--boundary container:"},
		{"vm", `--boundary "vm": want "container"`},
	} {
		d, err := daemon.New(t.Context(), daemon.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), InsecureNoAuth: true, Boundary: tc.boundary})
		if err == nil {
			_ = d.Shutdown(t.Context())
			t.Fatalf("--boundary %s: a daemon outside a container started", tc.boundary)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("--boundary %s: %v; want %q", tc.boundary, err, tc.want)
		}
	}
}

package process

import (
	"os"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox/sandboxtest"
)

// TestEscape runs the shared conformance, escape and resource suite
// against the process runtime. Every expectation is the suite's default:
// the process runtime is the reference the suite is written for.
func TestEscape(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("process sandboxes need root here (uid maps to a host range, cgroups)")
	}
	sandboxtest.Run(t, New(Options{}), sandboxtest.Options{})
}

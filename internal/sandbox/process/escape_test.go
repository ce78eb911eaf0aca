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

// TestEscapeWithSpares runs the same suite, unchanged, against the runtime
// with a spare init (Options.Spares): every sandbox the suite makes with
// its own network namespace comes from a spare when one is parked.
func TestEscapeWithSpares(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("process sandboxes need root here (uid maps to a host range, cgroups)")
	}
	rt := New(Options{Spares: 1})
	t.Cleanup(func() { _ = rt.Close() })
	// After the cases, parallel ones included.
	t.Cleanup(func() {
		if n := rt.spares.handedOut.Load(); n == 0 {
			t.Error("the suite ran without a spare")
		} else {
			t.Logf("%d sandboxes made from spares", n)
		}
	})
	sandboxtest.Run(t, rt, sandboxtest.Options{})
}

// Package reexectest is the one-line TestMain of a test binary that
// re-executes itself as one of the helpers registered with internal/reexec
// (a sandbox's init, the agent-tree supervisor, the probe helpers).
package reexectest

import (
	"os"
	"testing"

	"github.com/agentbox/agentbox/internal/reexec"
)

// Main runs the helper argv names (and exits), or else the tests:
//
//	func TestMain(m *testing.M) { reexectest.Main(m) }
func Main(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

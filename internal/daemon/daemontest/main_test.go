package daemontest_test

import (
	"testing"

	"github.com/agentbox/agentbox/internal/reexec/reexectest"
)

// TestMain lets the test binary be the helpers it re-executes itself as.
func TestMain(m *testing.M) { reexectest.Main(m) }

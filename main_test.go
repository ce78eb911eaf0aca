package agentbox_test

import (
	"os"
	"testing"

	"github.com/agentbox/agentbox"
)

// TestMain does what an embedding program's main must: Init first.
func TestMain(m *testing.M) {
	agentbox.Init()
	os.Exit(m.Run())
}

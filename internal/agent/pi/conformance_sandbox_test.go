package pi_test

// The sandboxed variant of the conformance suite (agenttest.Run) runs on
// the daemon-backed host this import registers; it cannot be imported by
// the package's internal tests, since the daemon imports this package.
import _ "github.com/agentbox/agentbox/internal/daemon/daemontest"

package providertest

import "testing"

// runRelay runs the steps with a host daemon relaying a session to the
// sandbox's inner daemon.
func runRelay(t *testing.T, factory Factory) {
	t.Run("Relay", func(t *testing.T) {
		t.Skip("the host relay is not wired yet")
	})
}

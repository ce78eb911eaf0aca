package daytona_test

import (
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/provider/providertest"
)

// TestConformance runs the providers' conformance suite against the Daytona
// provider and its fake.
func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		f, p := setup(t, 30*time.Second)
		return providertest.Harness{Provider: p, KillInner: f.KillInner}
	})
}

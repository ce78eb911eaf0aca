package vercel_test

import (
	"testing"

	"github.com/agentbox/agentbox/internal/provider/providertest"
	"github.com/agentbox/agentbox/internal/provider/vercel"
	"github.com/agentbox/agentbox/internal/provider/vercel/verceltest"
)

// TestConformance runs the providers' conformance suite against the Vercel
// provider and its fake.
func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		f := verceltest.New(t)
		p, err := vercel.New(config(f))
		if err != nil {
			t.Fatal(err)
		}
		return providertest.Harness{Provider: p, KillInner: f.KillInner}
	})
}

package e2b_test

import (
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/provider/e2b"
	"github.com/agentbox/agentbox/internal/provider/e2b/e2btest"
	"github.com/agentbox/agentbox/internal/provider/providertest"
)

// TestConformance runs the providers' conformance suite against the E2B
// provider and its fake.
func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		f := e2btest.New(t)
		p, err := e2b.New(e2b.Config{APIKey: f.APIKey, APIURL: f.URL(), SandboxURL: f.SandboxURL, RequestTimeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return providertest.Harness{Provider: p, KillInner: f.KillInner}
	})
}

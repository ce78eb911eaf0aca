package daytona_test

import (
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/provider/daytona"
	"github.com/agentbox/agentbox/internal/provider/daytona/daytonatest"
	"github.com/agentbox/agentbox/internal/provider/providertest"
)

// TestConformance runs the providers' conformance suite against the Daytona
// provider and its fake.
func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		f := daytonatest.New(t)
		p, err := daytona.New(daytona.Config{APIKey: f.APIKey, APIURL: f.URL(), RequestTimeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return providertest.Harness{Provider: p, KillInner: f.KillInner}
	})
}

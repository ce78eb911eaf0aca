package localproc_test

import (
	"testing"

	"github.com/agentbox/agentbox/internal/provider/localproc"
	"github.com/agentbox/agentbox/internal/provider/providertest"
)

func TestMain(m *testing.M) { providertest.Main(m) }

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		p := localproc.New(t.TempDir())
		return providertest.Harness{Provider: p, KillInner: p.KillInner}
	})
}

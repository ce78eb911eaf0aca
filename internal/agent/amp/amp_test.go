package amp

import (
	"errors"
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
)

func TestUnavailable(t *testing.T) {
	a := New()
	info := a.Info(t.Context())
	if info.Available || info.Reason == "" || info.Name != Name {
		t.Fatalf("Info = %+v, want an unavailable entry with a reason", info)
	}
	if info.Capabilities != (agent.Capabilities{}) {
		t.Errorf("capabilities %+v, want none claimed", info.Capabilities)
	}
	if _, err := a.Start(t.Context(), agent.Config{}, nil); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Start = %v, want ErrUnsupported", err)
	}
}

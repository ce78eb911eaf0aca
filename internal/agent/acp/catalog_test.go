package acp

import (
	"testing"

	wire "github.com/agentbox/agentbox/internal/acpwire"
)

// TestCatalogFollowsModeUpdates: a mode the agent switches to by itself
// (current_mode_update) is the mode Catalog reports; other updates and
// unreadable ones change nothing.
func TestCatalogFollowsModeUpdates(t *testing.T) {
	s := &session{modes: &wire.SessionModeState{CurrentModeId: "plan", AvailableModes: []wire.SessionMode{{Id: "build", Name: "build"}, {Id: "plan", Name: "plan"}}}}
	for _, tc := range []struct {
		params, want string
	}{
		{`{"sessionId":"s","update":{"sessionUpdate":"current_mode_update","currentModeId":"build"}}`, "build"},
		{`{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}}`, "build"},
		{`{"sessionId":"s","update":{"sessionUpdate":"current_mode_update"}}`, "build"},
		{`not json`, "build"},
		{`{"sessionId":"s","update":{"sessionUpdate":"current_mode_update","currentModeId":"plan"}}`, "plan"},
	} {
		s.noteMode([]byte(tc.params))
		if got := s.Catalog(); got.Mode != tc.want || len(got.Modes) != 2 {
			t.Fatalf("after %s: catalog %+v, want mode %s", tc.params, got, tc.want)
		}
	}
}

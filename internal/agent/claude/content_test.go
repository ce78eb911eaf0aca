package claude

import (
	"errors"
	"testing"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

// TestUserMessageLineRefuses: a binary file that is not a PDF, or a file
// by uri, refuses the message instead of reaching Claude as a mention.
func TestUserMessageLineRefuses(t *testing.T) {
	for _, p := range []event.ContentPart{
		{Type: event.PartFile, Data: "AAEC", MimeType: "application/octet-stream"},
		{Type: event.PartFile, URI: "https://example.com/a.txt"},
	} {
		if _, err := userMessageLine(agent.Input{Content: []event.ContentPart{event.TextPart("look"), p}}, "sid"); !errors.Is(err, agent.ErrUnsupportedContent) {
			t.Errorf("%+v: %v, want ErrUnsupportedContent", p, err)
		}
	}
}

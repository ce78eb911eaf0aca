package pi

import (
	"errors"
	"testing"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

// TestPromptFor: images go as pi's prompt images and text files as their
// text; what pi cannot take (an image by uri, a binary file) refuses the
// message instead of becoming a mention of it.
func TestPromptFor(t *testing.T) {
	cmd, err := promptFor(agent.Input{Content: []event.ContentPart{event.TextPart("look"),
		{Type: event.PartImage, Data: "iVBORw0KGgo="}, {Type: event.PartFile, Data: "aGk=", Path: "a.txt"}}})
	if err != nil || len(cmd.Images) != 1 || cmd.Images[0].Data != "iVBORw0KGgo=" || cmd.Images[0].MimeType != "image/png" ||
		cmd.Message != "look\nAttached file a.txt:\nhi" {
		t.Fatalf("%+v, %v", cmd, err)
	}
	for _, p := range []event.ContentPart{
		{Type: event.PartImage, URI: "https://example.com/a.png"},
		{Type: event.PartFile, Data: "AAEC"},
	} {
		if _, err := promptFor(agent.Input{Content: []event.ContentPart{event.TextPart("look"), p}}); !errors.Is(err, agent.ErrUnsupportedContent) {
			t.Errorf("%+v: %v, want ErrUnsupportedContent", p, err)
		}
	}
}

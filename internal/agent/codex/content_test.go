package codex

import (
	"errors"
	"reflect"
	"testing"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

// TestUserInput: images go as Codex image inputs (a data: URL) and text
// files as their text; a binary file refuses the message instead of
// becoming a mention of it.
func TestUserInput(t *testing.T) {
	got, err := userInput(agent.Input{Content: []event.ContentPart{event.TextPart("look"),
		{Type: event.PartImage, MimeType: "image/gif", Data: "R0lG"}, {Type: event.PartFile, Data: "aGk=", Path: "a.txt"}}})
	want := []map[string]any{{"type": "text", "text": "look"}, {"type": "image", "url": "data:image/gif;base64,R0lG"},
		{"type": "text", "text": "Attached file a.txt:\nhi"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("%v, %v", got, err)
	}
	if _, err := userInput(agent.Input{Content: []event.ContentPart{{Type: event.PartFile, Data: "AAEC"}}}); !errors.Is(err, agent.ErrUnsupportedContent) {
		t.Errorf("binary file: %v, want ErrUnsupportedContent", err)
	}
}

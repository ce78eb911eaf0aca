package agent

import (
	"errors"
	"testing"

	"github.com/agentbox/agentbox/event"
)

// TestFileText: a text file is given as its content under its name; a
// part without data or with binary content is refused, never dropped.
func TestFileText(t *testing.T) {
	tests := []struct {
		part        event.ContentPart
		want        string
		unsupported bool
	}{
		{event.ContentPart{Type: event.PartFile, Data: "aGVsbG8=", Path: "a.txt"}, "Attached file a.txt:\nhello", false},
		{event.ContentPart{Type: event.PartFile, Data: "aGVsbG8="}, "Attached file (unnamed):\nhello", false},
		{event.ContentPart{Type: event.PartFile, URI: "https://example.com/a.txt"}, "", true},
		{event.ContentPart{Type: event.PartFile, Data: "AAEC", MimeType: "application/octet-stream"}, "", true},
		{event.ContentPart{Type: event.PartFile, Data: "/w=="}, "", true}, // 0xff: not UTF-8
	}
	for _, tt := range tests {
		got, err := FileText(tt.part)
		if got != tt.want || errors.Is(err, ErrUnsupportedContent) != tt.unsupported {
			t.Errorf("FileText(%+v) = %q, %v", tt.part, got, err)
		}
	}
}

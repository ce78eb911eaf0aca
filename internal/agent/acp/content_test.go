package acp

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

// TestPromptBlocks: parts map to the ACP blocks the agent declared at
// initialize, and a part it did not declare refuses the whole message
// (agent.ErrUnsupportedContent naming the part) instead of being dropped.
func TestPromptBlocks(t *testing.T) {
	all := sdk.PromptCapabilities{Image: true, EmbeddedContext: true}
	img := event.ContentPart{Type: event.PartImage, MimeType: "image/png", Data: "iVBORw0KGgo="}
	text := event.ContentPart{Type: event.PartFile, MimeType: "text/plain", Data: "aGVsbG8=", Path: "notes.txt"} // "hello"
	blob := event.ContentPart{Type: event.PartFile, MimeType: "application/octet-stream", Data: "AAEC"}
	link := event.ContentPart{Type: event.PartFile, URI: "https://example.com/a.txt"}
	tests := []struct {
		name  string
		pc    sdk.PromptCapabilities
		part  event.ContentPart
		want  string // the part's block, JSON
		error string
	}{
		{"image", all, img, `{"data":"iVBORw0KGgo=","mimeType":"image/png","type":"image"}`, ""},
		{"image undeclared", sdk.PromptCapabilities{EmbeddedContext: true}, img, "", "content[1]: content the agent cannot take: the agent did not declare image"},
		{"text file embedded", all, text, `{"resource":{"mimeType":"text/plain","text":"hello","uri":"file:///ws/notes.txt"},"type":"resource"}`, ""},
		{"binary file embedded", all, blob, `{"resource":{"blob":"AAEC","mimeType":"application/octet-stream","uri":"attachment:content-1"},"type":"resource"}`, ""},
		{"file linked without embeddedContext", sdk.PromptCapabilities{Image: true}, text, `{"name":"notes.txt","type":"resource_link","uri":"file:///ws/notes.txt"}`, ""},
		{"data without path nor embeddedContext", sdk.PromptCapabilities{Image: true}, blob, "", "content[1]: content the agent cannot take: the agent did not declare embeddedContext"},
		{"uri linked", sdk.PromptCapabilities{}, link, `{"name":"https://example.com/a.txt","type":"resource_link","uri":"https://example.com/a.txt"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			blocks, err := promptBlocks(agent.Input{Content: []event.ContentPart{event.TextPart("look"), tt.part}}, tt.pc, "/ws")
			if tt.error != "" {
				if !errors.Is(err, agent.ErrUnsupportedContent) || !strings.Contains(err.Error(), tt.error) {
					t.Fatalf("err %v, want %q", err, tt.error)
				}
				return
			}
			if err != nil || len(blocks) != 2 {
				t.Fatalf("%d blocks, %v", len(blocks), err)
			}
			b, _ := json.Marshal(blocks[1])
			if string(b) != tt.want {
				t.Errorf("block\n got %s\nwant %s", b, tt.want)
			}
		})
	}
}

package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	wire "github.com/agentbox/agentbox/internal/acpwire"
	"github.com/agentbox/agentbox/internal/agent"
)

// TestPromptBlocks: parts map to the ACP blocks the agent declared at
// initialize, and a part it did not declare refuses the whole message
// (agent.ErrUnsupportedContent naming the part) instead of being dropped.
func TestPromptBlocks(t *testing.T) {
	all := wire.PromptCapabilities{Image: true, EmbeddedContext: true}
	img := event.ContentPart{Type: event.PartImage, MimeType: "image/png", Data: "iVBORw0KGgo="}
	text := event.ContentPart{Type: event.PartFile, MimeType: "text/plain", Data: "aGVsbG8=", Path: "notes.txt"} // "hello"
	blob := event.ContentPart{Type: event.PartFile, MimeType: "application/octet-stream", Data: "AAEC"}
	link := event.ContentPart{Type: event.PartFile, URI: "https://example.com/a.txt"}
	tests := []struct {
		name  string
		pc    wire.PromptCapabilities
		part  event.ContentPart
		want  string // the part's block, JSON
		error string
	}{
		{"image", all, img, `{"data":"iVBORw0KGgo=","mimeType":"image/png","type":"image"}`, ""},
		{"image undeclared", wire.PromptCapabilities{EmbeddedContext: true}, img, "", "content[1]: content the agent cannot take: the agent did not declare image"},
		{"text file embedded", all, text, `{"resource":{"mimeType":"text/plain","text":"hello","uri":"file:///ws/notes.txt"},"type":"resource"}`, ""},
		{"binary file embedded", all, blob, `{"resource":{"blob":"AAEC","mimeType":"application/octet-stream","uri":"attachment:content-1"},"type":"resource"}`, ""},
		{"file linked without embeddedContext", wire.PromptCapabilities{Image: true}, text, `{"name":"notes.txt","type":"resource_link","uri":"file:///ws/notes.txt"}`, ""},
		{"data without path nor embeddedContext", wire.PromptCapabilities{Image: true}, blob, "", "content[1]: content the agent cannot take: the agent did not declare embeddedContext"},
		{"uri linked", wire.PromptCapabilities{}, link, `{"name":"https://example.com/a.txt","type":"resource_link","uri":"https://example.com/a.txt"}`, ""},
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

// TestPromptRefusedAtRuntime: an agent whose initialize declares no
// promptCapabilities (the test agent of terminal_test.go) is refused an
// image and a file with content even when its adapter's static flags
// claim them: the turn fails naming the part, nothing reaches the agent,
// and the session takes a text message afterwards.
func TestPromptRefusedAtRuntime(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ad, err := FromConfig(Custom{Name: "content-test", Command: exe, Env: map[string]string{testAgentEnv: "terminal"}, Terminal: true}, t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := &testHost{}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, err := ad.Start(ctx, agent.Config{Cwd: t.TempDir()}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(context.Background()) }()
	for i, p := range []event.ContentPart{
		{Type: event.PartImage, MimeType: "image/png", Data: "iVBORw0KGgo="},
		{Type: event.PartFile, MimeType: "text/plain", Data: "aGk="},
	} {
		_, err := s.Prompt(ctx, agent.Input{TurnID: fmt.Sprint("t", i), Content: []event.ContentPart{event.TextPart("[]"), p}})
		if !errors.Is(err, agent.ErrUnsupportedContent) || !strings.Contains(err.Error(), "content[1]") {
			t.Errorf("%s part: %v, want ErrUnsupportedContent naming content[1]", p.Type, err)
		}
	}
	if _, err := s.Prompt(ctx, agent.Input{TurnID: "t2", Content: []event.ContentPart{event.TextPart("[]")}}); err != nil {
		t.Fatalf("a text message after the refusals: %v", err)
	}
	if got := h.lastText(t); got != "null" {
		t.Errorf("the agent answered %q; want the answer to the text message only (null)", got)
	}
}

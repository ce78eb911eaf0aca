package opencode

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

// FuzzEvents feeds arbitrary bytes, framed as an SSE stream, through the
// SSE reader (with a small line limit) and the mapper: nothing may panic
// and every event must carry valid JSON.
func FuzzEvents(f *testing.F) {
	paths, _ := filepath.Glob("testdata/transcripts/*.jsonl")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err == nil {
			f.Add(bytes.ReplaceAll(b, []byte("\n{"), []byte("\n\ndata: {")))
		}
	}
	f.Add([]byte("data: {\"type\":\"message.part.updated\",\"properties\":{\"sessionID\":\"s\",\"part\":{\"type\":\"tool\",\"id\":\"p\",\"tool\":\"write\",\"state\":{\"status\":\"completed\",\"input\":{\"filePath\":\"/w/a\",\"content\":\"x\"},\"metadata\":{\"exists\":false}}}}}\n\n"))
	f.Add([]byte("data: {\"type\":\"message.part.delta\",\"properties\":{\"sessionID\":\"s\",\"partID\":\"nope\",\"field\":\"text\",\"delta\":\"x\"}}\n\n"))
	f.Add([]byte("data: {\"type\":\"permission.asked\",\"properties\":{\"sessionID\":\"s\",\"id\":\"per\",\"permission\":\"edit\",\"metadata\":5}}\n\n"))
	f.Add([]byte("data: {\"type\":\"session.status\",\"properties\":{\"sessionID\":\"s\",\"status\":{\"type\":\"retry\",\"attempt\":\"x\"}}}\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := NewMapper("s", "/w")
		r := newSSEReader(bytes.NewReader(data), 4096)
		for {
			d, err := r.next()
			if errors.Is(err, errLineTooLong) {
				continue
			}
			if err != nil {
				break
			}
			if m.SessionID == "s" {
				var probe struct {
					Properties struct {
						SessionID string `json:"sessionID"`
					} `json:"properties"`
				}
				if json.Unmarshal(d, &probe) == nil && probe.Properties.SessionID != "" {
					m.SessionID = probe.Properties.SessionID
				}
			}
			out := m.Map(d)
			for _, e := range out.Events {
				if !json.Valid(e.Data) {
					t.Fatalf("invalid event data %q from %q", e.Data, d)
				}
			}
			if p := out.Permission; p != nil {
				tool, input := m.Tool(p.Tool.CallID)
				_ = permissionRequest(p, m.ItemID(p.Tool.CallID), tool, input, "/w")
				_ = permissionReply(agent.PermissionAnswer{Decision: event.DecisionDeny})
			}
			if out.Idle {
				for _, e := range func() []event.Event { evs, _, _, _ := m.EndTurn("x"); return evs }() {
					if !json.Valid(e.Data) {
						t.Fatalf("invalid event data %q", e.Data)
					}
				}
			}
		}
		_ = NewMapper("s", "").Map(data)
	})
}

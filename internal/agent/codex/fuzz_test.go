package codex

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

// FuzzMapper feeds arbitrary bytes through the line reader (with a small
// limit), the JSON-RPC parser, the mapper and the approval functions:
// nothing may panic and every event must carry valid JSON.
func FuzzMapper(f *testing.F) {
	paths, _ := filepath.Glob("testdata/transcripts/*.jsonl")
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"method":"item/agentMessage/delta","params":{"itemId":"x","delta":"y"}}`))
	f.Add([]byte(`{"method":"item/completed","params":{"item":{"type":"fileChange","id":"f","changes":[{"kind":5}]}}}`))
	f.Add([]byte(`{"id":null,"method":"error","params":[]}` + "\n\n" + `{"method":"turn/completed","params":{"turn":{"error":{}}}}`))
	f.Add(bytes.Repeat([]byte("z"), 3000))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := NewMapper()
		lr := newLineReader(bytes.NewReader(data), 1024)
		for {
			line, _, err := lr.next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			msg, err := parseMessage(line)
			if err != nil {
				continue
			}
			_ = threadIDOf(msg.Params)
			if msg.isRequest() {
				var p approvalParams
				_ = json.Unmarshal(msg.Params, &p)
				req := permissionRequest(msg.Method, msg.Params, m.Item(p.ItemID))
				b, _ := json.Marshal(approvalResult(msg.Method, msg.Params, agent.PermissionAnswer{Decision: event.DecisionAllow, OptionID: optAcceptForSession}))
				if !json.Valid(b) || len(req.Options) < 2 {
					t.Fatalf("bad approval for %q", line)
				}
				continue
			}
			out := m.Map(msg.Method, msg.Params)
			for _, e := range out.Events {
				if !json.Valid(e.Data) {
					t.Fatalf("invalid event data %q from %q", e.Data, line)
				}
			}
		}
	})
}

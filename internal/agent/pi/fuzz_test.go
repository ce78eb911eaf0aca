package pi

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/internal/agent/procrt"
)

// FuzzMapper feeds arbitrary bytes through the line reader (with a small
// line limit, so that long lines are skipped), the line decoder and the
// mapper: nothing may panic, and every event must carry valid JSON. Run it
// with a small -fuzzminimizetime: the seed transcripts are long.
func FuzzMapper(f *testing.F) {
	paths, _ := filepath.Glob("testdata/transcripts/*.jsonl")
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"type":"message_update","assistantMessageEvent":{"type":"text_delta","contentIndex":-3,"delta":"x"}}`))
	f.Add([]byte(`{"type":"tool_execution_end","toolCallId":"a","result":null}` + "\n" + `{"type":"agent_end"}`))
	f.Add([]byte(`{"type":"extension_ui_request","id":"x","method":"confirm","title":"agentbox.permission","message":"{\"toolCallId\":\"t\",\"input\":7}"}`))
	f.Add([]byte(`{"type":"extension_ui_request","method":"notify","message":"agentbox.before {\"toolCallId\":\"t\",\"exists\":true}"}`))
	f.Add([]byte("{\"type\":\"message_end\",\"message\":\"str\"}\r\n\n{\"type\":5}\n"))
	f.Add(bytes.Repeat([]byte("y"), 5000))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := NewMapper("/w")
		lr := procrt.NewLineReader(bytes.NewReader(data), 1024)
		for {
			line, _, err := lr.Next()
			if err != nil {
				break
			}
			out := m.Map(line)
			for _, e := range out.Events {
				if !json.Valid(e.Data) {
					t.Fatalf("invalid event data %q from %q", e.Data, line)
				}
			}
			if p := out.Permission; p != nil {
				m.Decline(p.ToolCallID)
				if _, err := json.Marshal(p.Request); err != nil {
					t.Fatal(err)
				}
			}
		}
		if l, err := DecodeLine(data); err == nil && l.Type == "" {
			t.Fatal("DecodeLine accepted a line without a type")
		}
	})
}

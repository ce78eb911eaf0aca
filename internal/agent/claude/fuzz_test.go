package claude

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/procrt"
)

// FuzzMapper feeds arbitrary bytes through the line reader (with a small
// line limit, so that long lines are skipped) and the mapper: nothing may
// panic, and every event must carry valid JSON. Run it with a small
// -fuzzminimizetime (e.g. 100x): minimizing inputs as long as the recorded
// transcripts takes the default 60s each.
func FuzzMapper(f *testing.F) {
	paths, _ := filepath.Glob("testdata/transcripts/*.jsonl")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"type":"stream_event","event":{"type":"content_block_delta","index":7,"delta":{"type":"text_delta","text":"x"}}}`))
	f.Add([]byte(`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":5}]}}` + "\n" + `{"type":"result","usage":"x"}`))
	f.Add([]byte(`{"type":"assistant","message":{"content":"plain"}}` + "\n\n\n" + `{"type":"result","is_error":true}`))
	f.Add([]byte("{\"type\":\"control_request\",\"request\":null}\n{\"type\":\"system\",\"subtype\":\"init\",\"tools\":{}}\n"))
	f.Add(bytes.Repeat([]byte("y"), 5000))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := NewMapper("/w")
		lr := procrt.NewLineReader(bytes.NewReader(data), 1024)
		for {
			line, _, err := lr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			out := m.Map(line)
			for _, e := range out.Events {
				if !json.Valid(e.Data) {
					t.Fatalf("invalid event data %q from %q", e.Data, line)
				}
			}
			if c := out.Control; c != nil && c.Type == "control_request" {
				var req canUseTool
				if json.Unmarshal(c.Request, &req) == nil {
					pr := permissionRequest(&req, m.ToolItemID(req.ToolUseID), "/w", nil)
					_ = permissionAnswer(&req, agentAllowAlways)
					_, _ = questions(req.Input, pr.ItemID)
					_ = questionAnswer(req.Input, nil)
				}
			}
		}
		// Whole input as one line, too.
		_ = NewMapper("").Map(data)
	})
}

var agentAllowAlways = agent.PermissionAnswer{Decision: event.DecisionAllow, OptionID: optAllowAlways}

// FuzzParseModels: the CLI's initialize answer yields at most maxModels
// choices, each with a non-empty id, no id twice, and nothing panics.
func FuzzParseModels(f *testing.F) {
	f.Add([]byte(`{"models":[{"value":"default","resolvedModel":"m-1","displayName":"D"},{"value":"m-1"}]}`))
	f.Add([]byte(`{"models":[{"value":""},{"resolvedModel":5}]}`))
	f.Add([]byte(`{"models":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		list, err := parseModels(data)
		if err != nil {
			return
		}
		if len(list) > maxModels {
			t.Fatalf("%d models", len(list))
		}
		seen := map[string]bool{}
		for _, c := range list {
			if c.ID == "" || seen[c.ID] || !json.Valid([]byte(strconv.Quote(c.ID))) {
				t.Fatalf("choice %+v in %+v", c, list)
			}
			seen[c.ID] = true
		}
	})
}

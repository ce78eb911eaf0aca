package claude

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/golden"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// replay feeds a transcript through a Mapper the way a session does, and
// plays the engine's part for approvals: a can_use_tool request becomes
// permission.requested (or question.requested), and the client's answer
// that follows in the transcript ({"_sent": …}) becomes the resolution.
// Item ids are numbered, so the output is deterministic.
func replay(t *testing.T, lines [][]byte) (evs []event.Event, results []agent.Result) {
	t.Helper()
	m := NewMapper("")
	n := 0
	m.NewID = func() string { n++; return fmt.Sprintf("item_%d", n) }
	perms := map[string]string{} // CLI request id → perm id
	for _, line := range lines {
		var sent struct {
			Sent json.RawMessage `json:"_sent"`
		}
		if json.Unmarshal(line, &sent) == nil && len(sent.Sent) > 0 {
			var msg struct {
				Type     string `json:"type"`
				Request  struct{ Subtype string }
				Response struct {
					RequestID string `json:"request_id"`
					Response  struct {
						Behavior string `json:"behavior"`
						Message  string `json:"message"`
					} `json:"response"`
				} `json:"response"`
			}
			if err := json.Unmarshal(sent.Sent, &msg); err != nil {
				t.Fatalf("bad _sent line %s: %v", line, err)
			}
			switch {
			case msg.Type == "control_request" && msg.Request.Subtype == "interrupt":
				m.Interrupting = true
			case msg.Type == "control_response" && strings.HasPrefix(perms[msg.Response.RequestID], "q_"):
				evs = append(evs, event.New(event.SourceDaemon, &event.QuestionResolved{ID: perms[msg.Response.RequestID], Answer: "(from the transcript)", By: event.ByUser}))
			case msg.Type == "control_response" && perms[msg.Response.RequestID] != "":
				dec := event.DecisionAllow
				if msg.Response.Response.Behavior == "deny" {
					dec = event.DecisionDeny
				}
				evs = append(evs, event.New(event.SourceDaemon, &event.PermissionResolved{
					ID: perms[msg.Response.RequestID], Decision: dec, By: event.ByUser, Message: msg.Response.Response.Message}))
			case msg.Type == "user":
				m.Interrupting = false
			}
			continue
		}
		out := m.Map(line)
		evs = append(evs, out.Events...)
		if c := out.Control; c != nil && c.Type == "control_request" {
			var req canUseTool
			if err := json.Unmarshal(c.Request, &req); err != nil || req.Subtype != "can_use_tool" {
				t.Fatalf("unexpected control request %s", line)
			}
			itemID := m.ToolItemID(req.ToolUseID)
			if req.ToolName == "AskUserQuestion" {
				qs, err := questions(req.Input, itemID)
				if err != nil {
					t.Fatal(err)
				}
				for i, q := range qs {
					q.ID = fmt.Sprintf("q_%d", i+1)
					evs = append(evs, event.New(event.SourceAgent, &q))
				}
				perms[c.RequestID] = "q_1"
				continue
			}
			pr := permissionRequest(&req, itemID, m.cwd, nil)
			pr.ID = fmt.Sprintf("perm_%d", len(perms)+1)
			perms[c.RequestID] = pr.ID
			evs = append(evs, event.New(event.SourceAgent, &pr))
		}
		if out.Result != nil {
			results = append(results, *out.Result)
			evs = append(evs, event.New(event.SourceDaemon, &event.TurnCompleted{TurnID: "turn", StopReason: out.Result.StopReason, Usage: out.Result.Usage, Message: out.Result.Message}))
		}
	}
	return evs, results
}

// TestGolden replays every transcript in testdata/transcripts: the real
// CLI's recordings (research transcripts and stream-*.jsonl, recorded from
// claude 2.1.332 against a fake model) and hand-written ones (hand-*).
func TestGolden(t *testing.T) {
	paths, err := filepath.Glob("testdata/transcripts/*.jsonl")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".jsonl")
		t.Run(name, func(t *testing.T) {
			evs, results := replay(t, agenttest.ReadLines(t, p))
			if len(results) == 0 {
				t.Error("the transcript never ended a turn")
			}
			checkEvents(t, evs)
			golden.Check(t, filepath.Join("testdata", name+".golden"), agenttest.GoldenEvents(t, evs))
		})
	}
}

var (
	schemaOnce sync.Once
	schema     *jsonschema.Schema
	schemaErr  error
)

func eventSchema() (*jsonschema.Schema, error) {
	schemaOnce.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(event.JSONSchema()))
		if err != nil {
			schemaErr = err
			return
		}
		c := jsonschema.NewCompiler()
		const url = "event.v1.json"
		if schemaErr = c.AddResource(url, doc); schemaErr == nil {
			schema, schemaErr = c.Compile(url)
		}
	})
	return schema, schemaErr
}

// checkEvents checks what every translation must satisfy: each event is
// valid under the universal schema (once stamped as the store would);
// items start once, get deltas only while open and complete once, and a
// streamed text adds up to the completed text (unless the full message
// corrected it).
func checkEvents(t *testing.T, evs []event.Event) {
	t.Helper()
	sch, err := eventSchema()
	if err != nil {
		t.Fatal(err)
	}
	type state struct {
		kind         event.ItemKind
		text         string
		open, closed bool
	}
	items := map[string]*state{}
	for i, e := range evs {
		e.ID, e.Seq, e.SessionID, e.Schema, e.Time = fmt.Sprintf("evt_%d", i+1), int64(i+1), "ses_test", event.SchemaVersion, fixedTime
		b, _ := json.Marshal(e)
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(inst); err != nil {
			t.Errorf("event %d is not valid: %v\n%s", i+1, err, b)
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case *event.ItemStarted:
			if items[p.Item.ID] != nil {
				t.Errorf("item %s started twice", p.Item.ID)
			}
			items[p.Item.ID] = &state{kind: p.Item.Kind, open: true}
		case *event.ItemDelta:
			st := items[p.ItemID]
			if st == nil || st.closed {
				t.Errorf("delta for item %s that is not open", p.ItemID)
				continue
			}
			if p.Field == event.DeltaText {
				st.text += p.Delta
			}
		case *event.ItemCompleted:
			st := items[p.Item.ID]
			if st == nil || st.closed {
				t.Errorf("item %s completed without being open", p.Item.ID)
				continue
			}
			st.closed = true
			if p.Item.Kind != st.kind {
				t.Errorf("item %s changed kind from %s to %s", p.Item.ID, st.kind, p.Item.Kind)
			}
			if p.Item.Status == event.StatusInProgress {
				t.Errorf("item %s completed in progress", p.Item.ID)
			}
			if st.text != "" && p.Item.Text() != st.text {
				t.Errorf("item %s: deltas %q add up to something else than its text %q", p.Item.ID, st.text, p.Item.Text())
			}
		}
	}
	for id, st := range items {
		if !st.closed {
			t.Errorf("item %s never completed", id)
		}
	}
}

var fixedTime = time.Date(2026, 1, 15, 10, 0, 0, 0, time.UTC)

func TestRawOption(t *testing.T) {
	line := []byte(`{"type":"assistant","message":{"id":"m","role":"assistant","content":[{"type":"text","text":"hi"}]}}`)
	for _, raw := range []bool{false, true} {
		m := NewMapper("/w")
		m.Raw = raw
		out := m.Map(line)
		if len(out.Events) != 2 {
			t.Fatalf("events %v", out.Events)
		}
		for _, e := range out.Events {
			if got := len(e.Raw) > 0; got != raw || (raw && string(e.Raw) != string(line)) {
				t.Errorf("raw=%v: event raw %q", raw, e.Raw)
			}
		}
	}
}

func TestDiffs(t *testing.T) {
	cases := []struct{ name, got, want string }{
		{"new file", newFileDiff("a.txt", "one\ntwo\n"), "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n"},
		{"empty new file", newFileDiff("a.txt", ""), "--- /dev/null\n+++ b/a.txt\n"},
		{"patch", patchDiff("a.txt", []hunk{{OldStart: 2, OldLines: 1, NewStart: 2, NewLines: 0, Lines: []string{"-x"}}}), "--- a/a.txt\n+++ b/a.txt\n@@ -2 +1,0 @@\n-x\n"},
		{"edit placed", replaceDiff("a.txt", [][2]string{{"b\n", "B\n"}}, ptr("a\nb\nc\n")), "--- a/a.txt\n+++ b/a.txt\n@@ -2 +2 @@\n-b\n+B\n"},
		{"edit unplaced fragment", replaceDiff("a.txt", [][2]string{{"hi", "hello"}}, nil), "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-hi\n+hello\n"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, c.got, c.want)
		}
	}
}

func ptr(s string) *string { return &s }

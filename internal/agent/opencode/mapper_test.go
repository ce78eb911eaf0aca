package opencode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/golden"
	"github.com/google/go-cmp/cmp"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// replay feeds a transcript (the data of GET /event, one JSON object a
// line; lines with "_http" are the client's requests) through a Mapper the
// way a session does, playing the engine's part for permissions: the
// request becomes permission.requested, and a reply in the transcript its
// resolution. The session is the first one named. Item ids are numbered.
func replay(t testing.TB, lines [][]byte) (evs []event.Event, turns int) {
	m := NewMapper("", "<workdir>")
	n := 0
	m.NewID = func() string { n++; return fmt.Sprintf("item_%d", n) }
	perms := map[string]string{} // OpenCode id → perm id
	calls := map[string]string{} // OpenCode id → call id
	for _, line := range lines {
		var probe struct {
			HTTP       string                 `json:"_http"`
			Body       struct{ Reply string } `json:"body"`
			Properties struct {
				SessionID string `json:"sessionID"`
			} `json:"properties"`
		}
		if json.Unmarshal(line, &probe) != nil {
			continue
		}
		if probe.HTTP != "" {
			if rest, ok := strings.CutPrefix(probe.HTTP, "POST /permission/"); ok {
				id := strings.TrimSuffix(rest, "/reply")
				dec := event.DecisionAllow
				if probe.Body.Reply == optReject {
					dec = event.DecisionDeny
					m.Denied(calls[id])
				}
				evs = append(evs, event.New(event.SourceDaemon, &event.PermissionResolved{ID: perms[id], Decision: dec, By: event.ByUser}))
			}
			continue
		}
		if m.SessionID == "" {
			m.SessionID = probe.Properties.SessionID
		}
		out := m.Map(line)
		evs = append(evs, out.Events...)
		if p := out.Permission; p != nil {
			tool, input := m.Tool(p.Tool.CallID)
			pr := permissionRequest(p, m.ItemID(p.Tool.CallID), tool, input, "<workdir>")
			pr.ID = fmt.Sprintf("perm_%d", len(perms)+1)
			perms[p.ID], calls[p.ID] = pr.ID, p.Tool.CallID
			evs = append(evs, event.New(event.SourceAgent, &pr))
		}
		if out.Retry != nil {
			evs = append(evs, event.New(event.SourceDaemon, &event.Native{NativeType: "test/retry", Payload: mustJSON(out.Retry)}))
		}
		if out.Idle {
			turns++
			end, usage, finish, errMsg := m.EndTurn("")
			evs = append(evs, end...)
			stop := event.StopEndTurn
			if errMsg != "" {
				stop = event.StopError
			}
			evs = append(evs, event.New(event.SourceDaemon, &event.TurnCompleted{TurnID: "turn", StopReason: stop, Usage: usage, Message: finish}))
		}
	}
	return evs, turns
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// TestGolden replays every transcript in testdata/transcripts: the
// research recordings (opencode-serve.*) and the e2e tests' own (e2e-*,
// recorded from opencode 1.18.33 against internal/fakellm with -record).
func TestGolden(t *testing.T) {
	paths, err := filepath.Glob("testdata/transcripts/*.jsonl")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".jsonl")
		t.Run(name, func(t *testing.T) {
			evs, turns := replay(t, agenttest.ReadLines(t, p))
			if turns == 0 {
				t.Error("the transcript never ended a turn")
			}
			checkEvents(t, evs)
			golden.Check(t, filepath.Join("testdata", name+".golden"), agenttest.GoldenEvents(t, evs))
		})
	}
}

// checkEvents: every event is valid under the universal schema; items
// start once, get deltas only while open, complete once, and streamed text
// adds up to the completed text.
func checkEvents(t *testing.T, evs []event.Event) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(event.JSONSchema()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("event.v1.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("event.v1.json")
	if err != nil {
		t.Fatal(err)
	}
	type state struct {
		text         string
		open, closed bool
	}
	items := map[string]*state{}
	for i, e := range evs {
		e.ID, e.Seq, e.SessionID, e.Schema, e.Time = fmt.Sprintf("evt_%d", i+1), int64(i+1), "ses_test", event.SchemaVersion, time.Date(2026, 1, 15, 10, 0, 0, 0, time.UTC)
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
			items[p.Item.ID] = &state{open: true}
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
			if st.text != "" && p.Item.Text() != st.text {
				t.Errorf("item %s: deltas %q differ from its text %q", p.Item.ID, st.text, p.Item.Text())
			}
		}
	}
	for id, st := range items {
		if !st.closed {
			t.Errorf("item %s never completed", id)
		}
	}
}

func TestPermissionReply(t *testing.T) {
	cases := []struct {
		ans  agent.PermissionAnswer
		want string
	}{
		{agent.PermissionAnswer{Decision: event.DecisionAllow}, "once"},
		{agent.PermissionAnswer{Decision: event.DecisionAllow, OptionID: "once"}, "once"},
		{agent.PermissionAnswer{Decision: event.DecisionAllow, OptionID: "always"}, "always"},
		{agent.PermissionAnswer{Decision: event.DecisionDeny, OptionID: "always"}, "reject"},
		{agent.PermissionAnswer{Decision: event.DecisionDeny, By: event.ByTimeout}, "reject"},
	}
	for _, c := range cases {
		if got := permissionReply(c.ans)["reply"]; got != c.want {
			t.Errorf("%+v → %q, want %q", c.ans, got, c.want)
		}
	}
}

func TestSSEReader(t *testing.T) {
	in := ": comment\nevent: x\ndata: {\"a\":1}\n\ndata: one\r\ndata: two\r\n\r\nid: 5\n\ndata: " + strings.Repeat("z", 100) + "\n\ndata: last\n\ndata: cut"
	r := newSSEReader(strings.NewReader(in), 64)
	var got []string
	for {
		d, err := r.next()
		if errors.Is(err, errLineTooLong) {
			got = append(got, "<too long>")
			continue
		}
		if err != nil {
			break
		}
		got = append(got, string(d))
	}
	want := []string{`{"a":1}`, "one\ntwo", "<too long>", "last"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

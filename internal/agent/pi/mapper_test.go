package pi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/golden"
)

// replay feeds a transcript through a Mapper the way a session does and
// plays the engine's part for approvals: the extension's confirm request
// becomes permission.requested, and the answer that follows in the
// transcript ({"_sent": extension_ui_response}) becomes the resolution
// (and, for a deny, Decline). Item ids are numbered; results, dismissed
// dialogs and command responses are rendered as lines of their own.
func replay(t *testing.T, lines [][]byte) []byte {
	t.Helper()
	m := NewMapper("/w")
	n := 0
	m.NewID = func() string { n++; return fmt.Sprintf("item_%d", n) }
	type pending struct{ permID, toolCallID string }
	perms := map[string]pending{} // ui request id → permission
	var b bytes.Buffer
	line := func(v any) {
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	events := func(evs ...event.Event) { b.Write(agenttest.GoldenEvents(t, evs)) }
	for _, l := range lines {
		var sent struct {
			Sent *uiResponse `json:"_sent"`
		}
		if json.Unmarshal(l, &sent) == nil && sent.Sent != nil { // what agentbox wrote
			p, ok := perms[sent.Sent.ID]
			if !ok {
				continue
			}
			dec := event.DecisionDeny
			if sent.Sent.Confirmed != nil && *sent.Sent.Confirmed {
				dec = event.DecisionAllow
			} else {
				m.Decline(p.toolCallID)
			}
			events(event.New(event.SourceDaemon, &event.PermissionResolved{ID: p.permID, Decision: dec, By: event.ByUser}))
			continue
		}
		out := m.Map(l)
		events(out.Events...)
		if p := out.Permission; p != nil {
			req := p.Request
			req.ID = fmt.Sprintf("perm_%d", len(perms)+1)
			perms[p.UIID] = pending{req.ID, p.ToolCallID}
			events(event.New(event.SourceDaemon, &req))
		}
		if out.Dismiss != "" {
			line(map[string]string{"dismiss": out.Dismiss})
		}
		if r := out.Response; r != nil {
			line(map[string]any{"response": r.Command, "id": r.ID, "success": r.Success, "error": jsonString(r.Error)})
		}
		if r := out.Result; r != nil {
			line(map[string]any{"result": r})
		}
	}
	return b.Bytes()
}

// TestGolden translates the recorded transcripts (real pi 0.73.1 RPC
// output against internal/fakellm, and hand-written ones for rare lines)
// and compares the events with testdata/*.golden.
func TestGolden(t *testing.T) {
	paths, err := filepath.Glob("testdata/transcripts/*.jsonl")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".jsonl")
		t.Run(name, func(t *testing.T) {
			got := replay(t, agenttest.ReadLines(t, p))
			golden.Check(t, filepath.Join("testdata", name+".golden"), got)
		})
	}
}

// TestGoldenInvariants checks the events of the recorded transcripts,
// bracketed in turns as the engine does, with the conformance suite's
// invariants (items paired, deltas adding up, permissions resolved).
func TestGoldenInvariants(t *testing.T) {
	paths, _ := filepath.Glob("testdata/transcripts/*.jsonl")
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			m := NewMapper("/w")
			var evs []event.Event
			turn := ""
			add := func(e event.Event) {
				e.Seq, e.SessionID, e.TurnID = int64(len(evs)+1), "ses_x", turn
				evs = append(evs, e)
			}
			add(event.New(event.SourceDaemon, &event.SessionStarted{Agent: Name}))
			for i, l := range agenttest.ReadLines(t, p) {
				if bytes.Contains(l, []byte(`"_sent"`)) {
					continue
				}
				if dl, err := DecodeLine(l); err == nil && dl.Type == "agent_start" {
					turn = fmt.Sprint("turn_", i)
					add(event.New(event.SourceDaemon, &event.TurnStarted{TurnID: turn}))
				}
				out := m.Map(l)
				for _, e := range out.Events {
					add(e)
				}
				if out.Permission != nil {
					req := out.Permission.Request
					req.ID = fmt.Sprint("perm_", i)
					add(event.New(event.SourceDaemon, &req))
					add(event.New(event.SourceDaemon, &event.PermissionResolved{ID: req.ID, Decision: event.DecisionAllow, By: event.ByUser}))
				}
				if r := out.Result; r != nil && turn != "" {
					add(event.New(event.SourceDaemon, &event.TurnCompleted{TurnID: turn, StopReason: r.StopReason, Usage: r.Usage}))
					turn = ""
				}
			}
			if errs := agenttest.CheckInvariants(evs); len(errs) > 0 {
				t.Errorf("%v\n%s", errs, agenttest.Dump(evs))
			}
		})
	}
}

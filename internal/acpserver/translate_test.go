package acpserver

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentbox/agentbox/event"
	acp "github.com/agentbox/agentbox/internal/acpwire"
	"github.com/agentbox/agentbox/internal/golden"
)

func ev(p event.Payload) event.Event { return event.New(event.SourceAgent, p) }

func intp(n int) *int { return &n }

// sampleLog is a turn with every kind of item agentbox has.
func sampleLog() []event.Event {
	user := event.Item{ID: "u1", Kind: event.ItemMessage, Role: event.RoleUser, Status: event.StatusCompleted,
		Content: []event.ContentPart{event.TextPart("fix the bug")}}
	msg := event.Item{ID: "m1", Kind: event.ItemMessage, Role: event.RoleAssistant, Status: event.StatusInProgress}
	think := event.Item{ID: "r1", Kind: event.ItemReasoning, Role: event.RoleAssistant, Status: event.StatusInProgress}
	cmd := event.Item{ID: "c1", Kind: event.ItemCommand, Status: event.StatusInProgress, Command: "go test ./...\n# twice", Cwd: "/w"}
	cmdDone := cmd
	cmdDone.Status, cmdDone.Output, cmdDone.ExitCode = event.StatusFailed, "ok\nFAIL\n", intp(1)
	fc := event.Item{ID: "f1", Kind: event.ItemFileChange, Status: event.StatusInProgress,
		Changes: []event.FileChange{{Path: "/w/main.go", Kind: event.FileUpdate}}}
	fcDone := fc
	fcDone.Status = event.StatusCompleted
	fcDone.Changes = []event.FileChange{{Path: "/w/main.go", Kind: event.FileUpdate,
		Diff: "--- a/main.go\n+++ b/main.go\n@@ -1,3 +1,3 @@\n package main\n-var x = 1\n+var x = 2\n func main() {}\n@@ -10,2 +10,2 @@\n-a\n+b\n c\n"}}
	add := event.Item{ID: "f2", Kind: event.ItemFileChange, Status: event.StatusDeclined, Error: "permission denied",
		Changes: []event.FileChange{{Path: "/w/new.txt", Kind: event.FileAdd}}}
	read := event.Item{ID: "t1", Kind: event.ItemToolCall, Status: event.StatusCompleted, Name: "Read",
		Input: json.RawMessage(`{"path":"main.go"}`), Output: "package main"}
	plan := event.Item{ID: "p1", Kind: event.ItemPlan, Status: event.StatusCompleted, Entries: []event.PlanEntry{
		{Content: "Find it", Status: "completed", Priority: "high"}, {Content: "Fix it", Status: "in_progress"}, {Content: "Test", Status: "pending", Priority: "low"}}}
	web := event.Item{ID: "w1", Kind: event.ItemWebSearch, Status: event.StatusCompleted, Query: "go generics"}
	mcp := event.Item{ID: "x1", Kind: event.ItemMCPToolCall, Status: event.StatusCompleted, Server: "gh", Name: "list_issues", Output: "[]"}
	quiet := event.Item{ID: "m2", Kind: event.ItemMessage, Role: event.RoleAssistant, Status: event.StatusCompleted,
		Content: []event.ContentPart{event.TextPart("All done.")}}
	return []event.Event{
		event.New(event.SourceDaemon, &event.TurnStarted{TurnID: "turn_1"}),
		ev(&event.ItemStarted{Item: user}), ev(&event.ItemCompleted{Item: user}),
		ev(&event.ItemStarted{Item: think}),
		ev(&event.ItemDelta{ItemID: "r1", Field: event.DeltaText, Delta: "Look at "}),
		ev(&event.ItemDelta{ItemID: "r1", Field: event.DeltaText, Delta: "main.go."}),
		ev(&event.ItemCompleted{Item: event.Item{ID: "r1", Kind: event.ItemReasoning, Status: event.StatusCompleted,
			Content: []event.ContentPart{event.TextPart("Look at main.go.")}}}),
		ev(&event.ItemStarted{Item: msg}),
		ev(&event.ItemDelta{ItemID: "m1", Field: event.DeltaText, Delta: "I'll "}),
		ev(&event.ItemDelta{ItemID: "m1", Field: event.DeltaText, Delta: "fix it."}),
		ev(&event.ItemCompleted{Item: event.Item{ID: "m1", Kind: event.ItemMessage, Role: event.RoleAssistant, Status: event.StatusCompleted,
			Content: []event.ContentPart{event.TextPart("I'll fix it.")}}}),
		ev(&event.ItemStarted{Item: plan}), ev(&event.ItemCompleted{Item: plan}),
		ev(&event.ItemCompleted{Item: read}),
		ev(&event.ItemStarted{Item: cmd}),
		ev(&event.ItemDelta{ItemID: "c1", Field: event.DeltaOutput, Delta: "ok\n"}),
		ev(&event.ItemDelta{ItemID: "c1", Field: event.DeltaOutput, Delta: "FAIL\n"}),
		ev(&event.ItemCompleted{Item: cmdDone}),
		ev(&event.ItemStarted{Item: fc}),
		event.New(event.SourceDaemon, &event.PermissionRequested{ID: "perm_1", Kind: event.PermFileWrite, Title: "Edit main.go", ItemID: "f1"}),
		event.New(event.SourceDaemon, &event.PermissionResolved{ID: "perm_1", Decision: event.DecisionAllow, By: event.ByUser}),
		ev(&event.ItemCompleted{Item: fcDone}),
		ev(&event.ItemStarted{Item: add}), ev(&event.ItemCompleted{Item: add}),
		ev(&event.ItemStarted{Item: web}), ev(&event.ItemCompleted{Item: web}),
		ev(&event.ItemCompleted{Item: mcp}),
		ev(&event.Error{Code: "upstream_error", Message: "500 overloaded", Retryable: true}),
		ev(&event.Native{NativeType: "x"}),
		ev(&event.ItemCompleted{Item: quiet}),
		event.New(event.SourceDaemon, &event.TurnCompleted{TurnID: "turn_1", StopReason: event.StopEndTurn}),
	}
}

// render translates events and writes one line per event: its type, then
// the updates it gave (as the SDK marshals them).
func render(t *testing.T, tr *translator, evs []event.Event) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, e := range evs {
		ups := tr.updates(e)
		j, err := json.Marshal(ups)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(string(e.Type))
		b.WriteString(" ")
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// TestTranslateGolden checks the event → session update translation,
// during a prompt and when a session is loaded (user messages replayed).
func TestTranslateGolden(t *testing.T) {
	for _, c := range []struct {
		name   string
		replay bool
	}{{"translate-prompt", false}, {"translate-load", true}} {
		t.Run(c.name, func(t *testing.T) {
			got := render(t, newTranslator(c.replay), sampleLog())
			golden.Check(t, filepath.Join("testdata", c.name+".golden"), got)
		})
	}
}

// TestPermissionGolden checks how permission requests are offered to an
// ACP client and how its choice is answered.
func TestPermissionGolden(t *testing.T) {
	reqs := []event.PermissionRequested{
		{ID: "perm_1", Kind: event.PermCommand, Title: "Run a command", Detail: "rm -rf build\nand more", Tool: "Bash",
			Input: json.RawMessage(`{"command":"rm -rf build"}`), ItemID: "c1",
			Options: []event.PermissionOption{{ID: "allow", Kind: event.OptionAllowOnce, Label: "Allow"},
				{ID: "always", Kind: event.OptionAllowAlways, Label: "Always allow"}, {ID: "deny", Kind: event.OptionDenyOnce, Label: "Deny"}}},
		{ID: "perm_2", Kind: event.PermFileWrite, Title: "Write a.txt",
			Options: []event.PermissionOption{{ID: "ok", Kind: event.OptionAllowOnce}}},
		{ID: "perm_3", Kind: event.PermNetwork, Title: "Connect to example.com:443", Host: "example.com", Port: 443},
	}
	var b bytes.Buffer
	for _, p := range reqs {
		req := permissionRequest("ses_1", &p, "tc_"+p.ID)
		j, _ := json.Marshal(req)
		b.Write(j)
		b.WriteByte('\n')
		for _, o := range req.Options {
			resp := acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{
				Selected: &acp.RequestPermissionOutcomeSelected{OptionId: o.OptionId, Outcome: "selected"}}}
			d, id := permissionAnswer(req, resp)
			b.WriteString("  " + string(o.OptionId) + " → " + d + " " + id + "\n")
		}
		d, id := permissionAnswer(req, acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{
			Cancelled: &acp.RequestPermissionOutcomeCancelled{Outcome: "cancelled"}}})
		b.WriteString("  (cancelled) → " + d + " " + id + "\n")
	}
	golden.Check(t, filepath.Join("testdata", "permissions.golden"), b.Bytes())
}

func TestStopReason(t *testing.T) {
	for in, want := range map[event.StopReason]acp.StopReason{
		event.StopEndTurn: acp.StopReasonEndTurn, event.StopMaxTokens: acp.StopReasonMaxTokens,
		event.StopInterrupted: acp.StopReasonCancelled, event.StopRefusal: acp.StopReasonRefusal,
	} {
		if got, ok := stopReason(in); !ok || got != want {
			t.Errorf("stopReason(%s) = %s, %v", in, got, ok)
		}
	}
	if _, ok := stopReason(event.StopError); ok {
		t.Error("an error turn has a stop reason")
	}
}

// FuzzDiffTexts feeds arbitrary diffs (an agent's output) to diffTexts:
// it must not panic, keep valid UTF-8 valid, and take from the diff only.
func FuzzDiffTexts(f *testing.F) {
	f.Add("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
	f.Add("@@\n \n-\n+\n\\ x\n@@ -0,0 +1 @@\n+z")
	f.Add("not a diff")
	f.Fuzz(func(t *testing.T, diff string) {
		old, nw, ok := diffTexts(diff)
		if !ok && (old != "" || nw != "") {
			t.Fatalf("not a diff, but texts %q %q", old, nw)
		}
		if utf8.ValidString(diff) && (!utf8.ValidString(old) || !utf8.ValidString(nw)) {
			t.Fatalf("invalid UTF-8 from valid diff %q", diff)
		}
		if len(strings.ReplaceAll(old, "…\n", "")) > len(diff) || len(strings.ReplaceAll(nw, "…\n", "")) > len(diff) {
			t.Fatalf("texts longer than the diff %q", diff)
		}
	})
}

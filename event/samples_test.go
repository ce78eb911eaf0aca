package event_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/event"
)

// sample is one realistic event as it sits in a session's log.
type sample struct {
	Payload event.Payload
	Event   event.Event
}

const (
	sampleSession = "ses_0194b3a0c5e87d2a9f3e61b04c7d2e15"
	sampleTurn    = "turn_0194b3a1d2f07a45b1c8e9d3f6a20b74"
)

var sampleStart = time.Date(2026, 1, 15, 10, 30, 0, 0, time.UTC)

func intp(i int) *int              { return &i }
func floatp(f float64) *float64    { return &f }
func timep(t time.Time) *time.Time { return &t }

// samples returns one realistic session: every event type, every item kind
// (started and completed) and every delta field, in a plausible order.
func samples() []sample {
	daemon, agent := event.SourceDaemon, event.SourceAgent
	expires := sampleStart.Add(5 * time.Minute)
	type s struct {
		src    event.Source
		inTurn bool
		p      event.Payload
	}
	list := []s{
		{daemon, false, &event.SessionStarted{Agent: "claude", Model: "claude-sonnet-4-5", NativeSessionID: "3f2a9c1e-6b7d-4e8f-9a0b-1c2d3e4f5a6b", Cwd: "/workspace/app", Tools: []string{"Bash", "Edit", "Read", "WebSearch"}}},
		{daemon, true, &event.TurnStarted{TurnID: sampleTurn}},
		{daemon, true, &event.ItemStarted{Item: event.Item{ID: "item_0194b3a1d2f17c01", Kind: event.ItemMessage, Status: event.StatusCompleted, Role: event.RoleUser, Content: []event.ContentPart{
			event.TextPart("Fix the failing test and add a changelog entry."),
			{Type: event.PartImage, MimeType: "image/png", Data: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="},
		}}}},
		{daemon, true, &event.ItemCompleted{Item: event.Item{ID: "item_0194b3a1d2f17c01", Kind: event.ItemMessage, Status: event.StatusCompleted, Role: event.RoleUser, Content: []event.ContentPart{
			event.TextPart("Fix the failing test and add a changelog entry."),
			{Type: event.PartImage, MimeType: "image/png", Data: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="},
		}}}},
		{agent, true, &event.ItemStarted{Item: event.Item{ID: "item_0194b3a1d3027c02", Kind: event.ItemReasoning, Status: event.StatusInProgress}}},
		{agent, true, &event.ItemDelta{ItemID: "item_0194b3a1d3027c02", Field: event.DeltaText, Delta: "The test expects a trailing newline; "}},
		{agent, true, &event.ItemCompleted{Item: event.Item{ID: "item_0194b3a1d3027c02", Kind: event.ItemReasoning, Status: event.StatusCompleted, Content: []event.ContentPart{event.TextPart("The test expects a trailing newline; the formatter drops it.")}}}},
		{agent, true, &event.ItemStarted{Item: event.Item{ID: "item_0194b3a1d3127c03", Kind: event.ItemPlan, Status: event.StatusInProgress, Entries: []event.PlanEntry{
			{Content: "Reproduce the failure", Status: event.PlanInProgress, Priority: "high"},
			{Content: "Fix the formatter", Status: event.PlanPending},
			{Content: "Add a changelog entry", Status: event.PlanPending, Priority: "low"},
		}}}},
		{agent, true, &event.ItemCompleted{Item: event.Item{ID: "item_0194b3a1d3127c03", Kind: event.ItemPlan, Status: event.StatusCompleted, Entries: []event.PlanEntry{
			{Content: "Reproduce the failure", Status: event.PlanCompleted, Priority: "high"},
			{Content: "Fix the formatter", Status: event.PlanCompleted},
			{Content: "Add a changelog entry", Status: event.PlanCompleted, Priority: "low"},
		}}}},
		{agent, true, &event.ItemStarted{Item: event.Item{ID: "item_0194b3a1d3227c04", Kind: event.ItemToolCall, Status: event.StatusInProgress, NativeID: "toolu_01A2b3C4d5E6f7G8h9", Name: "Read"}}},
		{agent, true, &event.ItemDelta{ItemID: "item_0194b3a1d3227c04", Field: event.DeltaInput, Delta: `{"file_path":"format.go"}`}},
		{agent, true, &event.ItemCompleted{Item: event.Item{ID: "item_0194b3a1d3227c04", Kind: event.ItemToolCall, Status: event.StatusCompleted, NativeID: "toolu_01A2b3C4d5E6f7G8h9", Name: "Read", Input: json.RawMessage(`{"file_path":"format.go"}`), Output: "package format\n\nfunc Format(s string) string { return strings.TrimSpace(s) }\n"}}},
		{agent, true, &event.ItemStarted{Item: event.Item{ID: "item_0194b3a1d3327c05", Kind: event.ItemCommand, Status: event.StatusInProgress, NativeID: "call_8f7e6d5c", Command: "go test ./format/", Argv: []string{"/bin/sh", "-c", "go test ./format/"}, Cwd: "/workspace/app"}}},
		{daemon, true, &event.PermissionRequested{ID: "perm_0194b3a1d3427c06", Kind: event.PermCommand, Title: "Run go test ./format/", Detail: "/bin/sh -c 'go test ./format/' in /workspace/app", ItemID: "item_0194b3a1d3327c05", Tool: "Bash", Input: json.RawMessage(`{"command":"go test ./format/"}`), Options: []event.PermissionOption{
			{ID: "allow", Kind: event.OptionAllowOnce, Label: "Allow"},
			{ID: "allow_always", Kind: event.OptionAllowAlways, Label: "Always allow go test"},
			{ID: "deny", Kind: event.OptionDenyOnce, Label: "Deny"},
		}, ExpiresAt: timep(expires)}},
		{daemon, true, &event.PermissionResolved{ID: "perm_0194b3a1d3427c06", Decision: event.DecisionAllow, By: event.ByUser, OptionID: "allow"}},
		{agent, true, &event.ItemDelta{ItemID: "item_0194b3a1d3327c05", Field: event.DeltaOutput, Delta: "--- FAIL: TestFormat (0.00s)\n"}},
		{agent, true, &event.ItemCompleted{Item: event.Item{ID: "item_0194b3a1d3327c05", Kind: event.ItemCommand, Status: event.StatusFailed, NativeID: "call_8f7e6d5c", Command: "go test ./format/", Argv: []string{"/bin/sh", "-c", "go test ./format/"}, Cwd: "/workspace/app", Output: "--- FAIL: TestFormat (0.00s)\n    format_test.go:12: missing trailing newline\nFAIL\n", ExitCode: intp(1)}}},
		{agent, true, &event.ItemStarted{Item: event.Item{ID: "item_0194b3a1d3527c07", Kind: event.ItemWebSearch, Status: event.StatusInProgress, Query: "go strings.TrimSpace trailing newline"}}},
		{agent, true, &event.ItemCompleted{Item: event.Item{ID: "item_0194b3a1d3527c07", Kind: event.ItemWebSearch, Status: event.StatusCompleted, Query: "go strings.TrimSpace trailing newline", Output: "strings.TrimSpace removes all leading and trailing white space, including newlines."}}},
		{agent, true, &event.ItemStarted{Item: event.Item{ID: "item_0194b3a1d3627c08", Kind: event.ItemMCPToolCall, Status: event.StatusInProgress, Server: "github", Name: "search_issues", Input: json.RawMessage(`{"query":"trailing newline repo:acme/app"}`)}}},
		{agent, true, &event.ItemCompleted{Item: event.Item{ID: "item_0194b3a1d3627c08", Kind: event.ItemMCPToolCall, Status: event.StatusCompleted, Server: "github", Name: "search_issues", Input: json.RawMessage(`{"query":"trailing newline repo:acme/app"}`), Output: `{"total_count":1,"items":[{"number":42,"title":"Formatter eats the final newline"}]}`}}},
		{daemon, true, &event.QuestionRequested{ID: "q_0194b3a1d3727c09", Prompt: "Which changelog section should the entry go in?", Options: []event.QuestionOption{{ID: "fixed", Label: "Fixed"}, {ID: "changed", Label: "Changed"}}, FreeText: true, ExpiresAt: timep(expires)}},
		{daemon, true, &event.QuestionResolved{ID: "q_0194b3a1d3727c09", Answer: "Fixed", OptionID: "fixed", By: event.ByUser}},
		{agent, true, &event.ItemStarted{Item: event.Item{ID: "item_0194b3a1d3827c0a", Kind: event.ItemFileChange, Status: event.StatusInProgress, Changes: []event.FileChange{{Path: "format.go", Kind: event.FileUpdate}, {Path: "CHANGELOG.md", Kind: event.FileAdd}}}}},
		{agent, true, &event.ItemCompleted{Item: event.Item{ID: "item_0194b3a1d3827c0a", Kind: event.ItemFileChange, Status: event.StatusCompleted, Changes: []event.FileChange{
			{Path: "format.go", Kind: event.FileUpdate, Diff: "--- a/format.go\n+++ b/format.go\n@@ -1,3 +1,3 @@\n package format\n \n-func Format(s string) string { return strings.TrimSpace(s) }\n+func Format(s string) string { return strings.TrimSpace(s) + \"\\n\" }\n"},
			{Path: "CHANGELOG.md", Kind: event.FileAdd, Diff: "--- /dev/null\n+++ b/CHANGELOG.md\n@@ -0,0 +1,3 @@\n+## Fixed\n+\n+- The formatter keeps the final newline (#42).\n"},
		}}}},
		{daemon, true, &event.SandboxViolation{Kind: event.ViolationNetwork, Action: event.ActionBlocked, Detail: "connection to 169.254.169.254:80 denied: cloud metadata endpoints are always denied", Host: "169.254.169.254", Port: 80}},
		{agent, true, &event.Error{Code: "rate_limited", Message: "upstream returned 429 Too Many Requests; retried in 2s", Retryable: true}},
		{agent, true, &event.Native{NativeType: "system/compact_boundary", Payload: json.RawMessage(`{"trigger":"auto","pre_tokens":153000}`)}},
		{agent, true, &event.ItemStarted{Item: event.Item{ID: "item_0194b3a1d3927c0b", Kind: event.ItemMessage, Status: event.StatusInProgress, Role: event.RoleAssistant}}},
		{agent, true, &event.ItemDelta{ItemID: "item_0194b3a1d3927c0b", Field: event.DeltaText, Delta: "Fixed: the formatter "}},
		{agent, true, &event.ItemCompleted{Item: event.Item{ID: "item_0194b3a1d3927c0b", Kind: event.ItemMessage, Status: event.StatusCompleted, Role: event.RoleAssistant, Content: []event.ContentPart{event.TextPart("Fixed: the formatter now keeps the final newline, and CHANGELOG.md has an entry under Fixed.")}}}},
		{daemon, true, &event.TurnCompleted{TurnID: sampleTurn, StopReason: event.StopEndTurn, Usage: &event.Usage{InputTokens: 18234, OutputTokens: 912, CacheReadTokens: 15872, CacheWriteTokens: 2048, CostUSD: floatp(0.0421)}, DurationMS: 48211}},
		{daemon, false, &event.SessionConfigured{Model: "agentbox/gpt-5", Mode: "plan", PreviousModel: "agentbox/gpt-4.1", PreviousMode: "build"}},
		{daemon, false, &event.SessionEnded{Reason: event.EndCompleted, Message: "closed by the client", ExitCode: intp(0)}},
	}
	out := make([]sample, len(list))
	for i, x := range list {
		e := event.New(x.src, x.p)
		seq := int64(i + 1)
		e.ID = fmt.Sprintf("evt_0194b3a1%024x", seq)
		e.Seq = seq
		e.SessionID = sampleSession
		e.Time = sampleStart.Add(time.Duration(i) * 1500 * time.Millisecond)
		e.Schema = event.SchemaVersion
		e.NativeSessionID = "3f2a9c1e-6b7d-4e8f-9a0b-1c2d3e4f5a6b"
		if x.inTurn {
			e.TurnID = sampleTurn
		}
		if _, ok := x.p.(*event.Native); ok {
			e.Raw = json.RawMessage(`{"type":"system","subtype":"compact_boundary","compact_metadata":{"trigger":"auto","pre_tokens":153000}}`)
		}
		out[i] = sample{Payload: x.p, Event: e}
	}
	return out
}

package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	goldenfile "github.com/agentbox/agentbox/internal/golden"
)

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", name), got)
}

// script builds a session's events with seq, time and turn filled in.
type script struct {
	evs  []event.Event
	turn string
}

func (s *script) add(p event.Payload) {
	ev := event.New(event.SourceAgent, p)
	ev.Seq = int64(len(s.evs) + 1)
	ev.ID = fmt.Sprintf("evt_%d", ev.Seq)
	ev.SessionID = "ses_golden"
	ev.Time = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ev.TurnID = s.turn
	s.evs = append(s.evs, ev)
}

func (s *script) raw(typ event.Type, data string) {
	s.evs = append(s.evs, event.Event{Seq: int64(len(s.evs) + 1), SessionID: "ses_golden", Type: typ, Data: json.RawMessage(data)})
}

func exit(n int) *int { return &n }

func usd(v float64) *float64 { return &v }

// goldenEvents covers every event type and every item kind, streamed and
// not, with the states each can end in.
func goldenEvents() []event.Event {
	s := &script{}
	s.add(&event.SessionStarted{Agent: "claude", Model: "sonnet", Cwd: "/work/proj"})
	s.turn = "turn_1"
	s.add(&event.TurnStarted{TurnID: "turn_1"})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "u1", Kind: event.ItemMessage, Status: event.StatusCompleted, Role: event.RoleUser,
		Content: []event.ContentPart{event.TextPart("Fix the failing test\nin main_test.go")}}})

	// Reasoning, streamed over a line break.
	s.add(&event.ItemStarted{Item: event.Item{ID: "r1", Kind: event.ItemReasoning, Status: event.StatusInProgress}})
	s.add(&event.ItemDelta{ItemID: "r1", Field: event.DeltaText, Delta: "The test expects"})
	s.add(&event.ItemDelta{ItemID: "r1", Field: event.DeltaText, Delta: " a trailing newline.\n\nLet me read main.go."})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "r1", Kind: event.ItemReasoning, Status: event.StatusCompleted,
		Content: []event.ContentPart{event.TextPart("The test expects a trailing newline.\n\nLet me read main.go.")}}})

	// A tool call announced with its input; output only at completion.
	s.add(&event.ItemStarted{Item: event.Item{ID: "t1", Kind: event.ItemToolCall, Status: event.StatusInProgress, Name: "Read", Input: json.RawMessage(`{"file_path": "main.go"}`)}})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "t1", Kind: event.ItemToolCall, Status: event.StatusCompleted, Name: "Read", Input: json.RawMessage(`{"file_path":"main.go"}`),
		Output: "package main\n\nfunc main() {}\n"}})

	// A tool call whose input streams: the header waits for the output.
	s.add(&event.ItemStarted{Item: event.Item{ID: "t2", Kind: event.ItemToolCall, Status: event.StatusInProgress, Name: "Grep"}})
	s.add(&event.ItemDelta{ItemID: "t2", Field: event.DeltaInput, Delta: `{"pattern":`})
	s.add(&event.ItemDelta{ItemID: "t2", Field: event.DeltaOutput, Delta: "main.go:3:func main"})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "t2", Kind: event.ItemToolCall, Status: event.StatusFailed, Name: "Grep",
		Input: json.RawMessage(`{"pattern":"main"}`), Output: "main.go:3:func main", Error: "too many matches"}})

	// A permission, then the command it guarded with streamed output.
	s.add(&event.PermissionRequested{ID: "perm_1", Kind: event.PermCommand, Title: "Run go test ./...", Detail: "go test ./...\n\nin /work/proj",
		Options: []event.PermissionOption{{ID: "a", Kind: event.OptionAllowOnce, Label: "Allow"}}})
	s.add(&event.PermissionResolved{ID: "perm_1", Decision: event.DecisionAllow, By: event.ByUser, OptionID: "a"})
	s.add(&event.ItemStarted{Item: event.Item{ID: "c1", Kind: event.ItemCommand, Status: event.StatusInProgress, Command: "go test ./...", Cwd: "/work/proj"}})
	s.add(&event.ItemDelta{ItemID: "c1", Field: event.DeltaOutput, Delta: "--- FAIL: TestMain (0.00s)\n    main_test.go:9: got \"x\""})
	s.add(&event.ItemDelta{ItemID: "c1", Field: event.DeltaOutput, Delta: ", want \"x\\n\"\nFAIL\n"})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "c1", Kind: event.ItemCommand, Status: event.StatusFailed, Command: "go test ./...", ExitCode: exit(1),
		Output: "--- FAIL: TestMain (0.00s)\n    main_test.go:9: got \"x\", want \"x\\n\"\nFAIL\n"}})

	// A command with argv only, declined, and one with a long output.
	s.add(&event.ItemCompleted{Item: event.Item{ID: "c2", Kind: event.ItemCommand, Status: event.StatusDeclined, Argv: []string{"rm", "-rf", "build"}}})
	s.add(&event.PermissionRequested{ID: "perm_2", Kind: event.PermNetwork, Title: "Connect to example.com", Host: "example.com", Port: 443})
	s.add(&event.PermissionResolved{ID: "perm_2", Decision: event.DecisionDeny, By: event.ByPolicy, Message: "network is deny by default"})
	var long strings.Builder
	for i := 1; i <= defaultMaxLines+5; i++ {
		fmt.Fprintf(&long, "line %d\n", i)
	}
	s.add(&event.ItemStarted{Item: event.Item{ID: "c3", Kind: event.ItemCommand, Status: event.StatusInProgress, Command: "seq 45"}})
	s.add(&event.ItemDelta{ItemID: "c3", Field: event.DeltaOutput, Delta: long.String()})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "c3", Kind: event.ItemCommand, Status: event.StatusCompleted, Command: "seq 45", ExitCode: exit(0)}})

	// Streamed assistant text interrupted by another item, then resumed.
	s.add(&event.ItemStarted{Item: event.Item{ID: "m1", Kind: event.ItemMessage, Status: event.StatusInProgress, Role: event.RoleAssistant}})
	s.add(&event.ItemDelta{ItemID: "m1", Field: event.DeltaText, Delta: "I will fix"})
	s.add(&event.ItemDelta{ItemID: "m1", Field: event.DeltaText, Delta: " the test."})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "m1", Kind: event.ItemMessage, Status: event.StatusCompleted, Role: event.RoleAssistant,
		Content: []event.ContentPart{event.TextPart("I will fix the test.")}}})

	s.add(&event.ItemCompleted{Item: event.Item{ID: "f1", Kind: event.ItemFileChange, Status: event.StatusCompleted, Changes: []event.FileChange{
		{Path: "main.go", Kind: event.FileUpdate, Diff: "--- a/main.go\n+++ b/main.go\n@@ -1,3 +1,3 @@\n package main\n-func f() string { return \"x\" }\n+func f() string { return \"x\\n\" }\n"},
		{Path: "NOTES.md", Kind: event.FileAdd},
		{Path: "old.go", Kind: event.FileDelete},
	}}})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "p1", Kind: event.ItemPlan, Status: event.StatusCompleted, Entries: []event.PlanEntry{
		{Content: "Read the test", Status: "completed"},
		{Content: "Fix f", Status: "in_progress", Priority: "high"},
		{Content: "Run the tests", Status: "pending"},
	}}})
	s.add(&event.ItemStarted{Item: event.Item{ID: "w1", Kind: event.ItemWebSearch, Status: event.StatusInProgress, Query: "go trailing newline test"}})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "w1", Kind: event.ItemWebSearch, Status: event.StatusCompleted, Query: "go trailing newline test"}})
	s.add(&event.ItemStarted{Item: event.Item{ID: "x1", Kind: event.ItemMCPToolCall, Status: event.StatusInProgress, Server: "github", Name: "create_issue",
		Input: json.RawMessage(`{"title":"Flaky test","body":"` + strings.Repeat("very long body ", 10) + `"}`)}})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "x1", Kind: event.ItemMCPToolCall, Status: event.StatusCompleted, Server: "github", Name: "create_issue", Output: "issue #42 created"}})

	s.add(&event.QuestionRequested{ID: "q1", Prompt: "Which branch?", Options: []event.QuestionOption{{ID: "main", Label: "main"}, {ID: "dev", Label: "dev"}}})
	s.add(&event.QuestionResolved{ID: "q1", OptionID: "dev", By: event.ByUser})
	s.add(&event.QuestionRequested{ID: "q2", Prompt: "Commit message?", FreeText: true})
	s.add(&event.QuestionResolved{ID: "q2", Answer: "fix: trailing newline", By: event.ByUser})
	s.add(&event.QuestionRequested{ID: "q3", Prompt: "Push?"})
	s.add(&event.QuestionResolved{ID: "q3", Cancelled: true, By: event.ByTimeout})

	s.add(&event.SandboxViolation{Kind: event.ViolationNetwork, Action: event.ActionBlocked, Detail: "metadata address", Host: "169.254.169.254", Port: 80})
	s.add(&event.SandboxViolation{Kind: event.ViolationFilesystem, Action: event.ActionAsked, Detail: "write outside the workspace", Path: "/etc/hosts"})
	s.add(&event.SandboxViolation{Kind: event.ViolationResource, Action: event.ActionBlocked, Detail: "memory limit 2 GiB reached"})
	s.add(&event.Error{Code: "rate_limit", Message: "429 from the model API", Retryable: true})
	s.add(&event.Native{NativeType: "system/hook", Payload: json.RawMessage(`{"x":1}`)})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "m2", Kind: event.ItemMessage, Status: event.StatusCompleted, Role: event.RoleAssistant,
		Content: []event.ContentPart{event.TextPart("Done: the test passes.")}}})
	s.add(&event.TurnCompleted{TurnID: "turn_1", StopReason: event.StopEndTurn, DurationMS: 83_456,
		Usage: &event.Usage{InputTokens: 12_345, OutputTokens: 678, CacheReadTokens: 10_000, CacheWriteTokens: 2_000, CostUSD: usd(0.04213)}})

	s.turn = "turn_2"
	s.add(&event.TurnStarted{TurnID: "turn_2"})
	s.add(&event.ItemDelta{ItemID: "unknown", Field: event.DeltaText, Delta: "text of an item this renderer never saw start"})
	s.add(&event.TurnCompleted{TurnID: "turn_2", StopReason: event.StopInterrupted, DurationMS: 450})
	s.turn = "turn_3"
	s.add(&event.TurnStarted{TurnID: "turn_3"})
	s.add(&event.TurnCompleted{TurnID: "turn_3", StopReason: event.StopError, Message: "the agent exited", DurationMS: 3_725_000, Usage: &event.Usage{InputTokens: 5}})
	s.turn = ""
	s.raw(event.TypeItemStarted, `[1,2]`)
	s.add(&event.SessionEnded{Reason: event.EndError, Message: "agent crashed", ExitCode: exit(2), StderrTail: "panic: boom\n\ngoroutine 1 [running]:"})
	s.add(&event.SessionStarted{Agent: "claude", Resumed: true})
	s.add(&event.SessionConfigured{Model: "opus", PreviousModel: "sonnet"})
	s.add(&event.SessionEnded{Reason: event.EndCompleted})
	return s.evs
}

// TestGoldenCoversEverything keeps the golden sequence honest when the
// schema grows.
func TestGoldenCoversEverything(t *testing.T) {
	t.Parallel()
	types := map[event.Type]bool{}
	kinds := map[event.ItemKind]bool{}
	for _, ev := range goldenEvents() {
		types[ev.Type] = true
		if p, err := ev.Decode(); err == nil {
			switch p := p.(type) {
			case *event.ItemStarted:
				kinds[p.Item.Kind] = true
			case *event.ItemCompleted:
				kinds[p.Item.Kind] = true
			}
		}
	}
	for _, ty := range event.Types {
		if !types[ty] {
			t.Errorf("the golden events have no %s", ty)
		}
	}
	for _, k := range event.ItemKinds {
		if !kinds[k] {
			t.Errorf("the golden events have no %s item", k)
		}
	}
}

func TestRenderGolden(t *testing.T) {
	t.Parallel()
	for _, color := range []bool{false, true} {
		var b bytes.Buffer
		r := NewRenderer(&b, color)
		for _, ev := range goldenEvents() {
			r.Render(ev)
		}
		r.Flush()
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		name := "render.golden"
		if color {
			name = "render_color.golden"
		}
		golden(t, name, b.Bytes())
	}
}

func TestRenderUnlimited(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	r := NewRenderer(&b, false)
	r.MaxLines = 0
	for _, ev := range goldenEvents() {
		r.Render(ev)
	}
	if !strings.Contains(b.String(), "    line 45\n") || strings.Contains(b.String(), "more line") {
		t.Fatalf("MaxLines 0 still cut the output:\n%s", b.String())
	}
}

func TestFormatting(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{850 * time.Millisecond: "850ms", 1250 * time.Millisecond: "1.2s", 125 * time.Second: "2m05s", 3725 * time.Second: "1h02m"} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

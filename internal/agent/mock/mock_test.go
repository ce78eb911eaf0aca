package mock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/google/go-cmp/cmp"
)

func TestScenarios(t *testing.T) {
	cases := []struct {
		name, mode, prompt string
		perms              []agent.PermissionAnswer
		answers            []agent.Answer
		stop               event.StopReason
	}{
		{name: "echo", prompt: "Hello there, mock!"},
		{name: "text", prompt: "/scenario text"},
		{name: "reasoning", prompt: "/scenario reasoning"},
		{name: "tool", prompt: "/scenario tool"},
		{name: "command", prompt: "/scenario command"},
		{name: "write", prompt: "/scenario write notes/hello.txt"},
		{name: "permission-write-allow", prompt: "/scenario permission-write", perms: []agent.PermissionAnswer{allow}},
		{name: "permission-write-deny", prompt: "/scenario permission-write", perms: []agent.PermissionAnswer{deny}},
		{name: "permission-command-allow", prompt: "/scenario permission-command echo allowed", perms: []agent.PermissionAnswer{allow}},
		{name: "permission-command-deny", prompt: "/scenario permission-command echo allowed", perms: []agent.PermissionAnswer{deny}},
		{name: "question", prompt: "/scenario question", answers: []agent.Answer{{OptionID: "green"}}},
		{name: "plan", prompt: "/scenario plan"},
		{name: "error", prompt: "/scenario error", stop: event.StopError},
		{name: "long", prompt: "/scenario long 5"},
		{name: "slow", prompt: "/scenario slow 1ms"},
		{name: "sleep", prompt: "/scenario sleep 1ms"},
		{name: "native", prompt: "/scenario native"},
		{name: "all", prompt: "/scenario all", perms: []agent.PermissionAnswer{allow}, answers: []agent.Answer{{OptionID: "yes"}}},
		{name: "all-plan-mode", mode: "plan", prompt: "/scenario all", answers: []agent.Answer{{Text: "no, stop"}}},
		{name: "script", prompt: ScriptPrompt(
			Step{Kind: KindText, Text: "Custom script.", Chunk: 5},
			Step{Kind: KindTool, Name: "grep", Input: []byte(`{"pattern": "TODO"}`), Error: "grep: no such file"},
			Step{Kind: KindCommand, Command: "printf 'a\\nb'"},
		)},
		{name: "unknown-scenario", prompt: "/scenario dance", stop: event.StopError},
		{name: "invalid-script", prompt: `/mock [{"kind":"text","txt":"typo"}]`, stop: event.StopError},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := &fakeHost{perms: c.perms, answers: c.answers}
			res, cwd := run(t, h, c.mode, c.prompt)
			want := c.stop
			if want == "" {
				want = event.StopEndTurn
			}
			if res.StopReason != want {
				t.Errorf("stop reason %s, want %s", res.StopReason, want)
			}
			if len(h.perms) > 0 || len(h.answers) > 0 {
				t.Errorf("%d permission answers and %d answers were not used", len(h.perms), len(h.answers))
			}
			checkGolden(t, c.name, transcript(t, h.snapshot(), res, cwd))
		})
	}
}

func TestEchoAndUsage(t *testing.T) {
	h := &fakeHost{}
	res, _ := run(t, h, "", "  Hello there,   mock!  ")
	if got := messages(t, h.snapshot()); !slices.Equal(got, []string{"You said: Hello there,   mock!"}) {
		t.Errorf("messages %q", got)
	}
	want := &event.Usage{InputTokens: 3, OutputTokens: 5}
	if diff := cmp.Diff(want, res.Usage); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
}

func TestTextChunks(t *testing.T) {
	h := &fakeHost{}
	run(t, h, "", ScriptPrompt(Step{Kind: KindText, Text: "héllo wörld", Chunk: 3}))
	var deltas []string
	for _, e := range h.snapshot() {
		if e.Type == event.TypeItemDelta {
			p, _ := e.Decode()
			deltas = append(deltas, p.(*event.ItemDelta).Delta)
		}
	}
	if want := []string{"hél", "lo ", "wör", "ld"}; !slices.Equal(deltas, want) {
		t.Errorf("deltas %q, want %q", deltas, want)
	}
}

// risky is a script with gated and ungated risky steps.
var risky = ScriptPrompt(
	Step{Kind: KindPermission}, Step{Kind: KindWrite, Path: "gated.txt", Content: "g\n"},
	Step{Kind: KindPermission}, Step{Kind: KindCommand, Command: "touch gated-cmd"},
	Step{Kind: KindPermission, Text: "May I grep?"}, Step{Kind: KindTool, Name: "grep", Output: "nothing"},
	Step{Kind: KindWrite, Path: "free.txt", Content: "f\n"},
	Step{Kind: KindCommand, Command: "touch free-cmd"},
	Step{Kind: KindTool, Name: "ls", Output: "."},
)

func TestPermissionModes(t *testing.T) {
	all := []string{"gated.txt", "gated-cmd", "free.txt", "free-cmd"}
	cases := []struct {
		mode     string
		perms    []agent.PermissionAnswer
		asks     []event.PermissionKind
		files    []string
		statuses []event.ItemStatus // of the six risky items, in order
		said     []string
	}{
		{"default", []agent.PermissionAnswer{allow, allow, allow},
			[]event.PermissionKind{event.PermFileWrite, event.PermCommand, event.PermTool}, all,
			[]event.ItemStatus{"completed", "completed", "completed", "completed", "completed", "completed"}, nil},
		{"", []agent.PermissionAnswer{deny, deny, {Decision: event.DecisionDeny, By: event.ByTimeout}},
			[]event.PermissionKind{event.PermFileWrite, event.PermCommand, event.PermTool}, []string{"free.txt", "free-cmd"},
			[]event.ItemStatus{"declined", "declined", "declined", "completed", "completed", "completed"},
			[]string{"I did not write gated.txt: permission denied.", "I did not run touch gated-cmd: permission denied.", "I did not use the tool grep: the permission request timed out."}},
		{"accept_edits", []agent.PermissionAnswer{allow, allow},
			[]event.PermissionKind{event.PermCommand, event.PermTool}, all,
			[]event.ItemStatus{"completed", "completed", "completed", "completed", "completed", "completed"}, nil},
		{"bypass", nil, nil, all,
			[]event.ItemStatus{"completed", "completed", "completed", "completed", "completed", "completed"}, nil},
		{"plan", nil, nil, nil,
			[]event.ItemStatus{"declined", "declined", "declined", "declined", "declined", "completed"},
			[]string{"I did not write gated.txt: the session is in plan mode.", "I did not run touch gated-cmd: the session is in plan mode.", "I did not use the tool grep: the session is in plan mode.", "I did not write free.txt: the session is in plan mode.", "I did not run touch free-cmd: the session is in plan mode."}},
	}
	for _, c := range cases {
		t.Run("mode="+c.mode, func(t *testing.T) {
			h := &fakeHost{perms: c.perms}
			_, cwd := run(t, h, c.mode, risky)
			var asks []event.PermissionKind
			for _, r := range h.requests {
				asks = append(asks, r.Kind)
				if r.ItemID == "" || len(r.Options) != 2 {
					t.Errorf("request %q has no item id or not two options", r.Title)
				}
			}
			if !slices.Equal(asks, c.asks) {
				t.Errorf("asked %v, want %v", asks, c.asks)
			}
			if len(h.requests) == 3 && h.requests[2].Title != "May I grep?" {
				t.Errorf("title of the tool request %q, want the permission step's text", h.requests[2].Title)
			}
			for _, f := range all {
				_, err := os.Stat(filepath.Join(cwd, f))
				if exists := err == nil; exists != slices.Contains(c.files, f) {
					t.Errorf("%s exists: %v", f, exists)
				}
			}
			var statuses []event.ItemStatus
			for _, it := range completed(t, h.snapshot()) {
				if it.Kind != event.ItemMessage {
					statuses = append(statuses, it.Status)
				}
			}
			if !slices.Equal(statuses, c.statuses) {
				t.Errorf("statuses %v, want %v", statuses, c.statuses)
			}
			if got := messages(t, h.snapshot()); !slices.Equal(got, c.said) {
				t.Errorf("said %q, want %q", got, c.said)
			}
		})
	}
}

func TestWriteConfinement(t *testing.T) {
	outside := t.TempDir()
	for _, p := range []string{"../x", "/etc/x", "a/../../x", filepath.Join(outside, "abs"), "link/escaped"} {
		t.Run(p, func(t *testing.T) {
			h := &fakeHost{}
			s, cwd := start(t, h, "default")
			if err := os.Symlink(outside, filepath.Join(cwd, "link")); err != nil {
				t.Fatal(err)
			}
			// The permission step is used up by the refused write: nothing is asked.
			res, err := prompt(t.Context(), s, ScriptPrompt(Step{Kind: KindPermission}, Step{Kind: KindWrite, Path: p, Content: "x"}, Step{Kind: KindText, Text: "still here"}))
			if err != nil || res.StopReason != event.StopEndTurn {
				t.Fatalf("Prompt = %+v, %v", res, err)
			}
			checkEvents(t, h.snapshot())
			items := completed(t, h.snapshot())
			if len(items) != 2 || items[0].Status != event.StatusFailed || !strings.Contains(items[0].Error, "refused") {
				t.Fatalf("items %+v, want a refused write and a message", items)
			}
			if items[1].Text() != "still here" {
				t.Errorf("the turn did not go on: %+v", items[1])
			}
			entries, _ := os.ReadDir(outside)
			if len(entries) != 0 {
				t.Errorf("something was written outside the working directory: %v", entries)
			}
			if _, err := os.Stat("/etc/x"); err == nil && p == "/etc/x" {
				t.Errorf("/etc/x exists")
			}
		})
	}
}

func TestWriteUpdateDiff(t *testing.T) {
	h := &fakeHost{}
	s, cwd := start(t, h, "bypass")
	if err := os.WriteFile(filepath.Join(cwd, "f.txt"), []byte("one\ntwo\nthree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := prompt(t.Context(), s, ScriptPrompt(Step{Kind: KindWrite, Path: "./sub/../f.txt", Content: "one\n2\nthree\n"})); err != nil {
		t.Fatal(err)
	}
	items := completed(t, h.snapshot())
	want := []event.FileChange{{Path: "f.txt", Kind: event.FileUpdate, Diff: "--- a/f.txt\n+++ b/f.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"}}
	if diff := cmp.Diff(want, items[0].Changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	b, _ := os.ReadFile(filepath.Join(cwd, "f.txt"))
	if string(b) != "one\n2\nthree\n" {
		t.Errorf("file holds %q", b)
	}
}

func TestCommandOutputAndExitCode(t *testing.T) {
	h := &fakeHost{}
	_, cwd := run(t, h, "", ScriptPrompt(Step{Kind: KindCommand, Command: `printf 'out\n'; printf 'err\n' >&2; echo "$HOME|$PWD|${SECRET_TOKEN:-unset}"; exit 3`}))
	it := completed(t, h.snapshot())[0]
	wantOut := "out\nerr\n" + cwd + "|" + cwd + "|unset\n"
	if it.Status != event.StatusFailed || it.ExitCode == nil || *it.ExitCode != 3 || it.Output != wantOut || it.Cwd != cwd {
		t.Errorf("item %+v (exit %v), want failed, exit 3, output %q", it, it.ExitCode, wantOut)
	}

	h = &fakeHost{}
	run(t, h, "", ScriptPrompt(Step{Kind: KindCommand, Command: "true"}))
	it = completed(t, h.snapshot())[0]
	if it.Status != event.StatusCompleted || it.ExitCode == nil || *it.ExitCode != 0 || it.Output != "" {
		t.Errorf("item %+v, want completed with exit 0", it)
	}
}

func TestCommandEnvironmentHasNoSecrets(t *testing.T) {
	t.Setenv("SECRET_TOKEN", "hunter2")
	h := &fakeHost{}
	run(t, h, "", ScriptPrompt(Step{Kind: KindCommand, Command: "env"}))
	if out := completed(t, h.snapshot())[0].Output; strings.Contains(out, "hunter2") {
		t.Errorf("the daemon's environment leaked into the command:\n%s", out)
	}
}

func TestCommandSplitsNoRune(t *testing.T) {
	h := &fakeHost{}
	run(t, h, "", ScriptPrompt(Step{Kind: KindCommand, Command: `printf '\303'; sleep 0.2; printf '\251t\303'`}))
	it := completed(t, h.snapshot())[0]
	if it.Output != "ét\uFFFD" { // a lone byte left at the end is invalid, and JSON replaces it

		t.Errorf("output %q", it.Output)
	}
	// checkEvents has verified that the deltas add up to the output; each
	// delta but the last (the flushed remainder) must be valid UTF-8.
	var deltas []string
	for _, e := range h.snapshot() {
		if e.Type == event.TypeItemDelta {
			p, _ := e.Decode()
			deltas = append(deltas, p.(*event.ItemDelta).Delta)
		}
	}
	if len(deltas) == 0 || deltas[0] == "\xc3" || !strings.HasPrefix(strings.Join(deltas, ""), "ét") {
		t.Errorf("deltas %q", deltas)
	}
}

func TestCommandTimeout(t *testing.T) {
	h := &fakeHost{}
	begin := time.Now()
	res, _ := run(t, h, "", ScriptPrompt(Step{Kind: KindCommand, Command: "echo begun; sleep 30", Timeout: Duration(300 * time.Millisecond)}, Step{Kind: KindText, Text: "after"}))
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("took %s", d)
	}
	items := completed(t, h.snapshot())
	if it := items[0]; it.Status != event.StatusFailed || it.Error != "timed out after 300ms" || it.Output != "begun\n" || it.ExitCode != nil {
		t.Errorf("item %+v", it)
	}
	if res.StopReason != event.StopEndTurn || len(items) != 2 {
		t.Errorf("the turn did not go on after the timeout: %s, %d items", res.StopReason, len(items))
	}
}

func TestCommandOutputCap(t *testing.T) {
	h := &fakeHost{}
	run(t, h, "", ScriptPrompt(Step{Kind: KindCommand, Command: "head -c 1500000 /dev/zero | tr '\\000' a"}))
	it := completed(t, h.snapshot())[0]
	if len(it.Output) != maxOutput+len(truncatedNote) || !strings.HasSuffix(it.Output, truncatedNote) || *it.ExitCode != 0 {
		t.Errorf("output of %d bytes, exit %v", len(it.Output), it.ExitCode)
	}
}

func TestQuestionAnswers(t *testing.T) {
	for _, c := range []struct {
		ans  agent.Answer
		said string
	}{
		{agent.Answer{Text: "teal"}, "You answered: teal"},
		{agent.Answer{OptionID: "blue"}, "You answered: Blue"},
		{agent.Answer{Cancelled: true}, "You did not answer, so I carry on without an answer."},
	} {
		h := &fakeHost{answers: []agent.Answer{c.ans}}
		run(t, h, "", "/scenario question")
		if got := messages(t, h.snapshot()); !slices.Equal(got, []string{c.said}) {
			t.Errorf("answer %+v: said %q, want %q", c.ans, got, c.said)
		}
		if q := h.questions[0]; q.Prompt == "" || len(q.Options) != 3 || !q.FreeText {
			t.Errorf("question %+v", q)
		}
	}
}

func TestFatalError(t *testing.T) {
	h := &fakeHost{}
	s, _ := start(t, h, "")
	_, err := prompt(t.Context(), s, ScriptPrompt(Step{Kind: KindError, Text: "boom", Fatal: true}, Step{Kind: KindText, Text: "never"}))
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("err = %v", err)
	}
	if evs := h.snapshot(); len(evs) != 0 {
		t.Errorf("a fatal error emitted %d events", len(evs))
	}
}

// interrupt runs text and cancels the turn when cancelWhen says so (or
// after delay). It checks that the turn ended as interrupted, without an
// error, promptly, and that nothing but the open item's completion came
// after the cancel.
func interrupt(t *testing.T, h *fakeHost, text string, delay time.Duration, cancelWhen func(event.Event) bool) []event.Event {
	t.Helper()
	s, _ := start(t, h, "")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var cancelledAt int
	if cancelWhen != nil {
		h.onEmit = func(e event.Event) {
			if cancelWhen(e) && ctx.Err() == nil {
				cancelledAt = int(e.Seq)
				cancel()
			}
		}
	} else {
		time.AfterFunc(delay, func() {
			h.mu.Lock()
			cancelledAt = len(h.events)
			h.mu.Unlock()
			cancel()
		})
	}
	begin := time.Now()
	res, err := prompt(ctx, s, text)
	if err != nil {
		t.Fatalf("an interrupted turn returned an error: %v", err)
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("the turn took %s to stop", d)
	}
	if res.StopReason != event.StopInterrupted {
		t.Errorf("stop reason %s", res.StopReason)
	}
	evs := h.snapshot()
	checkEvents(t, evs)
	for _, e := range evs[cancelledAt:] {
		if e.Type != event.TypeItemCompleted {
			t.Errorf("event after the interrupt: %s %s", e.Type, e.Data)
		}
	}
	return evs
}

func TestInterruptLong(t *testing.T) {
	h := &fakeHost{}
	deltas := 0
	evs := interrupt(t, h, "/scenario long 10000", 0, func(e event.Event) bool {
		if e.Type == event.TypeItemDelta {
			deltas++
		}
		return deltas == 100
	})
	last := completed(t, evs)
	if len(last) != 1 || last[0].Status != event.StatusFailed || last[0].Error != "interrupted" {
		t.Fatalf("completed items %+v", last)
	}
	if n := len(strings.Fields(last[0].Text())); n != 100 {
		t.Errorf("the interrupted message kept %d deltas, want 100", n)
	}
}

func TestInterruptSleep(t *testing.T) {
	evs := interrupt(t, &fakeHost{}, "/scenario sleep 1h", 50*time.Millisecond, nil)
	if len(evs) != 0 {
		t.Errorf("events %v", evs)
	}
}

func TestInterruptSlowText(t *testing.T) {
	evs := interrupt(t, &fakeHost{}, "/scenario slow 1h", 50*time.Millisecond, nil)
	if it := completed(t, evs); len(it) != 1 || it[0].Status != event.StatusFailed {
		t.Errorf("items %+v", it)
	}
}

func TestInterruptCommand(t *testing.T) {
	h := &fakeHost{}
	evs := interrupt(t, h, ScriptPrompt(Step{Kind: KindCommand, Command: "sleep 30 & echo $! > child.pid; echo begun; wait"}, Step{Kind: KindText, Text: "never"}), 0,
		func(e event.Event) bool { return e.Type == event.TypeItemDelta })
	it := completed(t, evs)
	if len(it) != 1 || it[0].Status != event.StatusFailed || it[0].Error != "interrupted" || it[0].Output != "begun\n" {
		t.Fatalf("items %+v", it)
	}
	// The shell's child is killed with it.
	b, err := os.ReadFile(filepath.Join(it[0].Cwd, "child.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(5 * time.Second)
	for alive(t, pid) {
		if time.Now().After(deadline) {
			t.Fatalf("child %d of the interrupted command still runs", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether pid runs (a zombie does not count), from /proc.
func alive(t *testing.T, pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat("/proc/self/stat"); err != nil {
			t.Skip("no /proc to check the child with")
		}
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	// The state follows the command name in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestInterruptWhileAskingPermission(t *testing.T) {
	h := &fakeHost{block: true}
	asked := false
	evs := interrupt(t, h, "/scenario permission-write", 0, func(e event.Event) bool {
		asked = asked || e.Type == event.TypePermissionRequested
		return asked
	})
	if !asked {
		t.Fatal("no permission was requested")
	}
	items := completed(t, evs)
	if w := items[len(items)-1]; w.Kind != event.ItemFileChange || w.Status != event.StatusFailed || w.Error != "interrupted" {
		t.Errorf("last item %+v", w)
	}
}

func TestInterruptWhileAsking(t *testing.T) {
	evs := interrupt(t, &fakeHost{block: true}, "/scenario question", 0, func(e event.Event) bool {
		return e.Type == event.TypeQuestionRequested
	})
	if len(completed(t, evs)) != 0 {
		t.Errorf("items after an interrupted question: %v", evs)
	}
}

// running starts a turn that says something and then sleeps, and returns
// once it runs, with a channel closed when Prompt returned.
func running(ctx context.Context, t *testing.T, h *fakeHost, s agent.Session) (<-chan struct{}, *agent.Result, *error) {
	t.Helper()
	started := make(chan struct{})
	var once sync.Once
	h.onEmit = func(event.Event) { once.Do(func() { close(started) }) }
	done := make(chan struct{})
	var res agent.Result
	var err error
	go func() {
		defer close(done)
		res, err = prompt(ctx, s, ScriptPrompt(Step{Kind: KindText, Text: "on it"}, Step{Kind: KindSleep, Duration: Duration(time.Hour)}))
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the turn did not start")
	}
	return done, &res, &err
}

func TestCloseInterruptsAndRefuses(t *testing.T) {
	h := &fakeHost{}
	s, _ := start(t, h, "")
	done, res, err := running(t.Context(), t, h, s)
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not stop the turn")
	}
	if *err != nil || res.StopReason != event.StopInterrupted {
		t.Errorf("Prompt = %+v, %v", *res, *err)
	}
	if _, err := prompt(t.Context(), s, "hi"); !errors.Is(err, errClosed) {
		t.Errorf("Prompt after Close: %v", err)
	}
}

func TestOneTurnAtATime(t *testing.T) {
	h := &fakeHost{}
	s, _ := start(t, h, "")
	ctx, cancel := context.WithCancel(t.Context())
	done, _, _ := running(ctx, t, h, s)
	if _, err := prompt(t.Context(), s, "hi"); !errors.Is(err, errBusy) {
		t.Errorf("a second concurrent turn: %v", err)
	}
	cancel()
	<-done
	if _, err := prompt(t.Context(), s, "hi"); err != nil {
		t.Errorf("a turn after the first ended: %v", err)
	}
}

func TestStart(t *testing.T) {
	h := &fakeHost{t: t}
	ctx := t.Context()
	if _, err := New().Start(ctx, agent.Config{Cwd: t.TempDir(), PermissionMode: "yolo"}, h); err == nil {
		t.Error("unknown permission mode accepted")
	}
	if _, err := New().Start(ctx, agent.Config{Cwd: "relative"}, h); err == nil {
		t.Error("relative working directory accepted")
	}
	if _, err := New().Start(ctx, agent.Config{Cwd: filepath.Join(t.TempDir(), "missing")}, h); err == nil {
		t.Error("missing working directory accepted")
	}
	if _, err := New().Start(ctx, agent.Config{SessionID: "ses_1", Cwd: t.TempDir()}, h); err != nil || h.nativeID != "mock-ses_1" {
		t.Errorf("Start: %v, native id %q", err, h.nativeID)
	}
}

func TestInfo(t *testing.T) {
	info := New().Info(t.Context())
	want := agent.Capabilities{Text: true, Deltas: true, Reasoning: true, ToolCalls: true, CommandOutput: true, FileChanges: true, Diffs: true, Permissions: true, Questions: true, Plans: true, Usage: true, Interrupt: true, Resume: true}
	if info.Name != Name || !info.Available || info.Capabilities != want {
		t.Errorf("Info = %+v", info)
	}
}

func TestScriptValidation(t *testing.T) {
	for _, bad := range []string{
		`/mock`, `/mock {}`, `/mock []`, `/mock [{"kind":"dance"}]`, `/mock [{"kind":"text"}]`,
		`/mock [{"kind":"text","text":"a"}] trailing`, `/mock [{"kind":"long","count":0}]`,
		`/mock [{"kind":"sleep","duration":"soon"}]`, `/mock [{"kind":"command"}]`, `/mock [{"kind":"write","content":"x"}]`,
		`/mock [{"kind":"plan"}]`, `/mock [{"kind":"text","text":"a","chunk":-1}]`, `/scenario long many`, `/scenario`,
	} {
		if _, err := script(bad); err == nil {
			t.Errorf("script(%q) accepted", bad)
		}
	}
	steps, err := script(`/mock [{"kind":"sleep","duration":1500},{"kind":"sleep","duration":"2s"}]`)
	if err != nil || steps[0].Duration != Duration(1500*time.Millisecond) || steps[1].Duration != Duration(2*time.Second) {
		t.Errorf("durations: %+v, %v", steps, err)
	}
	for name := range scenarios {
		if _, err := script("/scenario " + name); err != nil {
			t.Errorf("scenario %s: %v", name, err)
		}
	}
	if steps, _ := script("/mockery"); steps[0].Text != "You said: /mockery" {
		t.Errorf("/mockery is not echoed: %+v", steps)
	}
	if steps, err := script("/mock\n[{\"kind\":\"text\",\"text\":\"a\"}]"); err != nil || steps[0].Text != "a" {
		t.Errorf("a script after a newline: %+v, %v", steps, err)
	}
	if steps, err := script("/scenario\tcommand  echo  a b "); err != nil || steps[1].Command != "echo  a b" {
		t.Errorf("scenario argument: %+v, %v", steps, err)
	}
}

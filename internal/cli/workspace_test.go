package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/snapshot"
	"github.com/agentbox/agentbox/internal/stacktest"
)

// runMockTurn sends steps to session id and waits for the turn's end.
func runMockTurn(t *testing.T, c *client.Client, id string, steps ...mock.Step) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	after, err := c.LastSeq(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := c.Send(ctx, id, mockScript(t, steps...))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := c.WaitTurn(ctx, id, tr.TurnID, after, func(event.Event) error { return nil })
	if err != nil || tc.StopReason != event.StopEndTurn {
		t.Fatalf("turn: %+v, %v", tc, err)
	}
	return tr.TurnID
}

// TestSessionsDiff: the diff of a session whose agent named a file and
// wrote content with terminal controls reaches a pipe byte for byte (so it
// can be applied), a terminal inert, and --name-status and --json say the
// same; bad and unknown ids are errors.
func TestSessionsDiff(t *testing.T) {
	h := newHarness(t, stacktest.Options{Engine: func(c *engine.Config) {
		st, err := snapshot.New(t.TempDir(), snapshot.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		c.Snapshots = st
	}})
	c := h.client()
	s, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", PermissionMode: client.PermissionBypass})
	if err != nil {
		t.Fatal(err)
	}
	const hostile = "x\x1b]52;c;aGk=\x07.txt"
	tid := runMockTurn(t, c, s.ID,
		mock.Step{Kind: mock.KindWrite, Path: "ok.txt", Content: "fine\n"},
		mock.Step{Kind: mock.KindWrite, Path: hostile, Content: "a\x1b[2Jb\n"},
	)
	want, err := c.Diff(t.Context(), s.ID, client.DiffOptions{Turn: tid})
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Files) != 2 || !strings.Contains(want.Diff, "+a\x1b[2Jb\n") {
		t.Fatalf("diff %+v", want)
	}

	h.terminal = false
	r := h.run(t.Context(), nil, "sessions", "diff", s.ID)
	if r.code != 0 || r.stdout != want.Diff {
		t.Errorf("to a pipe: exit %d, stdout %q, want the diff byte for byte %q (stderr %q)", r.code, r.stdout, want.Diff, r.stderr)
	}
	r = h.run(t.Context(), nil, "sessions", "diff", s.ID, "--turn", tid, "--name-status")
	if r.code != 0 || r.stdout != "A\tok.txt\nA\t"+hostile+"\n" {
		t.Errorf("--name-status to a pipe: exit %d, stdout %q", r.code, r.stdout)
	}

	h.terminal = true
	for _, args := range [][]string{{}, {"--name-status"}, {"--json"}} {
		r = h.run(t.Context(), nil, append([]string{"sessions", "diff", s.ID}, args...)...)
		if r.code != 0 || !strings.Contains(r.stdout, "ok.txt") {
			t.Errorf("%v to a terminal: exit %d, stdout %q", args, r.code, r.stdout)
		}
		checkInert(t, "sessions diff "+strings.Join(args, " "), r.stdout)
	}
	var got client.SessionDiff
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.Files[1].Path != hostile || got.Diff != want.Diff {
		t.Errorf("--json: %v %+v", err, got)
	}

	r = h.run(t.Context(), nil, "sessions", "diff", s.ID, "--turn", "nope")
	r.check(t, 1, nil, []string{"422"})
	r = h.run(t.Context(), nil, "sessions", "diff", "ses_0123456789abcdef0123456789abcdef")
	r.check(t, 1, nil, []string{"404"})
}

// TestSessionsExec runs commands in a sandboxed session's sandbox: output,
// stdin and exit status as agentbox exec gives them, output to a terminal
// inert; a session on the host is refused.
func TestSessionsExec(t *testing.T) {
	h := sandboxedHarness(t)
	id := h.sandboxed(t, `"agent-default"`)
	if t.Failed() {
		t.FailNow()
	}
	tests := []struct {
		name     string
		stdin    string
		terminal bool
		args     []string
		code     int
		stdout   string
		stderr   []string
	}{
		{"status and streams", "", false, []string{"--", "sh", "-c", "id -u; echo err >&2; exit 3"}, 3, "1000\n", []string{"err\n"}},
		{"stdin", "piped", false, []string{"--", "cat"}, 0, "piped", nil},
		// The timeout ends the command, not the sandbox: the tests
		// after it run in the same one.
		{"timeout", "", false, []string{"--timeout", "300ms", "--", "sh", "-c", "sleep 30 & sleep 30"}, ExitTimeout, "", []string{"timeout"}},
		{"to a terminal", "", true, []string{"--", "printf", `a\033]52;c;aGk=\007b\n`}, 0, `a\x1b]52;c;aGk=\x07b` + "\n", nil},
		{"no command", "", false, nil, 1, "", []string{"requires at least 2 arg"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.terminal = tt.terminal
			r := h.run(t.Context(), strings.NewReader(tt.stdin), append([]string{"sessions", "exec", id}, tt.args...)...)
			if r.code != tt.code || r.stdout != tt.stdout {
				t.Fatalf("exit %d stdout %q stderr %q; want %d %q", r.code, r.stdout, r.stderr, tt.code, tt.stdout)
			}
			for _, s := range tt.stderr {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr %q lacks %q", r.stderr, s)
				}
			}
		})
	}
	h.terminal = false
	r := h.run(t.Context(), nil, "--json", "sessions", "exec", id, "--", "sh", "-c", "echo hi; exit 5")
	var res client.ExecResult
	if err := json.Unmarshal([]byte(r.stdout), &res); r.code != 5 || err != nil || res.Stdout != "hi\n" || res.Sandbox.Runtime != "process" {
		t.Errorf("--json: exit %d %v %+v", r.code, err, res)
	}

	host, err := h.client().CreateSession(t.Context(), client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	r = h.run(t.Context(), nil, "sessions", "exec", host.ID, "--", "true")
	r.check(t, 1, nil, []string{"409", "has no sandbox"})
}

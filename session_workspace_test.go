package agentbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent/mock"
)

// TestSessionDiff has the mock agent change a workspace over two turns,
// on the host and in a sandbox, and reads the changes back: since the
// session started and per turn, with binary files listed and not diffed,
// the bad and unknown ids refused, and the same answers after a restart of
// the daemon on the same data directory.
func TestSessionDiff(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy json.RawMessage
	}{
		{"host", nil},
		{"sandboxed", json.RawMessage(`"agent-default"`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.policy != nil {
				requireSandbox(t)
			}
			cwd := t.TempDir()
			for name, content := range map[string]string{"keep.txt": "a\nb\nc\n", "gone.txt": "bye\n", "same.txt": "same\n"} {
				if err := os.WriteFile(filepath.Join(cwd, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			data := t.TempDir()
			opts := agentbox.Options{DataDir: data, GlobalPolicy: globalPolicy(t, cwd)}
			srv, err := agentbox.Start(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			c := srv.Client()
			s, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Cwd: cwd, PermissionMode: client.PermissionBypass, Policy: tc.policy})
			if err != nil {
				t.Fatal(err)
			}
			t1, _ := turnID(t, c, s.ID, mock.ScriptPrompt(
				mock.Step{Kind: mock.KindWrite, Path: "keep.txt", Content: "a\nB\nc\n"},
				mock.Step{Kind: mock.KindWrite, Path: "new.txt", Content: "fresh\n"},
				mock.Step{Kind: mock.KindCommand, Command: `rm gone.txt; printf 'x\000y' > bin.dat`},
			))
			t2, _ := turnID(t, c, s.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindWrite, Path: "later.txt", Content: "2\n"}))

			check := func(t *testing.T, c *client.Client) {
				all, err := c.Diff(t.Context(), s.ID, client.DiffOptions{})
				if err != nil {
					t.Fatal(err)
				}
				want := []client.DiffFile{
					{Path: "bin.dat", Status: client.DiffAdded, Binary: true},
					{Path: "gone.txt", Status: client.DiffDeleted},
					{Path: "keep.txt", Status: client.DiffModified},
					{Path: "later.txt", Status: client.DiffAdded},
					{Path: "new.txt", Status: client.DiffAdded},
				}
				if !slices.Equal(all.Files, want) || all.Truncated {
					t.Errorf("diff since the start: %+v (truncated %v), want %+v", all.Files, all.Truncated, want)
				}
				for _, part := range []string{
					"--- a/keep.txt\n+++ b/keep.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n",
					"--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n",
					"--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+fresh\n",
					"Binary files /dev/null and b/bin.dat differ\n",
				} {
					if !strings.Contains(all.Diff, part) {
						t.Errorf("diff lacks %q:\n%s", part, all.Diff)
					}
				}
				d1, err := c.Diff(t.Context(), s.ID, client.DiffOptions{Turn: t1})
				if err != nil {
					t.Fatal(err)
				}
				if len(d1.Files) != 4 || slices.ContainsFunc(d1.Files, func(f client.DiffFile) bool { return f.Path == "later.txt" }) {
					t.Errorf("turn 1's diff: %+v, want its four changes", d1.Files)
				}
				d2, err := c.Diff(t.Context(), s.ID, client.DiffOptions{Turn: t2})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(d2.Files, []client.DiffFile{{Path: "later.txt", Status: client.DiffAdded}}) || d2.Diff != "--- /dev/null\n+++ b/later.txt\n@@ -0,0 +1 @@\n+2\n" {
					t.Errorf("turn 2's diff: %+v %q, want later.txt alone", d2.Files, d2.Diff)
				}
				_, err = c.Diff(t.Context(), s.ID, client.DiffOptions{Turn: "nope"})
				wantStatus(t, "a malformed turn id", err, http.StatusUnprocessableEntity)
				_, err = c.Diff(t.Context(), s.ID, client.DiffOptions{Turn: "turn_0123456789abcdef0123456789abcdef"})
				wantStatus(t, "a turn of no session", err, http.StatusNotFound)
				_, err = c.Diff(t.Context(), "ses_0123456789abcdef0123456789abcdef", client.DiffOptions{})
				wantStatus(t, "an unknown session", err, http.StatusNotFound)
			}
			t.Run("live", func(t *testing.T) { check(t, c) })
			if err := srv.Close(); err != nil {
				t.Fatal(err)
			}
			// The states are on disk: a new daemon answers the same.
			srv2 := start(t, opts)
			t.Run("after restart", func(t *testing.T) { check(t, srv2.Client()) })
		})
	}
}

// TestSessionExec runs commands in a sandboxed session's sandbox beside
// the mock agent: as the sandbox's user, in the workspace the agent sees,
// with no policy of its own; what a command writes reaches the host only
// through the session's commit at the end of the next turn, protected paths
// dropped there as the agent's are, and the turn's diff shows it. A session
// on the host, an unknown one and a policy in the body are refused.
func TestSessionExec(t *testing.T) {
	requireSandbox(t)
	cwd := t.TempDir()
	if err := os.WriteFile(filepath.Join(cwd, "CLAUDE.md"), []byte("be nice\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := start(t, agentbox.Options{GlobalPolicy: globalPolicy(t, cwd)})
	c := srv.Client()
	s, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Cwd: cwd, PermissionMode: client.PermissionBypass, Policy: json.RawMessage(`"agent-default"`)})
	if err != nil {
		t.Fatal(err)
	}
	turnID(t, c, s.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindWrite, Path: "agent.txt", Content: "by the agent\n"}))

	res, err := c.SessionExec(t.Context(), s.ID, client.SessionExecRequest{
		Argv:  []string{"sh", "-c", "id -u; cat agent.txt; cat; echo by exec > exec.txt; echo evil >> CLAUDE.md"},
		Stdin: "from stdin\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || res.Stdout != "1000\nby the agent\nfrom stdin\n" || res.Sandbox.Runtime != "process" {
		t.Fatalf("exec: %+v, want uid 1000, the agent's file and stdin, in the process runtime", res)
	}
	if _, err := os.Stat(filepath.Join(cwd, "exec.txt")); err == nil {
		t.Error("exec.txt reached the host before the session's commit")
	}
	res, err = c.SessionExec(t.Context(), s.ID, client.SessionExecRequest{Argv: []string{"sh", "-c", "exit 3"}})
	if err != nil || res.ExitCode != 3 {
		t.Errorf("exit 3: %+v, %v", res, err)
	}

	// A timeout ends the command's processes, not the session's sandbox:
	// the agent's next turn runs in it.
	res, err = c.SessionExec(t.Context(), s.ID, client.SessionExecRequest{Argv: []string{"sh", "-c", "sleep 60 & sleep 60"}, TimeoutMS: 300})
	if err != nil || res.Error == nil || res.Error.Code != "timeout" || res.Signal != "SIGKILL" {
		t.Errorf("a command past its timeout: %+v, %v", res, err)
	}
	res, err = c.SessionExec(t.Context(), s.ID, client.SessionExecRequest{Argv: []string{"sh", "-c", "pgrep -c sleep || true"}})
	if err != nil || res.Stdout != "0\n" {
		t.Errorf("after the timeout: %+v, %v; want no sleep left in the sandbox", res, err)
	}
	tid, evs := turnID(t, c, s.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindText, Text: "done"}))
	if b, err := os.ReadFile(filepath.Join(cwd, "exec.txt")); err != nil || string(b) != "by exec\n" {
		t.Errorf("exec.txt on the host after the turn: %q, %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(cwd, "CLAUDE.md")); string(b) != "be nice\n" {
		t.Errorf("CLAUDE.md on the host changed to %q by a command", b)
	}
	if !hasViolation(t, evs, "CLAUDE.md", event.ActionDropped) {
		t.Error("no sandbox.violation for the command's write to CLAUDE.md")
	}
	d, err := c.Diff(t.Context(), s.ID, client.DiffOptions{Turn: tid})
	if err != nil || !slices.Equal(d.Files, []client.DiffFile{{Path: "exec.txt", Status: client.DiffAdded}}) {
		t.Errorf("the turn's diff: %+v, %v; want the command's file", d.Files, err)
	}

	// At most four commands at once; a client that goes away ends its
	// command (and only its command).
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 4)
	for range 4 {
		go func() {
			for {
				_, err := c.SessionExec(ctx, s.ID, client.SessionExecRequest{Argv: []string{"sh", "-c", "sleep 120 & sleep 120"}})
				var ae *client.APIError
				if errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests && ctx.Err() == nil {
					continue // the probe below took the slot for a moment
				}
				done <- err
				return
			}
		}()
	}
	for deadline := time.Now().Add(time.Minute); ; {
		_, err := c.SessionExec(t.Context(), s.ID, client.SessionExecRequest{Argv: []string{"true"}})
		if err != nil {
			wantStatus(t, "a fifth command", err, http.StatusTooManyRequests)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("four running commands never made a fifth one wait")
		}
	}
	cancel()
	for range 4 {
		if err := <-done; err == nil {
			t.Error("a command whose client went away answered")
		}
	}
	for deadline := time.Now().Add(time.Minute); ; {
		res, err := c.SessionExec(t.Context(), s.ID, client.SessionExecRequest{Argv: []string{"sh", "-c", "pgrep -c sleep || true"}})
		if err == nil && res.Stdout == "0\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the commands of clients gone are still running: %+v, %v", res, err)
		}
	}

	// A policy of its own is refused: the session's applies.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL()+"/v1/sessions/"+s.ID+"/exec",
		strings.NewReader(`{"argv":["true"],"policy":"exec-default"}`))
	req.Header.Set("Authorization", "Bearer "+srv.Token())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("a policy in the body: %s, want 422", resp.Status)
	}
	_, err = c.SessionExec(t.Context(), "ses_0123456789abcdef0123456789abcdef", client.SessionExecRequest{Argv: []string{"true"}})
	wantStatus(t, "an unknown session", err, http.StatusNotFound)

	host, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Cwd: cwd})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.SessionExec(t.Context(), host.ID, client.SessionExecRequest{Argv: []string{"true"}})
	if !client.HasProblemType(err, client.ProblemNoSandbox) {
		t.Errorf("exec in a session on the host: %v, want a no-sandbox problem", err)
	}
	if err := c.DeleteSession(t.Context(), s.ID, false); err != nil {
		t.Fatal(err)
	}
	_, err = c.SessionExec(t.Context(), s.ID, client.SessionExecRequest{Argv: []string{"true"}})
	if !client.HasProblemType(err, client.ProblemNotLive) {
		t.Errorf("exec in an ended session: %v, want a not-live problem", err)
	}
}

// turnID runs one turn to its end and returns its id and events.
func turnID(t *testing.T, c *client.Client, sid, text string) (string, []event.Event) {
	t.Helper()
	tc, evs := turn(t, c, sid, text)
	if tc.StopReason != event.StopEndTurn {
		t.Fatalf("turn: %+v", tc)
	}
	return tc.TurnID, evs
}

func wantStatus(t *testing.T, what string, err error, status int) {
	t.Helper()
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != status {
		t.Errorf("%s: %v, want status %d", what, err, status)
	}
}

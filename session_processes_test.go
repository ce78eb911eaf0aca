package agentbox_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent/mock"
)

// TestSessionProcesses starts processes in a sandboxed session's sandbox
// beside the mock agent through /v1/sessions/{id}/processes: in the
// workspace the agent sees, driven with the shapes of /v1/processes
// (stdin, stream, signal, wait, delete); a SIGKILL ends the process's
// group and not the session (the agent's next turn runs); a process of
// one session is 404 through another; a session on the host is refused
// (409 no-sandbox); and when the session is deleted, its running process
// is killed and its exit says sandbox_closed.
func TestSessionProcesses(t *testing.T) {
	requireSandbox(t)
	cwd := t.TempDir()
	srv := start(t, agentbox.Options{GlobalPolicy: globalPolicy(t, cwd)})
	c := srv.Client()
	create := func() client.Session {
		t.Helper()
		s, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Cwd: cwd, PermissionMode: client.PermissionBypass, Policy: json.RawMessage(`"agent-default"`)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s, other := create(), create()
	turnID(t, c, s.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindWrite, Path: "agent.txt", Content: "by the agent\n"}))
	ps := c.SessionProcesses(s.ID)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// stdin, output and exit, in the agent's workspace.
	p, err := ps.Start(ctx, client.SessionStartProcess{Argv: []string{"sh", "-c", "cat agent.txt; read x; echo got $x; exit 4"}, Stdin: true, Tag: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ps.SendStdin(ctx, "reader", "hello\n", true); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var exit *client.Process
	for ev, err := range ps.Stream(ctx, p.ID, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Output != nil {
			out.WriteString(ev.Output.Data)
		}
		exit = ev.Exit
	}
	if out.String() != "by the agent\ngot hello\n" || exit == nil || *exit.ExitCode != 4 || exit.Sandbox.Runtime != "process" {
		t.Errorf("output %q, exit %+v; want the agent's file, stdin echoed, code 4, in the process runtime", out.String(), exit)
	}

	// A terminal: its size, a resize through the session's route, and a
	// process of another session is not resized through this one.
	tp, err := ps.Start(ctx, client.SessionStartProcess{Argv: []string{"sh", "-c", `[ -t 0 ] && echo tty; stty size; read x; stty size`}, TTY: true, Rows: 30, Cols: 100})
	if err != nil || !tp.TTY || tp.Rows != 30 {
		t.Fatalf("a terminal process: %+v, %v", tp, err)
	}
	if err := c.SessionProcesses(other.ID).Resize(ctx, tp.ID, 40, 90); !client.IsNotFound(err) {
		t.Errorf("resize through another session: %v, want 404", err)
	}
	var screen strings.Builder
	resized := false
	for ev, err := range ps.Stream(ctx, tp.ID, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Output != nil {
			screen.WriteString(ev.Output.Data)
			if strings.Contains(screen.String(), "30 100") && !resized {
				resized = true
				if err := ps.Resize(ctx, tp.ID, 40, 90); err != nil {
					t.Fatal(err)
				}
				if err := ps.SendStdin(ctx, tp.ID, "\n", false); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if !strings.Contains(screen.String(), "tty\r\n30 100\r\n") || !strings.Contains(screen.String(), "40 90") {
		t.Errorf("the terminal's screen %q", screen.String())
	}

	// A kill ends the process's group, not the session's sandbox.
	p, err = ps.Start(ctx, client.SessionStartProcess{Argv: []string{"sh", "-c", "sleep 61.3 & sleep 61.3"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SessionProcesses(other.ID).Signal(ctx, p.ID, "SIGKILL"); !client.IsNotFound(err) {
		t.Errorf("a process signalled through another session: %v, want 404", err)
	}
	if _, err := c.SessionProcesses(other.ID).Get(ctx, p.ID); !client.IsNotFound(err) {
		t.Errorf("a process read through another session: %v, want 404", err)
	}
	if l, err := c.SessionProcesses(other.ID).List(ctx); err != nil || len(l.Processes) != 0 {
		t.Errorf("another session lists %+v, %v", l, err)
	}
	if err := ps.Signal(ctx, p.ID, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	end, err := ps.Wait(ctx, p.ID)
	if err != nil || end.Signal != "SIGKILL" {
		t.Errorf("after SIGKILL: %+v, %v", end, err)
	}
	res, err := c.SessionExec(ctx, s.ID, client.SessionExecRequest{Argv: []string{"sh", "-c", "pgrep -c -f 'slee[p] 61.3' || true"}})
	if err != nil || res.Stdout != "0\n" {
		t.Errorf("after the kill: %+v, %v; want nothing of the process left", res, err)
	}
	turnID(t, c, s.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindText, Text: "still here"}))
	if l, err := ps.List(ctx); err != nil || len(l.Processes) != 3 {
		t.Errorf("the session lists %+v, %v; want its 3 processes", l, err)
	}
	if err := ps.Delete(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Get(ctx, p.ID); !client.IsNotFound(err) {
		t.Errorf("a deleted process: %v, want 404", err)
	}

	// A session on the host has no sandbox to lend.
	host, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock", Cwd: cwd})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SessionProcesses(host.ID).Start(ctx, client.SessionStartProcess{Argv: []string{"true"}}); !client.HasProblemType(err, client.ProblemNoSandbox) {
		t.Errorf("a process in a session on the host: %v, want no-sandbox", err)
	}
	if _, err := c.SessionProcesses("ses_0123456789abcdef0123456789abcdef").List(ctx); !client.IsNotFound(err) {
		t.Errorf("the processes of an unknown session: %v, want 404", err)
	}

	// The session's end kills what runs in its sandbox, and says so.
	p, err = ps.Start(ctx, client.SessionStartProcess{Argv: []string{"sleep", "61.3"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSession(ctx, s.ID, false); err != nil {
		t.Fatal(err)
	}
	end, err = ps.Wait(ctx, p.ID)
	if err != nil || end.Status != client.ProcessExited || end.Error == nil || end.Error.Code != "sandbox_closed" {
		t.Errorf("a process when its session ended: %+v (error %+v), %v; want sandbox_closed", end, end.Error, err)
	}
	_, err = ps.Start(ctx, client.SessionStartProcess{Argv: []string{"true"}})
	if !client.HasProblemType(err, client.ProblemNotLive) {
		t.Errorf("a process in an ended session: %v, want not-live", err)
	}
	wantStatus(t, "a process in an ended session", err, http.StatusConflict)
}

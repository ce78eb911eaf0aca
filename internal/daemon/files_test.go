package daemon

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/files"
	"github.com/agentbox/agentbox/internal/sandbox/process"
)

func runTurn(t *testing.T, c *client.Client, sid string, steps ...mock.Step) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	turn, err := c.Send(ctx, sid, mock.ScriptPrompt(steps...))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitTurn(ctx, sid, turn.TurnID, 0, nil); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, c *client.Client, sid, p string) string {
	t.Helper()
	r, err := c.ReadFile(t.Context(), sid, p, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func kindOf(err error) string {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return ae.Kind()
	}
	return ""
}

// TestSessionFiles: through a real daemon, the API's writes are what the
// agent sees and the agent's writes what the API reads; the session's
// protected paths are refused and nothing is written; an unknown session
// is not found.
func TestSessionFiles(t *testing.T) {
	c, _ := serveLifecycle(t, 0, 0)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(ctx, s.ID, "notes.txt", []byte("from the API\n")); err != nil {
		t.Fatal(err)
	}
	runTurn(t, c, s.ID,
		mock.Step{Kind: mock.KindCommand, Command: "cp notes.txt seen.txt"},
		mock.Step{Kind: mock.KindWrite, Path: "agent.txt", Content: "from the agent\n"})
	if got := readAll(t, c, s.ID, "seen.txt"); got != "from the API\n" {
		t.Fatalf("the agent saw %q", got)
	}
	if got := readAll(t, c, s.ID, "agent.txt"); got != "from the agent\n" {
		t.Fatalf("the API read %q", got)
	}
	_, err = c.WriteFile(ctx, s.ID, "docs/CLAUDE.md", []byte("x"))
	if kindOf(err) != "protected-path" {
		t.Fatalf("protected write: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.Cwd, "docs")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a protected write changed the workspace: %v", err)
	}
	if _, err := c.ReadFile(ctx, "ses_unknown", "notes.txt", 0, 0); kindOf(err) != "not-found" {
		t.Fatalf("unknown session: %v", err)
	}
	l, err := c.ListFiles(ctx, s.ID, ".", 1)
	if err != nil || len(l.Entries) != 3 {
		t.Fatalf("list %+v %v", l, err)
	}
}

// TestSandboxedSessionFiles: a live sandboxed session's changes are made
// inside its sandbox: the agent sees them at once, the host only after
// the sandbox's commit (never written around it); a protected path is
// refused before anything runs; reads and watches show the sandbox's
// view, its uncommitted work included. Once the session has ended,
// changes go to the host tree.
func TestSandboxedSessionFiles(t *testing.T) {
	if pr := process.New(process.Options{}).Probe(t.Context()); !pr.Available {
		t.Skipf("this host cannot build sandboxes: %s", pr.Reason)
	}
	c, _ := serveLifecycle(t, 0, 0)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock", Policy: json.RawMessage(`"agent-default"`)})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	changes := make(chan client.FileChange, 64)
	go func() {
		defer close(changes)
		for ch, err := range c.WatchFiles(wctx, s.ID, ".") {
			if err != nil {
				return
			}
			changes <- ch
		}
	}()
	// The watch is open once it reports a change: write a first file
	// until it does (a change made before the watch was open is not
	// reported); then the changes made through the sandbox are what it
	// must see.
	open := time.After(30 * time.Second)
	for opened := false; !opened; {
		if _, err := c.WriteFile(ctx, s.ID, "watched.txt", []byte("x")); err != nil {
			t.Fatal(err)
		}
		select {
		case ch, ok := <-changes:
			if !ok {
				t.Fatal("the watch ended before it opened")
			}
			opened = ch.Path == "watched.txt"
		case <-time.After(250 * time.Millisecond):
		case <-open:
			t.Fatal("the watch reported nothing in 30 s")
		}
	}
	if _, err := c.WriteFile(ctx, s.ID, "x.txt", []byte("through the sandbox\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Cwd, "x.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("written around the sandbox: %v", err)
	}
	// Reads show the sandbox's view: the write, not yet committed.
	if got := readAll(t, c, s.ID, "x.txt"); got != "through the sandbox\n" {
		t.Fatalf("a live read of the sandbox's write: %q", got)
	}
	if e, err := c.StatFile(ctx, s.ID, "x.txt"); err != nil || e.Size != int64(len("through the sandbox\n")) {
		t.Fatalf("stat of the sandbox's write: %+v %v", e, err)
	}
	// What runs in the sandbox beside the agent is seen before any commit.
	if res, err := c.SessionExec(ctx, s.ID, client.SessionExecRequest{Argv: []string{"sh", "-c", "printf exec > e.txt && ln -s /etc/passwd out-link"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("session exec: %+v %v", res, err)
	}
	if got := readAll(t, c, s.ID, "e.txt"); got != "exec" {
		t.Fatalf("a live read of what a command wrote: %q", got)
	}
	if _, err := os.Stat(filepath.Join(s.Cwd, "e.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the command's write reached the host before a commit: %v", err)
	}
	if _, err := c.ReadFile(ctx, s.ID, "out-link", 0, 0); kindOf(err) != "outside-workspace" {
		t.Fatalf("a live read through a symlink the sandbox made: %v", err)
	}
	unseen, late := map[string]bool{"x.txt": true, "e.txt": true}, time.After(30*time.Second)
	for len(unseen) > 0 {
		select {
		case ch, ok := <-changes:
			if !ok {
				t.Fatalf("the watch ended before it reported %v", unseen)
			}
			delete(unseen, ch.Path)
		case <-late:
			t.Fatalf("the watch did not report %v in 30 s", unseen)
		}
	}
	if _, err := c.MakeDir(ctx, s.ID, "d/e", true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(ctx, s.ID, "CLAUDE.md", []byte("x")); kindOf(err) != "protected-path" {
		t.Fatalf("protected write: %v", err)
	}
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	_ = tw.WriteHeader(&tar.Header{Name: "a.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3})
	_, _ = tw.Write([]byte("tar"))
	_ = tw.Close()
	if _, err := c.UploadArchive(ctx, s.ID, "up", tb.Bytes()); err != nil {
		t.Fatal(err)
	}
	runTurn(t, c, s.ID,
		mock.Step{Kind: mock.KindCommand, Command: "cp x.txt d/e/seen.txt && cp up/a.txt d/e/up.txt"},
		mock.Step{Kind: mock.KindWrite, Path: "made.txt", Content: "in the sandbox\n"})
	if got := readAll(t, c, s.ID, "d/e/seen.txt"); got != "through the sandbox\n" {
		t.Fatalf("the agent saw %q", got)
	}
	if got := readAll(t, c, s.ID, "d/e/up.txt"); got != "tar" {
		t.Fatalf("the agent saw the archive's %q", got)
	}
	if got := readAll(t, c, s.ID, "made.txt"); got != "in the sandbox\n" {
		t.Fatalf("read %q", got)
	}
	if _, err := os.Stat(filepath.Join(s.Cwd, "CLAUDE.md")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a protected path reached the host")
	}
	if err := c.DeleteFile(ctx, s.ID, "made.txt", false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.MoveFile(ctx, s.ID, "x.txt", "d/x.txt", false); err != nil {
		t.Fatal(err)
	}
	// Once the session has ended (its sandbox committed), the changes
	// are on the host, and the next go to the host tree.
	if err := c.DeleteSession(ctx, s.ID, false); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{"made.txt": false, "x.txt": false, "d/x.txt": true} {
		if _, err := os.Stat(filepath.Join(s.Cwd, p)); (err == nil) != want {
			t.Errorf("%s on the host: %v, want %v", p, err, want)
		}
	}
	if _, err := c.WriteFile(ctx, s.ID, "after.txt", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Cwd, "after.txt")); err != nil {
		t.Fatal(err)
	}
}

// TestProcessFiles: a process started with its own sandbox has a
// workspace the files API serves: while it runs, as its sandbox sees it
// (changes made inside it); after it ends, what its sandbox committed,
// kept until the process is deleted. Bad input (traversal, a symlink
// out, oversize, a protected path, an unknown process) is refused with
// its problem type (devices and fifos, which the sandbox cannot make, are
// in httpapi's TestFilesBadInput on both scopes).
func TestProcessFiles(t *testing.T) {
	if pr := process.New(process.Options{}).Probe(t.Context()); !pr.Available {
		t.Skipf("this host cannot build sandboxes: %s", pr.Reason)
	}
	c, _ := serveLifecycle(t, 0, 0)
	ctx := t.Context()
	p, err := c.StartProcess(ctx, client.StartProcess{Stdin: true, Files: map[string]string{"in.txt": "in"},
		Argv: []string{"sh", "-c", "printf hi > out.txt && ln -s /etc/passwd link && ln -s / root && echo ready && read x && cat api.txt"}})
	if err != nil {
		t.Fatal(err)
	}
	ready := false
	for ev, err := range c.ProcessStream(ctx, p.ID, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Output != nil && strings.Contains(ev.Output.Data, "ready") {
			ready = true
			break
		}
	}
	if !ready {
		t.Fatal("the process ended before it was ready")
	}
	pw := client.ProcessWorkspace(p.ID)
	if got := readAll(t, c, pw, "out.txt"); got != "hi" {
		t.Fatalf("a running process's file: %q", got)
	}
	if _, err := c.WriteFile(ctx, pw, "api.txt", []byte("from the API")); err != nil {
		t.Fatal(err)
	}
	bad := func(name string, err error, kind string) {
		t.Helper()
		if kindOf(err) != kind {
			t.Errorf("%s: %v, want %s", name, err, kind)
		}
	}
	_, err = c.ReadFile(ctx, pw, "../etc/passwd", 0, 0)
	bad("read ..", err, "outside-workspace")
	_, err = c.ReadFile(ctx, pw, "link", 0, 0)
	bad("read a symlink out", err, "outside-workspace")
	_, err = c.ListFiles(ctx, pw, "root/etc", 1)
	bad("list through a symlink to /", err, "outside-workspace")
	_, err = c.WriteFile(ctx, pw, "big", make([]byte, files.DefaultMaxFileBytes+1))
	bad("write oversize", err, "payload-too-large")
	_, err = c.WriteFile(ctx, pw, ".git/config", []byte("x"))
	bad("write .git", err, "protected-path")
	_, err = c.ReadFile(ctx, client.ProcessWorkspace("prc_nope"), "out.txt", 0, 0)
	bad("unknown process", err, "not-found")

	if err := c.SendStdin(ctx, p.ID, "go\n", true); err != nil {
		got, _ := c.GetProcess(ctx, p.ID)
		t.Fatalf("%v: %+v", err, got)
	}
	end, err := c.Wait(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if end.ExitCode == nil || *end.ExitCode != 0 {
		t.Fatalf("the process saw the API's write? %+v", end)
	}
	// Ended: its workspace is what the sandbox committed, on the host.
	for p, want := range map[string]string{"in.txt": "in", "out.txt": "hi", "api.txt": "from the API"} {
		if got := readAll(t, c, pw, p); got != want {
			t.Errorf("after the end, %s: %q, want %q", p, got, want)
		}
	}
	if _, err := c.WriteFile(ctx, pw, "after.txt", []byte("after")); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, c, pw, "after.txt"); got != "after" {
		t.Fatalf("after the end, a write: %q", got)
	}
	_, err = c.WriteFile(ctx, pw, ".git/hooks/pre-commit", []byte("x"))
	bad("after the end, write .git", err, "protected-path")
	_, err = c.ReadFile(ctx, pw, "link", 0, 0)
	bad("after the end, read a symlink out", err, "outside-workspace")
	if err := c.DeleteProcess(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.ReadFile(ctx, pw, "out.txt", 0, 0)
	bad("a deleted process", err, "not-found")
}

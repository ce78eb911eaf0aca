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
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent/mock"
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
// refused before anything runs; reads show what the commits applied.
// Once the session has ended, changes go to the host tree.
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
	if _, err := c.WriteFile(ctx, s.ID, "x.txt", []byte("through the sandbox\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Cwd, "x.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("written around the sandbox: %v", err)
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

package engine_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/engine"
)

// TestContentPathConfinedToWorkspace: an image or file part that names a
// path is read by the engine from the session's workspace, and only from
// there: a path, file: URI or symbolic link that leads out of it, or a
// file that is not a regular one, refuses the message (ErrInvalid, naming
// the part) before any turn starts, so no host file reaches the prompt.
func TestContentPathConfinedToWorkspace(t *testing.T) {
	ta := &testAgent{exit: make(chan struct{})}
	reg := agent.NewRegistry()
	reg.Register("files", capsAgent{testAgent: ta, caps: agent.Capabilities{Images: true, Files: true, Resume: true}})
	m := engine.New(engine.Config{Store: openStore(t, t.TempDir()), Agents: reg, WorkspaceDir: t.TempDir()})
	t.Cleanup(func() { _ = m.Shutdown(t.Context()) })
	ctx := t.Context()

	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("HOST-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	cwd, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"link.txt": secret, "linkdir": outside, "rel.txt": "../" + filepath.Base(outside) + "/secret.txt"} {
		if err := os.Symlink(target, filepath.Join(cwd, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(cwd, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(cwd, "dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cwd, "notes.txt"), []byte("IN-WORKSPACE"), 0o600); err != nil {
		t.Fatal(err)
	}
	big, err := os.Create(filepath.Join(cwd, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := big.Truncate(engine.MaxAttachment + 1); err != nil {
		t.Fatal(err)
	}
	_ = big.Close()
	s, err := m.Create(ctx, engine.CreateParams{Agent: "files", Cwd: cwd})
	if err != nil {
		t.Fatal(err)
	}

	for _, p := range []event.ContentPart{
		{Type: event.PartFile, Path: "../" + filepath.Base(outside) + "/secret.txt"},
		{Type: event.PartFile, Path: secret},
		{Type: event.PartFile, Path: "/etc/passwd"},
		{Type: event.PartFile, URI: "file://" + secret},
		{Type: event.PartFile, URI: "file://otherhost/etc/passwd"},
		{Type: event.PartImage, URI: "ftp://example.com/a.png"},
		{Type: event.PartFile, Path: "link.txt"},
		{Type: event.PartFile, Path: "linkdir/secret.txt"},
		{Type: event.PartFile, Path: "rel.txt"},
		{Type: event.PartFile, Path: "fifo"},
		{Type: event.PartFile, Path: "dir"},
		{Type: event.PartFile, Path: "big.bin"},
		{Type: event.PartFile, Path: "missing.txt"},
		{Type: event.PartImage, Data: "not base64!"},
		{Type: event.PartFile, Data: "aGk=", Path: "../name"},
		{Type: event.PartFile, Data: "aGk=", URI: "file://" + secret},
		{Type: event.PartFile, URI: "file://" + secret, Path: "notes.txt"},
	} {
		_, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("look"), p})
		if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "content[1]") {
			t.Errorf("send %+v: %v, want ErrInvalid naming content[1]", p, err)
		}
	}
	evs, err := m.Events(ctx, s.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if bytes.Contains(e.Data, []byte(base64.StdEncoding.EncodeToString([]byte("HOST-SECRET")))) || e.Type == event.TypeTurnStarted {
			t.Fatalf("a refused message reached the session: %s %s", e.Type, e.Data)
		}
	}

	// A path in the workspace (relative, absolute or as a file: URI)
	// reaches the agent as data, named by its relative path.
	for _, p := range []event.ContentPart{
		{Type: event.PartFile, Path: "notes.txt"},
		{Type: event.PartFile, Path: filepath.Join(cwd, "notes.txt")},
		{Type: event.PartFile, URI: "file://" + filepath.Join(cwd, "./dir/../notes.txt")},
		// An ACP client's resource_link: both, as internal/acpserver sends it.
		{Type: event.PartFile, URI: "file://" + filepath.Join(cwd, "notes.txt"), Path: filepath.Join(cwd, "notes.txt")},
	} {
		after := evs[len(evs)-1].Seq
		if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("look"), p}); err != nil {
			t.Fatalf("send %+v: %v", p, err)
		}
		got := waitFor(t, m, s.ID, after, event.TypeTurnCompleted)
		if evs, err = m.Events(ctx, s.ID, 0, 1000); err != nil {
			t.Fatal(err)
		}
		want := `"type":"file","mime_type":"text/plain; charset=utf-8","data":"` + base64.StdEncoding.EncodeToString([]byte("IN-WORKSPACE")) + `","path":"notes.txt"`
		found := false
		for _, e := range got {
			found = found || bytes.Contains(e.Data, []byte(want))
		}
		if !found {
			t.Fatalf("send %+v: no message with %s in\n%v", p, want, types(got))
		}
	}
}

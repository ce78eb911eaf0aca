package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/errkind"
	"github.com/agentbox/agentbox/internal/files"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/stacktest"
)

// TestFiles: put a file, a directory and stdin, get them back (a range,
// a tar), list; bad paths and usage errors exit non-zero with the
// daemon's reason and change nothing.
func TestFiles(t *testing.T) {
	t.Parallel()
	h := newHarness(t, stacktest.Options{})
	s, err := h.client().CreateSession(t.Context(), client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	local := t.TempDir()
	if err := os.WriteFile(filepath.Join(local, "a.txt"), []byte("alpha\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(local, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "sub", "b.txt"), []byte("beta\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(local, "out.tar")
	id := s.ID
	tests := []struct {
		name           string
		args           []string
		stdin          string
		code           int
		stdout, stderr []string
	}{
		{name: "put file", args: []string{"files", "put", id, filepath.Join(local, "a.txt"), "a.txt"}, stdout: []string{"file a.txt (6 bytes sent)"}},
		{name: "put stdin", args: []string{"files", "put", id, "-", "in.txt"}, stdin: "from stdin", stdout: []string{"file in.txt"}},
		{name: "put dir", args: []string{"files", "put", id, tree, "up"}, stdout: []string{"dir up"}},
		{name: "get", args: []string{"files", "get", id, "up/sub/b.txt"}, stdout: []string{"beta\n"}},
		{name: "get range", args: []string{"files", "get", id, "a.txt", "--offset", "1", "--length", "3"}, stdout: []string{"lph"}},
		{name: "get archive", args: []string{"files", "get", id, "up", "--archive", "-o", out}},
		{name: "ls", args: []string{"files", "ls", id, ".", "--depth", "3"}, stdout: []string{"file", "0644", "a.txt", "up/", "up/sub/b.txt"}},
		{name: "ls json", args: []string{"--json", "files", "ls", id}, stdout: []string{`"entries"`, `"path": "in.txt"`}},
		{name: "get outside", args: []string{"files", "get", id, "../etc/passwd"}, code: 1, stderr: []string{"403", "path outside the workspace"}},
		{name: "put outside", args: []string{"files", "put", id, "-", "/etc/x"}, stdin: "x", code: 1, stderr: []string{"403"}},
		{name: "get missing", args: []string{"files", "get", id, "nope"}, code: 1, stderr: []string{"404", "no such file"}},
		{name: "unknown session", args: []string{"files", "ls", "ses_nope"}, code: 1, stderr: []string{"404"}},
		{name: "usage", args: []string{"files", "get", id}, code: ExitUsage},
		{name: "archive with range", args: []string{"files", "get", id, ".", "--archive", "--length", "1"}, code: ExitUsage},
	}
	for _, tt := range tests { // in order: later cases read what earlier ones put
		r := h.run(t.Context(), strings.NewReader(tt.stdin), tt.args...)
		t.Run(tt.name, func(t *testing.T) { r.check(t, tt.code, tt.stdout, tt.stderr) })
	}
	if fi, err := os.Stat(out); err != nil || fi.Size() < 1024 {
		t.Fatalf("archive: %v %v", fi, err)
	}
	if _, err := os.Stat("/etc/x"); err == nil {
		t.Fatal("wrote outside")
	}
}

// procDir serves the workspace of one process, id, from a directory.
type procDir struct{ id, dir string }

func (p procDir) Open(_ context.Context, id string) (*files.Workspace, error) {
	if id != p.id {
		return nil, fmt.Errorf("process %q: %w", id, errkind.New(errkind.NotFound, "no such process"))
	}
	return files.Open(p.dir, files.Options{})
}

// TestFilesProcess: with --process, the first argument names a process,
// whose workspace the commands reach at /v1/processes/{id}/files….
func TestFilesProcess(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "report.txt"), []byte("built\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, stacktest.Options{API: httpapi.Config{ProcessFiles: procDir{id: "prc_1", dir: ws}}})
	tests := []struct {
		name           string
		args           []string
		stdin          string
		code           int
		stdout, stderr []string
	}{
		{name: "get", args: []string{"files", "get", "--process", "prc_1", "report.txt"}, stdout: []string{"built\n"}},
		{name: "put", args: []string{"files", "put", "--process", "prc_1", "-", "in.txt"}, stdin: "input", stdout: []string{"file in.txt"}},
		{name: "ls", args: []string{"files", "--process", "ls", "prc_1"}, stdout: []string{"in.txt", "report.txt"}},
		{name: "unknown process", args: []string{"files", "ls", "--process", "prc_nope"}, code: 1, stderr: []string{"404"}},
		{name: "a session id is not a process", args: []string{"files", "ls", "prc_1"}, code: 1, stderr: []string{"404"}},
	}
	for _, tt := range tests {
		r := h.run(t.Context(), strings.NewReader(tt.stdin), tt.args...)
		t.Run(tt.name, func(t *testing.T) { r.check(t, tt.code, tt.stdout, tt.stderr) })
	}
	if b, err := os.ReadFile(filepath.Join(ws, "in.txt")); err != nil || string(b) != "input" {
		t.Fatalf("put reached %q %v", b, err)
	}
}

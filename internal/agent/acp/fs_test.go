package acp

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	wire "github.com/agentbox/agentbox/internal/acpwire"
)

// TestFSConfinement: fs/read_text_file and fs/write_text_file, as the
// session serves them, reach files inside the session's directory only:
// not through "..", not through absolute paths elsewhere, not through a
// symbolic link that points out (for reading or writing).
func TestFSConfinement(t *testing.T) {
	root := t.TempDir()
	cwd := filepath.Join(root, "work")
	outside := filepath.Join(root, "secret.txt")
	must(t, os.MkdirAll(filepath.Join(cwd, "sub"), 0o755))
	must(t, os.WriteFile(outside, []byte("secret"), 0o644))
	must(t, os.WriteFile(filepath.Join(cwd, "in.txt"), []byte("one\ntwo\nthree\n"), 0o644))
	must(t, os.Symlink(outside, filepath.Join(cwd, "link-out")))
	must(t, os.Symlink(root, filepath.Join(cwd, "dir-out")))
	must(t, os.Symlink("in.txt", filepath.Join(cwd, "link-in")))
	s := &session{fs: &confinedFS{dir: cwd}}

	read := func(path string, line, limit int) (string, *wire.RequestError) {
		req := map[string]any{"sessionId": "s", "path": path}
		if line > 0 {
			req["line"] = line
		}
		if limit > 0 {
			req["limit"] = limit
		}
		b, _ := json.Marshal(req)
		res, rerr := s.handle(t.Context(), wire.ClientMethodFsReadTextFile, b)
		if rerr != nil {
			return "", rerr
		}
		return res.(wire.ReadTextFileResponse).Content, nil
	}
	write := func(path, content string) *wire.RequestError {
		b, _ := json.Marshal(map[string]any{"sessionId": "s", "path": path, "content": content})
		_, rerr := s.handle(t.Context(), wire.ClientMethodFsWriteTextFile, b)
		return rerr
	}

	for _, tc := range []struct {
		name        string
		path        string
		line, limit int
		want        string
	}{
		{"whole file", filepath.Join(cwd, "in.txt"), 0, 0, "one\ntwo\nthree\n"},
		{"from line 2, one line", filepath.Join(cwd, "in.txt"), 2, 1, "two\n"},
		{"past the end", filepath.Join(cwd, "in.txt"), 9, 0, ""},
		{"link inside", filepath.Join(cwd, "link-in"), 0, 0, "one\ntwo\nthree\n"},
	} {
		t.Run("read "+tc.name, func(t *testing.T) {
			got, err := read(tc.path, tc.line, tc.limit)
			if err != nil || got != tc.want {
				t.Errorf("read = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	for _, p := range []string{
		outside,
		filepath.Join(cwd, "..", "secret.txt"),
		filepath.Join(cwd, "link-out"),
		filepath.Join(cwd, "dir-out", "secret.txt"),
		"in.txt", // not absolute
		"/etc/passwd",
	} {
		t.Run("read refused "+p, func(t *testing.T) {
			if got, err := read(p, 0, 0); err == nil {
				t.Errorf("read %s = %q, want an error", p, got)
			} else if got != "" {
				t.Errorf("read %s leaked %q", p, got)
			}
		})
		t.Run("write refused "+p, func(t *testing.T) {
			if err := write(p, "pwned"); err == nil {
				t.Errorf("write %s succeeded", p)
			}
		})
	}
	if b, _ := os.ReadFile(outside); string(b) != "secret" {
		t.Fatalf("the file outside was changed: %q", b)
	}
	if err := write(filepath.Join(cwd, "dir-out", "new.txt"), "x"); err == nil {
		t.Error("write through a directory link succeeded")
	}
	if _, err := os.Stat(filepath.Join(root, "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file was created outside: %v", err)
	}
	// Inside: a new file in a new directory.
	if err := write(filepath.Join(cwd, "a", "b", "new.txt"), "hello"); err != nil {
		t.Fatalf("write inside: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(cwd, "a", "b", "new.txt")); err != nil || string(b) != "hello" {
		t.Errorf("new.txt = %q, %v", b, err)
	}
	// The reason is said plainly.
	if err := write(filepath.Join(cwd, "link-out"), "x"); err == nil || !strings.Contains(err.Error()+string(mustJSON(err.Data)), "outside") {
		t.Errorf("error %v does not say the path is outside", err)
	}

	// Not served unless advertised.
	s.fs = nil
	if _, err := read(filepath.Join(cwd, "in.txt"), 0, 0); err == nil || err.Code != -32601 {
		t.Errorf("read without fs served: %v, want method not found", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

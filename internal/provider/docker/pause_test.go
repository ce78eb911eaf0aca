package docker

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/provider"
)

// TestPauseRequestsInDocument: the requests of Pause, Resume, Snapshot and
// CreateFrom's stop are operations of the vendored document, with query
// parameters it declares, and a 404 is ErrGone with Docker's message.
func TestPauseRequestsInDocument(t *testing.T) {
	d := loadEngineDoc(t)
	var mu sync.Mutex
	var got []*http.Request
	p, _ := fakeDaemon(t, "1.41", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
		if strings.Contains(r.URL.Path, "/gone/") {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"message":"No such container: gone"}`))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	ctx := t.Context()
	for i, call := range []func() error{
		func() error { return p.cli.containerPause(ctx, "abc") },
		func() error { return p.cli.containerUnpause(ctx, "abc") },
		func() error { return p.cli.containerStop(ctx, "abc", stopWait) },
	} {
		if err := call(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	for _, r := range got {
		var op *docOperation
		for path, ops := range d.Paths {
			pat := regexp.MustCompile(`\\\{[a-z]+\\\}`).ReplaceAllString(regexp.QuoteMeta(path), `[^/]+`)
			if o, ok := ops[strings.ToLower(r.Method)]; ok && regexp.MustCompile("^/v1\\.41"+pat+"$").MatchString(r.URL.Path) {
				op = &o
			}
		}
		if op == nil {
			t.Errorf("%s %s is not an operation of the document", r.Method, r.URL.Path)
			continue
		}
		for k := range r.URL.Query() {
			found := false
			for _, prm := range op.Parameters {
				found = found || prm.In == "query" && prm.Name == k
			}
			if !found {
				t.Errorf("%s %s: query parameter %s is not in the document", r.Method, r.URL.Path, k)
			}
		}
	}
	if q := got[2].URL.Query().Get("t"); q != "10" {
		t.Errorf("stop's t = %q, want 10", q)
	}
	err := p.cli.containerPause(ctx, "gone")
	if err = p.mapErr("pause container", err); !errors.Is(err, provider.ErrGone) || !strings.Contains(err.Error(), "No such container") {
		t.Fatalf("pause of a missing container: %v, want ErrGone with Docker's message", err)
	}
}

// TestCopyTree: a snapshot's copy keeps files, directories (with modes a
// sandbox made unwritable) and symbolic links as links, never follows a
// link out of the tree, leaves out sockets and the token file.
func TestCopyTree(t *testing.T) {
	src := filepath.Join(t.TempDir(), "data")
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "ws", "sub"), 0o755))
	must(os.WriteFile(filepath.Join(src, "ws", "sub", "f.txt"), []byte("kept"), 0o640))
	must(os.WriteFile(filepath.Join(src, client.TokenFileName), []byte("tok"), 0o600))
	must(os.Symlink(outside, filepath.Join(src, "ws", "escape")))
	must(os.Mkdir(filepath.Join(src, "ro"), 0o755))
	must(os.WriteFile(filepath.Join(src, "ro", "x"), []byte("x"), 0o644))
	must(os.Chmod(filepath.Join(src, "ro"), 0o555))
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(src, "ro"), 0o755) })
	must(syscall.Mkfifo(filepath.Join(src, "fifo"), 0o600))

	dst := filepath.Join(t.TempDir(), "copy", "data")
	must(copyTree(t.Context(), src, dst))
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(dst, "ro"), 0o755) })

	if b, err := os.ReadFile(filepath.Join(dst, "ws", "sub", "f.txt")); err != nil || string(b) != "kept" {
		t.Fatalf("f.txt = %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "ws", "sub", "f.txt")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("f.txt mode: %v, %v", fi, err)
	}
	if link, err := os.Readlink(filepath.Join(dst, "ws", "escape")); err != nil || link != outside {
		t.Fatalf("escape is not the same link: %q, %v", link, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "ro")); err != nil || fi.Mode().Perm() != 0o555 {
		t.Fatalf("ro's mode: %v, %v", fi, err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "ro", "x")); err != nil || string(b) != "x" {
		t.Fatalf("ro/x = %q, %v", b, err)
	}
	for _, left := range []string{client.TokenFileName, "fifo"} {
		if _, err := os.Lstat(filepath.Join(dst, left)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s copied: %v", left, err)
		}
	}
	// A link where a file is expected is never opened through.
	if err := copyFile(filepath.Join(filepath.Dir(dst), "data", "ws", "escape"), filepath.Join(t.TempDir(), "out"), 0o600, 100); err == nil {
		t.Fatal("copyFile followed a link")
	}
}

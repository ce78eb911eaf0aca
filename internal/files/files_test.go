//go:build unix

package files

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fixture is a workspace beside a directory outside it, with the traps
// the bad-input cases aim at: symlinks out of the workspace (a file, a
// directory), a fifo and, as root, a character device.
type fixture struct {
	base, ws, outside string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	base := t.TempDir()
	f := &fixture{base: base, ws: filepath.Join(base, "ws"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{f.ws, f.outside, filepath.Join(f.ws, "src")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(f.outside, "secret"), "host secret")
	write(filepath.Join(f.ws, "src", "a.go"), "package a\n")
	write(filepath.Join(f.ws, "README.md"), "hello\n")
	write(filepath.Join(f.ws, "CLAUDE.md"), "instructions\n")
	must(t, os.Symlink(filepath.Join(f.outside, "secret"), filepath.Join(f.ws, "link-out")))
	must(t, os.Symlink("../outside", filepath.Join(f.ws, "dir-out")))
	must(t, os.Symlink("src/a.go", filepath.Join(f.ws, "link-in")))
	must(t, syscall.Mkfifo(filepath.Join(f.ws, "fifo"), 0o644))
	if os.Geteuid() == 0 {
		must(t, syscall.Mknod(filepath.Join(f.ws, "null"), syscall.S_IFCHR|0o666, int(1<<8|3)))
	}
	return f
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// snapshot records every entry under dir: type, permission bits, size,
// content hash, link target.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		s := fmt.Sprintf("%v", fi.Mode())
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s += fmt.Sprintf(" %x", sha256.Sum256(b))
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			s += " -> " + target
		}
		out[strings.TrimPrefix(p, dir)] = s
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// protectJudge refuses what the built-in list would for these tests:
// CLAUDE.md anywhere, and anything named .git.
func protectJudge(context.Context) (Judge, error) {
	return func(rel string, isDir bool) (string, bool) {
		for seg := range strings.SplitSeq(rel, "/") {
			switch strings.ToLower(seg) {
			case "claude.md":
				return "protected:**/CLAUDE.md", false
			case ".git":
				return "git:.git", false
			}
		}
		return "", true
	}, nil
}

func open(t *testing.T, f *fixture) *Workspace {
	t.Helper()
	w, err := Open(f.ws, Options{Judge: protectJudge, Limits: Limits{MaxFileBytes: 1 << 10, MaxArchiveBytes: 4 << 10, MaxArchiveEntries: 16, MaxListEntries: 100}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func tarOf(t *testing.T, hs ...*tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hs {
		if h.Typeflag == tar.TypeReg && h.Size == 0 && h.Mode != 0o7777 {
			h.Size = int64(len(h.Name))
		}
		must(t, tw.WriteHeader(h))
		if h.Typeflag == tar.TypeReg {
			_, _ = tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	must(t, tw.Close())
	return b.Bytes()
}

// TestBadInputChangesNothing: each bad input is refused with its error
// and leaves the workspace and the directory outside it exactly as they
// were.
func TestBadInputChangesNothing(t *testing.T) {
	ctx := t.Context()
	type op func(w *Workspace) error
	write := func(p string, n int) op {
		return func(w *Workspace) error { _, err := w.Write(ctx, p, bytes.Repeat([]byte("x"), n)); return err }
	}
	read := func(p string) op {
		return func(w *Workspace) error {
			r, _, err := w.Read(ctx, p, 0, 0)
			if err == nil {
				r.Close()
			}
			return err
		}
	}
	unpack := func(dest string, hs ...*tar.Header) op {
		return func(w *Workspace) error {
			_, err := w.Unpack(ctx, dest, bytes.NewReader(tarOf(t, hs...)))
			return err
		}
	}
	reg := func(name string) *tar.Header { return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644} }
	cases := []struct {
		name string
		op   op
		want error
		root bool // needs a device node
	}{
		{"write ../x", write("../x", 1), ErrOutside, false},
		{"write src/../../x", write("src/../../x", 1), ErrOutside, false},
		{"write absolute", write("/etc/passwd", 1), ErrOutside, false},
		{"write through dir symlink", write("dir-out/new", 1), ErrOutside, false},
		{"write not clean", write("src//a.go", 1), ErrBadPath, false},
		{"write NUL", write("a\x00b", 1), ErrBadPath, false},
		{"write oversize", write("big", 1<<10+1), ErrTooLarge, false},
		{"write protected", write("CLAUDE.md", 1), ErrProtected, false},
		{"write protected folded", write("src/claude.MD", 1), ErrProtected, false},
		{"write in .git", write(".git/hooks/pre-commit", 1), ErrProtected, false},
		{"write over fifo", write("fifo", 1), ErrNotRegular, false},
		{"write over device", write("null", 1), ErrNotRegular, true},
		{"write over dir", write("src", 1), ErrConflict, false},
		{"write missing parent", write("nope/x", 1), ErrNotFound, false},
		{"read ../x", read("../outside/secret"), ErrOutside, false},
		{"read symlink out", read("link-out"), ErrOutside, false},
		{"read through dir symlink", read("dir-out/secret"), ErrOutside, false},
		{"read fifo", read("fifo"), ErrNotRegular, false},
		{"read device", read("null"), ErrNotRegular, true},
		{"read dir", read("src"), ErrNotRegular, false},
		{"read missing", read("nope"), ErrNotFound, false},
		{"list symlink out", func(w *Workspace) error { _, _, err := w.List(ctx, "dir-out", 1); return err }, ErrOutside, false},
		{"mkdir through dir symlink", func(w *Workspace) error { _, err := w.Mkdir(ctx, "dir-out/x", true); return err }, ErrOutside, false},
		{"mkdir protected", func(w *Workspace) error { _, err := w.Mkdir(ctx, ".git", false); return err }, ErrProtected, false},
		{"mkdir exists", func(w *Workspace) error { _, err := w.Mkdir(ctx, "src", false); return err }, ErrExists, false},
		{"move out", func(w *Workspace) error { _, err := w.Move(ctx, "README.md", "../x", false); return err }, ErrOutside, false},
		{"move into dir symlink", func(w *Workspace) error { _, err := w.Move(ctx, "README.md", "dir-out/x", false); return err }, ErrOutside, false},
		{"move protected away", func(w *Workspace) error { _, err := w.Move(ctx, "CLAUDE.md", "x", false); return err }, ErrProtected, false},
		{"move onto protected", func(w *Workspace) error { _, err := w.Move(ctx, "README.md", "CLAUDE.md", true); return err }, ErrProtected, false},
		{"move existing", func(w *Workspace) error { _, err := w.Move(ctx, "README.md", "src/a.go", false); return err }, ErrExists, false},
		{"delete protected", func(w *Workspace) error { return w.Delete(ctx, "CLAUDE.md", false) }, ErrProtected, false},
		{"delete root", func(w *Workspace) error { return w.Delete(ctx, ".", true) }, ErrProtected, false},
		{"delete tree holding protected", func(w *Workspace) error {
			return errors.Join(os.WriteFile(filepath.Join(w.root.Name(), "src", "CLAUDE.md"), nil, 0o644), func() error {
				// The fixture's snapshot was taken before: undo so only
				// the refusal is compared.
				err := w.Delete(ctx, "src", true)
				_ = os.Remove(filepath.Join(w.root.Name(), "src", "CLAUDE.md"))
				return err
			}())
		}, ErrProtected, false},
		{"delete non-empty", func(w *Workspace) error { return w.Delete(ctx, "src", false) }, ErrConflict, false},
		{"delete through dir symlink", func(w *Workspace) error { return w.Delete(ctx, "dir-out/secret", false) }, ErrOutside, false},
		{"tar absolute", unpack(".", reg("ok"), reg("/etc/x")), ErrOutside, false},
		{"tar dotdot", unpack(".", reg("ok"), reg("a/../../x")), ErrOutside, false},
		{"tar symlink out absolute", unpack(".", &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc"}), ErrOutside, false},
		{"tar symlink out relative", unpack("src", &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../../outside"}), ErrOutside, false},
		{"tar below its symlink", unpack(".", &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "src"}, reg("l/x")), ErrBadArchive, false},
		{"tar hard link", unpack(".", &tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "README.md"}), ErrBadArchive, false},
		{"tar device", unpack(".", &tar.Header{Name: "d", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}), ErrNotRegular, false},
		{"tar fifo", unpack(".", &tar.Header{Name: "f", Typeflag: tar.TypeFifo}), ErrNotRegular, false},
		{"tar setuid", unpack(".", &tar.Header{Name: "s", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 1}), ErrBadArchive, false},
		{"tar protected", unpack(".", reg("ok"), reg("sub/CLAUDE.md")), ErrProtected, false},
		{"tar into .git", unpack(".git", reg("config")), ErrProtected, false},
		{"tar oversize entry", unpack(".", &tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4<<10 + 1}), ErrTooLarge, false},
		{"tar oversize total", unpack(".", &tar.Header{Name: "a", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3 << 10}, &tar.Header{Name: "b", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3 << 10}), ErrTooLarge, false},
		{"tar too many entries", unpack(".", func() []*tar.Header {
			var hs []*tar.Header
			for i := range 17 {
				hs = append(hs, reg(fmt.Sprintf("f%02d", i)))
			}
			return hs
		}()...), ErrTooLarge, false},
		{"tar duplicate", unpack(".", reg("a"), reg("a")), ErrBadArchive, false},
		{"tar dir over file", unpack(".", &tar.Header{Name: "README.md/", Typeflag: tar.TypeDir, Mode: 0o755}), ErrConflict, false},
		{"tar over fifo", unpack(".", reg("fifo")), ErrNotRegular, false},
		{"tar into dir symlink", unpack("dir-out", reg("x")), ErrOutside, false},
		{"tar garbage", func(w *Workspace) error {
			_, err := w.Unpack(ctx, ".", strings.NewReader(strings.Repeat("not a tar ", 100)))
			return err
		}, ErrBadArchive, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && os.Geteuid() != 0 {
				t.Skip("needs root to make a device node")
			}
			f := newFixture(t)
			w := open(t, f)
			before := snapshot(t, f.base)
			err := tc.op(w)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			after := snapshot(t, f.base)
			if fmt.Sprint(before) != fmt.Sprint(after) {
				t.Errorf("changed on disk:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

func TestOperations(t *testing.T) {
	ctx := t.Context()
	f := newFixture(t)
	w := open(t, f)

	e, err := w.Write(ctx, "src/b.go", []byte("package b\n"))
	if err != nil || e.Type != "file" || e.Size != 10 || e.Path != "src/b.go" || e.Name != "b.go" || e.Mode != 0o644 {
		t.Fatalf("write: %+v %v", e, err)
	}
	// A symlink inside the workspace is replaced, never written through.
	if _, err := w.Write(ctx, "link-in", []byte("new")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.ws, "src", "a.go")); string(b) != "package a\n" {
		t.Fatalf("written through the symlink: %q", b)
	}
	r, n, err := w.Read(ctx, "src/b.go", 2, 4)
	if err != nil || n != 4 {
		t.Fatal(n, err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	if string(b) != "ckag" {
		t.Fatalf("range = %q", b)
	}
	// Past the end: nothing.
	r, n, err = w.Read(ctx, "src/b.go", 100, 0)
	if err != nil || n != 0 {
		t.Fatal(n, err)
	}
	r.Close()

	if _, err := w.Mkdir(ctx, "x/y/z", true); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Move(ctx, "src/b.go", "x/y/z/b.go", false); err != nil {
		t.Fatal(err)
	}
	entries, trunc, err := w.List(ctx, ".", 4)
	if err != nil || trunc {
		t.Fatal(err, trunc)
	}
	var paths []string
	for _, e := range entries {
		paths = append(paths, e.Path+":"+e.Type)
	}
	want := "CLAUDE.md:file README.md:file dir-out:symlink fifo:other link-in:file link-out:symlink"
	if !strings.HasPrefix(strings.Join(paths, " "), want) || !strings.Contains(strings.Join(paths, " "), "x/y/z/b.go:file") {
		t.Fatalf("list = %v", paths)
	}
	one, _, err := w.List(ctx, ".", 1)
	if err != nil || len(one) >= len(entries) {
		t.Fatalf("depth 1: %d entries of %d (%v)", len(one), len(entries), err)
	}
	if err := w.Delete(ctx, "x", true); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Stat(ctx, "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted: %v", err)
	}

	// A tar round trip: what WriteArchive writes, Unpack makes again
	// elsewhere.
	var buf bytes.Buffer
	if err := w.WriteArchive(ctx, "src", &buf); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Unpack(ctx, "copy/of/src", &buf); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(filepath.Join(f.ws, "copy", "of", "src", "a.go"))
	if string(a) != "package a\n" {
		t.Fatalf("unpacked %q", a)
	}
	// Unpacking again replaces files in place.
	if _, err := w.Unpack(ctx, "copy/of/src", bytes.NewReader(tarOf(t, &tar.Header{Name: "a.go", Typeflag: tar.TypeReg, Mode: 0o600, Size: 3}))); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(f.ws, "copy", "of", "src", "a.go")); fi.Size() != 3 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("replaced: %v", fi.Mode())
	}
	// No staging or temporary entry is left behind.
	left, _ := filepath.Glob(filepath.Join(f.ws, ".agentbox-*"))
	left2, _ := filepath.Glob(filepath.Join(f.ws, "*", ".agentbox-*"))
	if len(left)+len(left2) > 0 {
		t.Fatalf("left behind: %v %v", left, left2)
	}
}

func TestReadOnly(t *testing.T) {
	f := newFixture(t)
	w, err := Open(f.ws, Options{ReadOnly: ErrSandboxLive})
	must(t, err)
	defer w.Close()
	before := snapshot(t, f.base)
	if _, err := w.Write(t.Context(), "new", nil); !errors.Is(err, ErrSandboxLive) {
		t.Fatal(err)
	}
	if _, err := w.Unpack(t.Context(), ".", bytes.NewReader(tarOf(t, &tar.Header{Name: "n", Typeflag: tar.TypeReg, Size: 1}))); !errors.Is(err, ErrSandboxLive) {
		t.Fatal(err)
	}
	if fmt.Sprint(before) != fmt.Sprint(snapshot(t, f.base)) {
		t.Fatal("changed")
	}
}

func TestListTruncated(t *testing.T) {
	f := newFixture(t)
	w, err := Open(f.ws, Options{Limits: Limits{MaxListEntries: 3}})
	must(t, err)
	defer w.Close()
	es, trunc, err := w.List(t.Context(), ".", 3)
	if err != nil || !trunc || len(es) != 3 {
		t.Fatalf("%d entries, truncated %v, %v", len(es), trunc, err)
	}
}

// TestEscapeErrorText pins the text isEscape recognises: os.Root does
// not export its error.
func TestEscapeErrorText(t *testing.T) {
	f := newFixture(t)
	r, err := os.OpenRoot(f.ws)
	must(t, err)
	defer r.Close()
	_, err = r.Open("link-out")
	if !isEscape(err) {
		t.Fatalf("os.Root's escape error is now %v: update isEscape", err)
	}
}

// TestNewEntriesOwnedLikeTheRoot: as root, what the API makes gets the
// workspace root's owner (as the sandbox commit gives it), and a replaced
// file keeps its own.
func TestNewEntriesOwnedLikeTheRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files away")
	}
	ctx := t.Context()
	f := newFixture(t)
	must(t, os.Chown(f.ws, 1234, 1235))
	must(t, os.Chown(filepath.Join(f.ws, "README.md"), 4321, 4322))
	w := open(t, f)
	_, err := w.Write(ctx, "new.txt", []byte("x"))
	must(t, err)
	_, err = w.Write(ctx, "README.md", []byte("x"))
	must(t, err)
	_, err = w.Mkdir(ctx, "a/b", true)
	must(t, err)
	_, err = w.Unpack(ctx, "up/in", bytes.NewReader(tarOf(t, &tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})))
	must(t, err)
	for p, want := range map[string]int{"new.txt": 1234, "README.md": 4321, "a": 1234, "a/b": 1234, "up": 1234, "up/in": 1234, "up/in/d": 1234, "up/in/d/f": 1234} {
		fi, err := os.Lstat(filepath.Join(f.ws, p))
		must(t, err)
		if uid := int(fi.Sys().(*syscall.Stat_t).Uid); uid != want {
			t.Errorf("%s owned by %d, want %d", p, uid, want)
		}
	}
}

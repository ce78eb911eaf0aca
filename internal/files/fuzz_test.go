//go:build unix

package files

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzCleanPath: whatever a client sends, an accepted path is clean,
// relative and has no ".." component, so os.Root is given nothing to
// reinterpret.
func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"", ".", "a", "a/b", "../x", "/etc", "a//b", "a/./b", "a/..", "..", "\x00", "a/\xff", `\x`, "a/b/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rel, err := CleanPath(p)
		if err != nil {
			return
		}
		if rel != "." && (path.Clean(rel) != rel || path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") || strings.Contains(rel, "/../") || strings.HasSuffix(rel, "/..")) {
			t.Fatalf("CleanPath(%q) = %q", p, rel)
		}
	})
}

// FuzzUnpack: an arbitrary stream unpacked into a workspace never
// changes anything outside it, and leaves no staging directory; when it
// fails, it changes nothing inside either.
func FuzzUnpack(f *testing.F) {
	add := func(hs ...*tar.Header) {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range hs {
			_ = tw.WriteHeader(h)
			if h.Typeflag == tar.TypeReg {
				_, _ = tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
			}
		}
		_ = tw.Close()
		f.Add(b.Bytes(), "")
		f.Add(b.Bytes(), "sub")
	}
	add(&tar.Header{Name: "a", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644})
	add(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Size: 1})
	add(&tar.Header{Name: "../x", Typeflag: tar.TypeReg, Size: 1})
	add(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../../outside"}, &tar.Header{Name: "l/x", Typeflag: tar.TypeReg, Size: 1})
	add(&tar.Header{Name: "s", Typeflag: tar.TypeReg, Size: 1, Mode: 0o4755})
	f.Fuzz(func(t *testing.T, data []byte, dest string) {
		base := t.TempDir()
		ws, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
		for _, d := range []string{ws, outside} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../outside", filepath.Join(ws, "out")); err != nil {
			t.Fatal(err)
		}
		w, err := Open(ws, Options{Judge: protectJudge, Limits: Limits{MaxArchiveBytes: 1 << 16, MaxArchiveEntries: 64}})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		before := snapshot(t, base)
		_, err = w.Unpack(t.Context(), dest, bytes.NewReader(data))
		after := snapshot(t, base)
		for k, v := range before {
			if strings.HasPrefix(k, "/outside") && after[k] != v {
				t.Fatalf("outside changed: %s", k)
			}
		}
		for k := range after {
			if strings.HasPrefix(k, "/outside") && before[k] == "" {
				t.Fatalf("outside gained %s", k)
			}
			if strings.Contains(k, ".agentbox-") {
				t.Fatalf("left behind: %s", k)
			}
		}
		if err != nil && fmt.Sprint(before) != fmt.Sprint(after) {
			t.Fatalf("failed (%v) but changed the workspace", err)
		}
	})
}

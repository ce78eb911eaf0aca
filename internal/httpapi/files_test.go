package httpapi

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/files"
)

// dirFiles serves the session "s1" from a directory; any other session is
// unknown. Its judge refuses CLAUDE.md and .git as the commit would.
type dirFiles struct {
	dir      string
	readOnly error
	id       string // "" is "s1"
}

func (d dirFiles) Open(_ context.Context, id string) (*files.Workspace, error) {
	if want := cmp.Or(d.id, "s1"); id != want {
		return nil, fmt.Errorf("session %q: %w", id, engine.ErrNotFound)
	}
	judge := func(context.Context) (files.Judge, error) {
		return func(rel string, _ bool) (string, bool) {
			for seg := range strings.SplitSeq(rel, "/") {
				if strings.EqualFold(seg, "CLAUDE.md") || strings.EqualFold(seg, ".git") {
					return "protected:**/" + seg, false
				}
			}
			return "", true
		}, nil
	}
	return files.Open(d.dir, files.Options{Judge: judge, ReadOnly: d.readOnly,
		Limits: files.Limits{MaxFileBytes: 64, MaxArchiveBytes: 1 << 10, MaxArchiveEntries: 8}})
}

func filesFixture(t *testing.T) (base, ws string) {
	t.Helper()
	base = t.TempDir()
	ws = filepath.Join(base, "ws")
	for _, d := range []string{ws, filepath.Join(base, "outside"), filepath.Join(ws, "src")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, s := range map[string]string{"outside/secret": "s", "ws/src/a.go": "package a\n", "ws/CLAUDE.md": "x"} {
		if err := os.WriteFile(filepath.Join(base, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range [][2]string{{"../outside/secret", "ws/link-out"}, {"../outside", "ws/dir-out"}} {
		if err := os.Symlink(l[0], filepath.Join(base, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	return base, ws
}

func treeSum(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v %d", p, fi.Mode(), fi.Size())
		if fi.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			fmt.Fprintf(&b, " %x", sha256.Sum256(c))
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func tarBytes(t *testing.T, hs ...*tar.Header) string {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestFilesBadInput: each bad input gets its status and problem type, and
// nothing changes on disk, in the workspace or beside it.
func TestFilesBadInput(t *testing.T) {
	const octet, xtar = "application/octet-stream", "application/x-tar"
	reg := func(name string, size int64) *tar.Header {
		return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}
	}
	cases := []struct {
		name, method, path, body, ct string
		status                       int
		typ                          string
	}{
		{"write ../x", "PUT", "/v1/sessions/s1/files/content?path=../x", "x", octet, 403, client.ProblemOutsideWorkspace},
		{"write encoded ../x", "PUT", "/v1/sessions/s1/files/content?path=..%2Fx", "x", octet, 403, client.ProblemOutsideWorkspace},
		{"write absolute", "PUT", "/v1/sessions/s1/files/content?path=%2Fetc%2Fpasswd", "x", octet, 403, client.ProblemOutsideWorkspace},
		{"write through symlink dir", "PUT", "/v1/sessions/s1/files/content?path=dir-out/new", "x", octet, 403, client.ProblemOutsideWorkspace},
		{"write oversize", "PUT", "/v1/sessions/s1/files/content?path=big", strings.Repeat("x", 65), octet, 413, client.ProblemPayloadTooLarge},
		{"write protected", "PUT", "/v1/sessions/s1/files/content?path=CLAUDE.md", "x", octet, 403, client.ProblemProtectedPath},
		{"write fifo", "PUT", "/v1/sessions/s1/files/content?path=fifo", "x", octet, 422, client.ProblemNotRegularFile},
		{"write wrong media type", "PUT", "/v1/sessions/s1/files/content?path=a", "x", "application/json", 415, client.ProblemUnsupportedMediaType},
		{"write unknown session", "PUT", "/v1/sessions/nope/files/content?path=a", "x", octet, 404, client.ProblemNotFound},
		{"write missing parent", "PUT", "/v1/sessions/s1/files/content?path=no/a", "x", octet, 404, client.ProblemFileNotFound},
		{"write path unclean", "PUT", "/v1/sessions/s1/files/content?path=src//a.go", "x", octet, 422, client.ProblemValidation},
		{"write no path", "PUT", "/v1/sessions/s1/files/content", "x", octet, 422, client.ProblemValidation},
		{"url path ..", "GET", "/v1/sessions/s1/files/%2E%2E/content?path=a", "", "", 400, client.ProblemBadRequest},
		{"read symlink out", "GET", "/v1/sessions/s1/files/content?path=link-out", "", "", 403, client.ProblemOutsideWorkspace},
		{"read encoded ..", "GET", "/v1/sessions/s1/files/content?path=src%2F..%2F..%2Foutside%2Fsecret", "", "", 403, client.ProblemOutsideWorkspace},
		{"read fifo", "GET", "/v1/sessions/s1/files/content?path=fifo", "", "", 422, client.ProblemNotRegularFile},
		{"read missing", "GET", "/v1/sessions/s1/files/content?path=nope", "", "", 404, client.ProblemFileNotFound},
		{"read unknown session", "GET", "/v1/sessions/nope/files/content?path=a", "", "", 404, client.ProblemNotFound},
		{"read negative offset", "GET", "/v1/sessions/s1/files/content?path=src/a.go&offset=-1", "", "", 422, client.ProblemValidation},
		{"list dir out", "GET", "/v1/sessions/s1/files?path=dir-out", "", "", 403, client.ProblemOutsideWorkspace},
		{"list depth 0", "GET", "/v1/sessions/s1/files?depth=0", "", "", 422, client.ProblemValidation},
		{"stat ..", "GET", "/v1/sessions/s1/files/stat?path=..", "", "", 403, client.ProblemOutsideWorkspace},
		{"mkdir out", "POST", "/v1/sessions/s1/files/mkdir", `{"path":"dir-out/x","parents":true}`, "application/json", 403, client.ProblemOutsideWorkspace},
		{"mkdir .git", "POST", "/v1/sessions/s1/files/mkdir", `{"path":".git"}`, "application/json", 403, client.ProblemProtectedPath},
		{"mkdir exists", "POST", "/v1/sessions/s1/files/mkdir", `{"path":"src"}`, "application/json", 409, client.ProblemFileExists},
		{"move out", "POST", "/v1/sessions/s1/files/move", `{"from":"src/a.go","to":"../a.go"}`, "application/json", 403, client.ProblemOutsideWorkspace},
		{"move protected", "POST", "/v1/sessions/s1/files/move", `{"from":"CLAUDE.md","to":"b"}`, "application/json", 403, client.ProblemProtectedPath},
		{"delete protected", "DELETE", "/v1/sessions/s1/files?path=CLAUDE.md", "", "", 403, client.ProblemProtectedPath},
		{"delete non-empty", "DELETE", "/v1/sessions/s1/files?path=src", "", "", 409, client.ProblemConflict},
		{"delete through symlink", "DELETE", "/v1/sessions/s1/files?path=dir-out/secret", "", "", 403, client.ProblemOutsideWorkspace},
		{"tar dotdot", "PUT", "/v1/sessions/s1/files/archive", tarBytes(t, reg("ok", 1), reg("../x", 1)), xtar, 403, client.ProblemOutsideWorkspace},
		{"tar absolute", "PUT", "/v1/sessions/s1/files/archive", tarBytes(t, reg("/x", 1)), xtar, 403, client.ProblemOutsideWorkspace},
		{"tar symlink out", "PUT", "/v1/sessions/s1/files/archive", tarBytes(t, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../outside"}), xtar, 403, client.ProblemOutsideWorkspace},
		{"tar device", "PUT", "/v1/sessions/s1/files/archive", tarBytes(t, &tar.Header{Name: "d", Typeflag: tar.TypeChar}), xtar, 422, client.ProblemNotRegularFile},
		{"tar setuid", "PUT", "/v1/sessions/s1/files/archive", tarBytes(t, &tar.Header{Name: "s", Typeflag: tar.TypeReg, Mode: 0o4755}), xtar, 422, client.ProblemInvalidArchive},
		{"tar hard link", "PUT", "/v1/sessions/s1/files/archive", tarBytes(t, &tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "src/a.go"}), xtar, 422, client.ProblemInvalidArchive},
		{"tar protected", "PUT", "/v1/sessions/s1/files/archive", tarBytes(t, reg("ok", 1), reg("d/CLAUDE.md", 1)), xtar, 403, client.ProblemProtectedPath},
		{"tar too many", "PUT", "/v1/sessions/s1/files/archive", tarBytes(t, reg("1", 0), reg("2", 0), reg("3", 0), reg("4", 0), reg("5", 0), reg("6", 0), reg("7", 0), reg("8", 0), reg("9", 0)), xtar, 413, client.ProblemTooLarge},
		{"tar garbage", "PUT", "/v1/sessions/s1/files/archive", strings.Repeat("junk", 200), xtar, 422, client.ProblemInvalidArchive},
		{"tar unknown session", "PUT", "/v1/sessions/nope/files/archive", tarBytes(t, reg("a", 1)), xtar, 404, client.ProblemNotFound},
		{"download missing", "GET", "/v1/sessions/s1/files/archive?path=big", "", "", 404, client.ProblemFileNotFound},
		{"watch out", "GET", "/v1/sessions/s1/files/watch?path=dir-out", "", "", 403, client.ProblemOutsideWorkspace},
	}
	// The same cases on a process's workspace (/v1/processes/{id}/files…):
	// one set of operations over both.
	scopes := []struct{ name, from, to string }{
		{"session", "", ""},
		{"process", "/v1/sessions/", "/v1/processes/"},
	}
	for _, sc := range scopes {
		for _, tc := range cases {
			t.Run(sc.name+"/"+tc.name, func(t *testing.T) {
				base, ws := filesFixture(t)
				h := newHarness(t, Config{Token: testToken, Files: dirFiles{dir: ws}, ProcessFiles: dirFiles{dir: ws, id: "prc_1"}, MaxFileBytes: 64})
				before := treeSum(t, base)
				hdr := []string{}
				if tc.ct != "" {
					hdr = append(hdr, "Content-Type", tc.ct)
				}
				path := tc.path
				if sc.from != "" {
					path = strings.Replace(strings.Replace(path, "/v1/sessions/s1/", "/v1/processes/prc_1/", 1), sc.from, sc.to, 1)
				}
				h.do(tc.method, path, tc.body, hdr...).problem(t, tc.status, tc.typ)
				if after := treeSum(t, base); after != before {
					t.Errorf("changed on disk:\n%s\nwas\n%s", after, before)
				}
			})
		}
	}
}

// TestFilesRoundTrip: write, read (a range), stat, list, mkdir, move,
// tar down and up, delete, through HTTP.
func TestFilesRoundTrip(t *testing.T) {
	_, ws := filesFixture(t)
	h := newHarness(t, Config{Token: testToken, Files: dirFiles{dir: ws}})
	var e client.FileEntry
	h.do("PUT", "/v1/sessions/s1/files/content?path=src/b.go", "package b\n", "Content-Type", "application/octet-stream").ok(t, 200, &e)
	if e.Path != "src/b.go" || e.Type != "file" || e.Size != 10 || e.Mode != "0644" {
		t.Fatalf("entry %+v", e)
	}
	// An empty body is an empty file; no Content-Type is taken as octet-stream.
	h.do("PUT", "/v1/sessions/s1/files/content?path=empty", "", "Content-Type", "").ok(t, 200, &e)
	r := h.do("GET", "/v1/sessions/s1/files/content?path=src/b.go&offset=2&length=3", "")
	if r.StatusCode != 200 || string(r.body) != "cka" || r.Header.Get("Content-Type") != "application/octet-stream" || r.Header.Get("Content-Length") != "3" {
		t.Fatalf("read: %d %q %v", r.StatusCode, r.body, r.Header)
	}
	h.do("GET", "/v1/sessions/s1/files/stat?path=link-out", "").ok(t, 200, &e)
	if e.Type != "symlink" {
		t.Fatalf("stat %+v", e)
	}
	h.do("POST", "/v1/sessions/s1/files/mkdir", `{"path":"x/y","parents":true}`).ok(t, 200, &e)
	h.do("POST", "/v1/sessions/s1/files/move", `{"from":"src/b.go","to":"x/y/b.go"}`).ok(t, 200, &e)
	var l client.FileList
	h.do("GET", "/v1/sessions/s1/files?path=x&depth=2", "").ok(t, 200, &l)
	if len(l.Entries) != 2 || l.Entries[1].Path != "x/y/b.go" {
		t.Fatalf("list %+v", l)
	}
	tarball := h.do("GET", "/v1/sessions/s1/files/archive?path=x", "")
	if tarball.StatusCode != 200 || tarball.Header.Get("Content-Type") != "application/x-tar" {
		t.Fatalf("archive: %d %s", tarball.StatusCode, tarball.body)
	}
	h.do("PUT", "/v1/sessions/s1/files/archive?path=copy", string(tarball.body), "Content-Type", "application/x-tar").ok(t, 200, &e)
	if b, _ := os.ReadFile(filepath.Join(ws, "copy", "y", "b.go")); string(b) != "package b\n" {
		t.Fatalf("unpacked %q", b)
	}
	h.do("DELETE", "/v1/sessions/s1/files?path=x&recursive=true", "").ok(t, 204, nil)
	h.do("GET", "/v1/sessions/s1/files/stat?path=x", "").problem(t, 404, client.ProblemFileNotFound)
}

func TestFilesReadOnlyAndUnavailable(t *testing.T) {
	base, ws := filesFixture(t)
	h := newHarness(t, Config{Token: testToken, Files: dirFiles{dir: ws, readOnly: files.ErrSandboxLive}})
	before := treeSum(t, base)
	h.do("PUT", "/v1/sessions/s1/files/content?path=a", "x", "Content-Type", "application/octet-stream").problem(t, 409, client.ProblemSandboxLive)
	h.do("GET", "/v1/sessions/s1/files/stat?path=src", "").ok(t, 200, nil)
	if treeSum(t, base) != before {
		t.Fatal("changed")
	}
	h = newHarness(t, Config{Token: testToken})
	h.do("GET", "/v1/sessions/s1/files", "").problem(t, 503, client.ProblemUnavailable)
}

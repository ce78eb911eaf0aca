package execution

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// mustNotStart is a Remote with processes that fails the test if a
// process reaches it.
type mustNotStart struct{ mustNotRun }

func (m mustNotStart) StartProcess(context.Context, RemoteStartRequest) (RemoteProcess, error) {
	m.t.Error("the process reached the provider")
	return nil, errors.New("reached")
}

// TestStartOnProviderRefusedHere: a process naming a provider is refused
// on this host, before any provider is asked, when no provider runs
// processes, when the request is malformed or when its policy is refused
// here; no local sandbox and no workspace is left for it.
func TestStartOnProviderRefusedHere(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remote func(t *testing.T) Remote
		req    StartRequest
		want   error
	}{
		{"no providers", nil, StartRequest{Argv: []string{"true"}, Provider: "docker"}, provider.ErrUnknown},
		{"providers without processes", func(t *testing.T) Remote { return mustNotRun{t} }, StartRequest{Argv: []string{"true"}, Provider: "docker"}, provider.ErrUnknown},
		{"malformed", func(t *testing.T) Remote { return mustNotStart{mustNotRun{t}} }, StartRequest{Argv: []string{""}, Provider: "docker"}, ErrInvalid},
		{"bad file path", func(t *testing.T) Remote { return mustNotStart{mustNotRun{t}} }, StartRequest{Argv: []string{"true"}, Files: map[string][]byte{"../x": nil}, Provider: "docker"}, ErrInvalid},
		{"policy refused", func(t *testing.T) Remote { return mustNotStart{mustNotRun{t}} }, StartRequest{Argv: []string{"true"}, Policy: PolicyRef{Preset: "refused"}, Provider: "docker"}, ErrPolicyDenied},
		{"policy invalid", func(t *testing.T) Remote { return mustNotStart{mustNotRun{t}} }, StartRequest{Argv: []string{"true"}, Policy: PolicyRef{Preset: "nope"}, Provider: "docker"}, ErrPolicyInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			env := newTestService(t, func(o *Options) {
				o.WorkDir = work
				if tc.remote != nil {
					o.Remote = tc.remote(t)
				}
			})
			if _, err := env.svc.Start(t.Context(), tc.req); !errors.Is(err, tc.want) {
				t.Fatalf("Start = %v, want %v", err, tc.want)
			}
			if n := len(env.rt.Specs()); n != 0 {
				t.Fatalf("%d local sandboxes made for a process on a provider", n)
			}
			if left, _ := os.ReadDir(work); len(left) != 0 {
				t.Fatalf("left in the work directory: %v", left)
			}
			if n := len(env.svc.List()); n != 0 {
				t.Fatalf("%d processes listed", n)
			}
		})
	}
}

// archiveProc is a RemoteProcess whose workspace archive is given: what
// a provider's inner daemon answers, hostile or not.
type archiveProc struct {
	tar []byte
}

func (a archiveProc) Pid() int                                           { return 0 }
func (a archiveProc) Signal(os.Signal) error                             { return nil }
func (a archiveProc) Wait() (sandbox.Exit, error)                        { return sandbox.Exit{}, nil }
func (a archiveProc) Sandbox() SandboxInfo                               { return SandboxInfo{ID: "sb", Provider: "p"} }
func (a archiveProc) Resize(context.Context, int, int) error             { return nil }
func (a archiveProc) Close(context.Context) ([]sandbox.Violation, error) { return nil, nil }
func (a archiveProc) Archive(context.Context) (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(a.tar)), nil
}

type entry struct {
	name, body string
	typ        byte
}

func tarOf(t *testing.T, es ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ == tar.TypeDir {
			h.Mode, h.Size = 0o755, 0
		}
		if e.typ == tar.TypeSymlink || e.typ == tar.TypeLink {
			h.Linkname, h.Size = e.body, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestCopyBack: a provider process's workspace comes back by the
// commit's rules: what they refuse is dropped and reported, the rest
// lands; an archive with an entry no upload may have (a name leaving the
// workspace, a hard link) applies nothing.
func TestCopyBack(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []entry
		want    map[string]string
		dropped []string
		err     bool
	}{
		{"files", []entry{{"a.txt", "a\n", tar.TypeReg}, {"d", "", tar.TypeDir}, {"d/b.txt", "b\n", tar.TypeReg}},
			map[string]string{"a.txt": "a\n", "d/b.txt": "b\n"}, nil, false},
		{"git dropped", []entry{{"a.txt", "a\n", tar.TypeReg}, {".git", "", tar.TypeDir}, {".git/config", "[core]\n", tar.TypeReg}},
			map[string]string{"a.txt": "a\n"}, []string{".git", ".git/config"}, false},
		{"escape", []entry{{"a.txt", "a\n", tar.TypeReg}, {"../x", "x", tar.TypeReg}}, nil, nil, true},
		{"hard link", []entry{{"a.txt", "a\n", tar.TypeReg}, {"b", "a.txt", tar.TypeLink}}, nil, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			viol, err := copyBack(t.Context(), archiveProc{tar: tarOf(t, tc.entries...)}, dir, sandbox.Spec{Workspace: dir})
			if (err != nil) != tc.err {
				t.Fatalf("copyBack = %v, want error %v", err, tc.err)
			}
			var dropped []string
			for _, v := range viol {
				if v.Kind != sandbox.ViolationFilesystem || v.Action != "dropped" || v.Rule == "" {
					t.Errorf("violation %+v", v)
				}
				dropped = append(dropped, v.Target)
			}
			if len(dropped) != len(tc.dropped) || (len(dropped) > 0 && dropped[len(dropped)-1] != tc.dropped[len(tc.dropped)-1]) {
				t.Fatalf("dropped %v, want %v", dropped, tc.dropped)
			}
			got := map[string]string{}
			_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					b, _ := os.ReadFile(p)
					rel, _ := filepath.Rel(dir, p)
					got[filepath.ToSlash(rel)] = string(b)
				}
				return nil
			})
			if len(got) != len(tc.want) {
				t.Fatalf("workspace holds %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("workspace holds %v, want %v", got, tc.want)
				}
			}
		})
	}
}

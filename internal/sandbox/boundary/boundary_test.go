//go:build linux

package boundary_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/boundary"
)

func baseSpec(t *testing.T) sandbox.Spec {
	return sandbox.Spec{
		Workspace: t.TempDir(),
		Env:       map[string]string{"PATH": "/usr/bin:/bin", "FROM_SPEC": "spec"},
		Network:   sandbox.Network{Mode: sandbox.NetworkNone},
	}
}

// TestCheck: what neither the container nor the runtime enforces is
// refused, naming the field.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*sandbox.Spec)
		field string
	}{
		{"none", func(*sandbox.Spec) {}, ""},
		{"limits are the container's", func(s *sandbox.Spec) {
			s.Limits = sandbox.Limits{MemoryBytes: 1 << 30, Pids: 10, Files: 100, DiskBytes: 1 << 20, Timeout: time.Second}
		}, ""},
		{"proxy", func(s *sandbox.Spec) { s.Network.Mode = sandbox.NetworkProxy }, "network.mode proxy"},
		{"host network", func(s *sandbox.Spec) { s.Network.Mode = sandbox.NetworkHost }, "network.mode host"},
		{"write paths", func(s *sandbox.Spec) { s.WritePaths = []string{"/var/x"} }, "filesystem.write"},
		{"strict", func(s *sandbox.Spec) { s.Syscalls.Profile = "strict" }, "syscalls.profile strict"},
		{"deny", func(s *sandbox.Spec) { s.Syscalls.Deny = []string{"ptrace"} }, "syscalls.deny"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := baseSpec(t)
			tc.edit(&s)
			sb, err := boundary.New().Create(t.Context(), s)
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				_, _ = sb.Close(t.Context())
				return
			}
			if !errors.Is(err, sandbox.ErrUnenforceable) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Create = %v; want ErrUnenforceable naming %q", err, tc.field)
			}
		})
	}
}

// TestRun: a process runs in the workspace with the spec's environment
// and the command's over it, and what it leaves in its group is killed
// with it; a timeout kills it with the reason.
func TestRun(t *testing.T) {
	s := baseSpec(t)
	sb, err := boundary.New().Create(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(t.Context())
	if sb.Info().Runtime != boundary.RuntimeName {
		t.Fatalf("Info = %+v", sb.Info())
	}
	var out bytes.Buffer
	p, err := sb.Start(t.Context(), sandbox.Cmd{Args: []string{"sh", "-c", `echo "$FROM_SPEC $FROM_CMD $(pwd)"; echo hi > f`},
		Env: map[string]string{"FROM_CMD": "cmd"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	exit, err := p.Wait()
	if err != nil || exit.Code != 0 || exit.Reason != "" {
		t.Fatalf("Wait = %+v, %v", exit, err)
	}
	if want := "spec cmd " + s.Workspace + "\n"; out.String() != want {
		t.Fatalf("output %q, want %q", out.String(), want)
	}
	root, err := sb.(sandbox.WorkspaceViewer).ViewWorkspace()
	if err != nil {
		t.Fatal(err)
	}
	b, err := root.ReadFile("f")
	root.Close()
	if err != nil || string(b) != "hi\n" {
		t.Fatalf("the workspace's f = %q, %v", b, err)
	}

	pidFile := filepath.Join(s.Workspace, "child")
	p, err = sb.Start(t.Context(), sandbox.Cmd{Args: []string{"sh", "-c", "sleep 60 & echo $! > child; wait"}, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	exit, err = p.Wait()
	if err != nil || exit.Reason != sandbox.ReasonTimeout || exit.Signal != "SIGKILL" {
		t.Fatalf("Wait = %+v, %v; want killed by its timeout", exit, err)
	}
	pid, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/stat")
		if err != nil || strings.Contains(string(st), ") Z ") {
			break // gone (or a zombie of its reaper)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the process's child %s outlived its group's kill", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := sb.Start(t.Context(), sandbox.Cmd{Args: []string{"no-such-program"}}); err == nil {
		t.Fatal("a program not in PATH started")
	}
}

// TestVerify: a process that is root (the tests run as root, or with a
// writable root filesystem) is no boundary: a daemon given --boundary
// there refuses to start.
func TestVerify(t *testing.T) {
	if err := boundary.Verify(); err == nil {
		t.Fatal("Verify passed outside a container boundary")
	} else {
		t.Logf("refused: %v", err)
	}
}

//go:build linux

package agent

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// escapingScript starts a writer that escapes the process group twice
// over: it calls setsid and is double-forked (its parent exits at once),
// then appends a line to $1 every 50 ms for ever. The script itself then
// sleeps, as an agent in the middle of a turn.
const escapingScript = `setsid sh -c '(while :; do echo x >> "$1"; sleep 0.05; done) & exit 0' sh "$1"; exec sleep 1000`

// TestProcEndsWholeTree checks that ending a Proc ends every process it
// started, including one that left the process group and session and was
// orphaned: none is alive once Wait returns, and the file it wrote stops
// growing.
func TestProcEndsWholeTree(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(*Proc) error
	}{
		{"kill", (*Proc).Kill},
		{"terminate", (*Proc).Terminate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marker := "AGENTBOX_TREE_TEST=" + rand.Text()
			file := filepath.Join(t.TempDir(), "out")
			p := &Proc{Path: "/bin/sh", Args: []string{"-c", escapingScript, "sh", file},
				Env: []string{marker, "PATH=/usr/bin:/bin"}, Dir: t.TempDir()}
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the escaped writer to write", func() bool { return size(file) > 0 })
			if n := len(processesWith(marker)); n < 2 {
				t.Fatalf("%d processes carry the marker; want the script and the writer", n)
			}
			if err := tc.end(p); err != nil {
				t.Fatal(err)
			}
			ex := p.Wait()
			t.Logf("the process %s", ex.Desc)
			if left := processesWith(marker); len(left) > 0 {
				t.Fatalf("after Wait, processes of the tree are alive: %v", left)
			}
			n := size(file)
			time.Sleep(200 * time.Millisecond) // four of the writer's periods
			if m := size(file); m != n {
				t.Errorf("the file grew from %d to %d bytes after the tree was ended", n, m)
			}
		})
	}
}

// TestProcExitEndsLeftovers checks that processes an agent leaves behind
// when it exits by itself die with it, and that its exit status is its
// own, not the supervisor's.
func TestProcExitEndsLeftovers(t *testing.T) {
	marker := "AGENTBOX_TREE_TEST=" + rand.Text()
	file := filepath.Join(t.TempDir(), "out")
	script := `setsid sh -c '(while :; do echo x >> "$1"; sleep 0.05; done) & exit 0' sh "$1"; while [ ! -s "$1" ]; do sleep 0.01; done; exit 7`
	p := &Proc{Path: "/bin/sh", Args: []string{"-c", script, "sh", file},
		Env: []string{marker, "PATH=/usr/bin:/bin"}, Dir: t.TempDir()}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	ex := p.Wait()
	if ex.Code != 7 {
		t.Errorf("exit = %+v; want code 7", ex)
	}
	if left := processesWith(marker); len(left) > 0 {
		t.Fatalf("after the agent exited, processes it started are alive: %v", left)
	}
}

// TestProcKilledBySignal checks that a signal death is reported as such.
func TestProcKilledBySignal(t *testing.T) {
	p := &Proc{Path: "/bin/sh", Args: []string{"-c", "kill -USR1 $$"}, Env: []string{"PATH=/usr/bin:/bin"}}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if ex := p.Wait(); ex.Code != 128+int(syscall.SIGUSR1) {
		t.Errorf("exit = %+v; want %d", ex, 128+int(syscall.SIGUSR1))
	}
}

// TestProcStartMissing checks that a command that cannot start fails
// Start, as exec does.
func TestProcStartMissing(t *testing.T) {
	p := &Proc{Path: filepath.Join(t.TempDir(), "missing"), Env: []string{}}
	if err := p.Start(); err == nil {
		p.Wait()
		t.Fatal("Start of a missing binary succeeded")
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func size(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// processesWith lists the live (not zombie) processes whose environment
// holds kv.
func processesWith(kv string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !strings.Contains("\x00"+string(env), "\x00"+kv+"\x00") {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := strings.LastIndexByte(string(st), ')'); i > 0 && len(st) > i+2 && (st[i+2] == 'Z' || st[i+2] == 'X') {
				continue
			}
		}
		out = append(out, pid)
	}
	return out
}

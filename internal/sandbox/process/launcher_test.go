package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// parentOf returns the parent pid of pid and that parent's argv[0].
func parentOf(t testing.TB, pid int) (int, string) {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", ppid))
	arg0, _, _ := strings.Cut(string(cmd), "\x00")
	return ppid, arg0
}

// TestLauncherStartsInits: an init, cold or spare, is the launcher's child,
// not the daemon's (the daemon never forks itself per sandbox), and one
// launcher starts them all.
func TestLauncherStartsInits(t *testing.T) {
	needRoot(t)
	rt := New(Options{Spares: 1})
	t.Cleanup(func() { _ = rt.Close() })
	var launchers []int
	for range 3 { // cold, then from spares
		sb, err := rt.Create(t.Context(), baseSpec(t))
		if err != nil {
			t.Fatal(err)
		}
		ppid, arg0 := parentOf(t, sb.(*box).initPid)
		if arg0 != launcherArg0 || ppid == os.Getpid() {
			t.Errorf("the init's parent is %d (%q), want the launcher", ppid, arg0)
		}
		if gp, _ := parentOf(t, ppid); gp != os.Getpid() {
			t.Errorf("the launcher's parent is %d, want this process %d", gp, os.Getpid())
		}
		launchers = append(launchers, ppid)
		if _, err := sb.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if launchers[0] != launchers[1] || launchers[1] != launchers[2] {
		t.Errorf("launchers %v, want one", launchers)
	}
}

// TestLauncherDeath: a launcher that dies takes its inits with it (as a
// daemon that dies does); their sandboxes see them end, and the next
// Create starts a new launcher.
func TestLauncherDeath(t *testing.T) {
	needRoot(t)
	rt := New(Options{})
	t.Cleanup(func() { _ = rt.Close() })
	ctx := t.Context()
	sb, err := rt.Create(ctx, baseSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	b := sb.(*box)
	launcher, _ := parentOf(t, b.initPid)
	if err := syscall.Kill(launcher, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, b.initPid)
	for _, ch := range []chan struct{}{b.waitDone, b.dead} {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatal("the sandbox did not see its init end")
		}
	}
	if _, err := sb.Start(ctx, sandbox.Cmd{Args: []string{"/bin/true"}}); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("Start in a sandbox whose init died: %v, want ErrClosed", err)
	}
	sb2, err := rt.Create(ctx, baseSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sb2.Close(context.Background())
	if e, _, _ := run(t, sb2, sandbox.Cmd{Args: []string{"/bin/true"}}); e.Code != 0 {
		t.Fatalf("true after the launcher died: %+v", e)
	}
	if l2, _ := parentOf(t, sb2.(*box).initPid); l2 == launcher {
		t.Errorf("the new init's parent is the dead launcher %d", l2)
	}
}

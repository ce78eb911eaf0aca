package process

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/cgroup"
)

// watchedGroup is a real cgroup that counts the kills through it.
type watchedGroup struct {
	*cgroup.Group
	kills atomic.Int32
}

func (g *watchedGroup) Kill() error {
	g.kills.Add(1)
	return g.Group.Kill()
}

// watchCgroups makes the sandboxes created until the test ends use
// watchedGroups, and returns them as they are made.
func watchCgroups(t *testing.T) func() []*watchedGroup {
	t.Helper()
	var mu sync.Mutex
	var groups []*watchedGroup
	saved := newCgroup
	newCgroup = func(name string, l sandbox.Limits) (cgroupGroup, error) {
		g, err := cgroup.New(name, cgroup.Limits{MemoryBytes: l.MemoryBytes, CPUs: l.CPUs, Pids: l.Pids})
		if err != nil {
			return nil, err
		}
		w := &watchedGroup{Group: g}
		mu.Lock()
		groups = append(groups, w)
		mu.Unlock()
		return w, nil
	}
	t.Cleanup(func() { newCgroup = saved })
	return func() []*watchedGroup {
		mu.Lock()
		defer mu.Unlock()
		return append([]*watchedGroup(nil), groups...)
	}
}

// TestCloseKillsThroughTheInit: closing a sandbox kills its whole tree,
// a double-forked daemon included, by killing its init (the kernel ends
// the pid namespace with it), and leaves the cgroup empty without a kill
// through the cgroup (whose freeze, on cgroup v1, patches the kernel's
// text each time). Before, every Close froze and thawed the cgroup twice.
func TestCloseKillsThroughTheInit(t *testing.T) {
	needRoot(t)
	groups := watchCgroups(t)
	spec := baseSpec(t)
	spec.Limits.Pids = 64
	sb, err := New(Options{}).Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	// A daemon that left its parent's session and process group: only
	// the pid namespace (or the cgroup) still holds it.
	mustRun(t, sb, `setsid sh -c 'sleep 1000 & exit 0' </dev/null >/dev/null 2>&1; sleep 0.1`)
	gs := groups()
	if len(gs) != 1 {
		t.Fatalf("%d cgroups made, want 1", len(gs))
	}
	g := gs[0]
	if pids, err := g.Pids(); err != nil || len(pids) < 2 {
		t.Fatalf("cgroup pids before Close: %v %v, want the init and the daemon", pids, err)
	}
	if _, err := sb.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := g.kills.Load(); n != 0 {
		t.Errorf("Close killed through the cgroup %d times, want 0 (the init's death empties it)", n)
	}
	if _, err := os.Stat(g.Dir("pids")); !os.IsNotExist(err) {
		t.Errorf("cgroup %s left after Close: %v", g.Dir("pids"), err)
	}
}

// TestCloseKillsWhatTheInitLeft: a process in the sandbox's cgroup but
// outside its pid namespace (which nothing in a sandbox can make; here
// the test puts a host process there) does not die with the init: Close
// kills it through the cgroup, and removes the cgroup.
func TestCloseKillsWhatTheInitLeft(t *testing.T) {
	needRoot(t)
	groups := watchCgroups(t)
	sb, err := New(Options{}).Create(t.Context(), baseSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	g := groups()[0]
	stray := exec.Command("sleep", "1000")
	if err := stray.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- stray.Wait() }()
	t.Cleanup(func() { _ = stray.Process.Kill() })
	if err := g.Add(stray.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := g.kills.Load(); n == 0 {
		t.Error("Close did not kill through the cgroup what the init's death left")
	}
	if err := <-waited; err == nil {
		t.Error("the stray process in the cgroup ended on its own, want killed")
	}
	if _, err := os.Stat(filepath.Join(g.Dir("pids"), "cgroup.procs")); !os.IsNotExist(err) {
		t.Errorf("cgroup left after Close: %v", err)
	}
}

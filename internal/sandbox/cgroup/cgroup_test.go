package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox/mountinfo"
)

// The tests start real processes, gate them on stdin until they are in the
// group (v1 cannot start a process inside a group), and look at what the
// kernel counted. Child roles run in this test binary.
const childEnv = "AGENTBOX_CGROUP_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "hog":
		waitGate()
		var keep [][]byte
		for range 1024 { // 1 GiB, 1 MiB at a time, every page touched
			b := make([]byte, 1<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			keep = append(keep, b)
		}
		fmt.Println("allocated", len(keep), "MiB")
		os.Exit(0)
	case "spin":
		waitGate()
		end := time.Now().Add(1500 * time.Millisecond)
		for time.Now().Before(end) {
		}
		os.Exit(0)
	}
	os.Exit(2)
}

func waitGate() {
	var b [1]byte
	if _, err := io.ReadFull(os.Stdin, b[:]); err != nil {
		os.Exit(3)
	}
}

func needCgroups(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root (CI runs as root)")
	}
	if info := Probe(); !info.Usable {
		t.Fatalf("cgroups unusable on this host: %+v", info)
	}
}

type gated struct {
	cmd  *exec.Cmd
	gate io.WriteCloser
	out  syncBuffer
}

// syncBuffer is written by exec's copying goroutine while a test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startGated starts cmd blocked on its stdin, adds it to g, then opens the
// gate.
func startGated(t *testing.T, g *Group, cmd *exec.Cmd) *gated {
	t.Helper()
	p := &gated{cmd: cmd}
	var err error
	if p.gate, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := p.gate.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	return p
}

func self(role string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+role)
	return cmd
}

func newGroup(t *testing.T, l Limits) *Group {
	t.Helper()
	g, err := New(fmt.Sprintf("test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "_")), l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Kill(); g.Delete() })
	return g
}

func TestMemoryLimitOOMKills(t *testing.T) {
	needCgroups(t)
	g := newGroup(t, Limits{MemoryBytes: 64 << 20})
	p := startGated(t, g, self("hog"))
	err := p.cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("hog ended with %v (output %q), want SIGKILL by the OOM killer", err, p.out.String())
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.OOMKills != 1 {
		t.Errorf("OOMKills = %d, want 1", st.OOMKills)
	}
	// The peak may pass the limit by the kernel's charge batch (64 pages
	// on x86) before the OOM killer acts.
	if st.MemoryMaxBytes < 32<<20 || st.MemoryMaxBytes > 64<<20+64*4096 {
		t.Errorf("MemoryMaxBytes = %d, want between 32 MiB and the 64 MiB limit (plus a charge batch)", st.MemoryMaxBytes)
	}
	if st.CPUMillis <= 0 {
		t.Errorf("CPUMillis = %d, want > 0", st.CPUMillis)
	}
}

// TestSetLimitsAfterAdd: a group made with no limits, holding a process,
// enforces the limits SetLimits writes afterwards.
func TestSetLimitsAfterAdd(t *testing.T) {
	needCgroups(t)
	g := newGroup(t, Limits{})
	cmd := self("hog")
	gate, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := g.SetLimits(Limits{MemoryBytes: 64 << 20, Pids: 64}); err != nil {
		t.Fatal(err)
	}
	if _, err := gate.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("hog ended with %v, want SIGKILL by the OOM killer", err)
	}
	if st, err := g.Stats(); err != nil || st.OOMKills != 1 {
		t.Errorf("stats %+v, %v: want 1 OOM kill", st, err)
	}
}

func TestPidsLimit(t *testing.T) {
	needCgroups(t)
	g := newGroup(t, Limits{Pids: 16})
	// A bounded fork bomb: 64 background sleeps. The shell gives up at the
	// first fork the limit refuses; the sleeps it started stay behind.
	p := startGated(t, g, exec.Command("/bin/sh", "-c",
		`read x; i=0; while [ $i -lt 64 ]; do sleep 600 & i=$((i+1)); done; sleep 600`))
	var st Stats
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if st, err = g.Stats(); err != nil {
			t.Fatal(err)
		}
		if st.PidsMaxHits > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.PidsMaxHits == 0 {
		t.Fatalf("PidsMaxHits = 0 after the fork bomb; stats %+v, output %q", st, p.out.String())
	}
	if st.Tasks > 16 || st.Tasks < 2 {
		t.Errorf("Tasks = %d, want between 2 and the limit 16", st.Tasks)
	}
	pids, err := g.Pids()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	if st, err := g.Stats(); err != nil || st.Tasks != 0 {
		t.Fatalf("after Kill: %+v, %v; want no tasks", st, err)
	}
	p.cmd.Wait()
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d survived Kill", pid)
		}
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

func TestCPUQuotaThrottles(t *testing.T) {
	needCgroups(t)
	g := newGroup(t, Limits{CPUs: 0.2})
	p := startGated(t, g, self("spin"))
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("spin: %v: %s", err, p.out.String())
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.CPUThrottled == 0 {
		t.Errorf("CPUThrottled = 0 for a 1.5 s busy loop under a 0.2-CPU quota; stats %+v", st)
	}
	if st.CPUMillis <= 0 {
		t.Errorf("CPUMillis = %d, want > 0", st.CPUMillis)
	}
}

func TestKillLeavesNothingAndDeleteRemovesDirs(t *testing.T) {
	needCgroups(t)
	g := newGroup(t, Limits{MemoryBytes: 256 << 20, Pids: 64, CPUs: 1})
	// A double-forked daemon in a new session, a background child, and
	// a foreground process.
	p := startGated(t, g, exec.Command("/bin/sh", "-c",
		`read x; setsid sh -c 'sleep 600 & sleep 600' & sleep 600 & echo up; exec sleep 600`))
	var pids []int
	deadline := time.Now().Add(30 * time.Second)
	for len(pids) < 5 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		var err error
		if pids, err = g.Pids(); err != nil {
			t.Fatal(err)
		}
	}
	if len(pids) < 5 {
		t.Fatalf("want at least 5 processes in the group, have %v", pids)
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	st, err := g.Stats()
	if err != nil || st.Tasks != 0 {
		t.Fatalf("after Kill: %+v, %v", st, err)
	}
	p.cmd.Wait()
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d survived Kill", pid)
		}
	}
	dirs := g.uniqueDirs()
	if len(dirs) == 0 {
		t.Fatal("group has no directories")
	}
	if err := g.Delete(); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists after Delete (%v)", d, err)
		}
	}
	if err := g.Delete(); err != nil {
		t.Errorf("second Delete: %v", err)
	}
}

func TestNewRejects(t *testing.T) {
	for _, name := range []string{"", "../x", "a/b", ".hidden", strings.Repeat("a", 200)} {
		if _, err := New(name, Limits{}); err == nil {
			t.Errorf("New(%q) succeeded", name)
		}
	}
	needCgroups(t)
	g := newGroup(t, Limits{})
	if _, err := New(g.Name(), Limits{}); err == nil {
		t.Errorf("New with an existing name succeeded")
	}
}

func TestRemoveStale(t *testing.T) {
	needCgroups(t)
	name := fmt.Sprintf("stale-%d", os.Getpid())
	g, err := New(name, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Delete() })
	busy := newGroup(t, Limits{})
	startGated(t, busy, exec.Command("/bin/sh", "-c", "read x; exec sleep 600"))
	// Too young: kept.
	if removed, err := RemoveStale(time.Hour); err != nil || containsName(removed, name) {
		t.Fatalf("RemoveStale(1h) = %v, %v; want %s kept", removed, err, name)
	}
	old := time.Now().Add(-2 * time.Hour)
	for _, d := range g.uniqueDirs() {
		if err := os.Chtimes(d, old, old); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range busy.uniqueDirs() {
		os.Chtimes(d, old, old)
	}
	removed, err := RemoveStale(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !containsName(removed, name) || containsName(removed, busy.Name()) {
		t.Errorf("RemoveStale removed %v; want %s and not the busy %s", removed, name, busy.Name())
	}
	for _, d := range g.uniqueDirs() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists", d)
		}
	}
}

func containsName(list []string, n string) bool {
	for _, x := range list {
		if x == n {
			return true
		}
	}
	return false
}

func TestProbe(t *testing.T) {
	info := Probe()
	t.Logf("%+v", info)
	if info.Mode == "unavailable" {
		t.Skip("no cgroup file system")
	}
	if info.Version != "v1" && info.Version != "v2" {
		t.Errorf("Version = %q", info.Version)
	}
	if len(info.Controllers)+len(info.Missing) == 0 {
		t.Error("no controllers reported at all")
	}
	if os.Geteuid() == 0 && !info.Usable {
		t.Errorf("root cannot create a group: %s", info.Err)
	}
}

func TestParseMountinfo(t *testing.T) {
	in := `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/my\040freezer rw - cgroup cgroup rw,freezer
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
garbage line
`
	var tab mountTable
	tab.v1 = map[string]string{}
	tab.add(mountinfo.Parse([]byte(in)))
	want := map[string]string{"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
		"memory": "/sys/fs/cgroup/memory", "freezer": "/sys/fs/cgroup/my freezer"}
	for c, m := range want {
		if tab.v1[c] != m {
			t.Errorf("v1[%s] = %q, want %q", c, tab.v1[c], m)
		}
	}
	if tab.v1["pids"] != "" {
		t.Errorf("pids = %q, want none", tab.v1["pids"])
	}
	if tab.v2 != "/sys/fs/cgroup/unified" {
		t.Errorf("v2 = %q", tab.v2)
	}
}

// TestRemove: the reaper of a dead daemon's group kills what runs in it
// and removes it everywhere, also from a hierarchy the package does not
// manage (where runsc puts its containers).
func TestRemove(t *testing.T) {
	needCgroups(t)
	g := newGroup(t, Limits{Pids: 16})
	p := startGated(t, g, exec.Command("/bin/sh", "-c", "read x; exec sleep 600"))
	ms, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	var foreign string
	for _, mp := range allCgroupMounts(ms) {
		if !slices.Contains(g.uniqueDirs(), filepath.Join(mp, Parent, g.Name())) {
			foreign = filepath.Join(mp, Parent, g.Name())
			if err := os.MkdirAll(foreign, 0o755); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if err := Remove(g.Name()); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err == nil {
		t.Error("the process in the group was not killed")
	}
	for _, d := range append(g.uniqueDirs(), foreign) {
		if d != "" && exists(d) {
			t.Errorf("%s is still there", d)
		}
	}
	if err := Remove(g.Name()); err != nil {
		t.Errorf("Remove of a removed group: %v", err)
	}
	if err := Remove("../escape"); err == nil {
		t.Error("Remove accepted an invalid name")
	}
}

package main

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/sandbox/owner"
)

// TestKilledDaemonLeavesNothing kills a daemon with SIGKILL while it has
// live sandboxes (a sandboxed mock session in the middle of a command, a
// running exec process, a warm pool), starts it again on the same data
// dir and checks that nothing of the killed run is left on the host: no
// process, cgroup, mount, network namespace, gVisor state or task
// directory. A second daemon runs beside it the whole time; none of its
// sandboxes may be touched. Once per runtime: the process runtime's half
// always runs (as root); gVisor's is skipped only where runsc is not
// installed, as the gvisor package's tests are (scripts/setup installs
// it), and fails on any other problem.
func TestKilledDaemonLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sandboxes need root here")
	}
	// Runs after the daemons' own cleanups (which kill them) and before
	// the temporary directories go: whatever a failed run left.
	t.Cleanup(func() {
		if _, err := owner.Default().ReapDead(daemon.Reapers()...); err != nil {
			t.Logf("removing the daemons' leftovers: %v", err)
		}
	})
	for _, rt := range []struct {
		name, policy string
		need         func(t *testing.T)
		// ready says the daemon's sandboxes are all up: two processes
		// and a session, one warm sandbox; enough that a snapshot holds
		// what the runtime leaves on the host.
		ready, enough func(s hostState) bool
		// watch keeps the daemon's deathwatch alive: it removes what
		// the daemon left as it dies. Otherwise it is killed first
		// (both die at once, as under the OOM killer) and the restart
		// removes it all.
		watch bool
	}{
		{
			name: "process", policy: procPolicy, need: func(*testing.T) {},
			ready: func(s hostState) bool { return len(s.taskDirs) >= 2 && s.markerProcs >= 2 && len(s.cgroups) >= 3 },
			// Detached mounts are in no mount table: none to look for.
			enough: func(s hostState) bool { return len(s.procs) > 0 && len(s.cgroups) >= 3 && len(s.netns) >= 3 },
		},
		{
			name: "gvisor", policy: gvisorPolicy,
			need: func(t *testing.T) {
				if _, err := exec.LookPath("runsc"); err != nil {
					t.Skip("runsc is not installed (Debian package runsc; scripts/setup installs it)")
				}
			},
			ready:  func(s hostState) bool { return len(s.taskDirs) >= 2 && len(s.gvisorDirs) >= 3 && len(s.cgroups) >= 3 },
			enough: func(s hostState) bool { return len(s.procs) > 0 && len(s.cgroups) >= 3 && len(s.mounts) > 0 },
			watch:  true,
		},
	} {
		t.Run(rt.name, func(t *testing.T) {
			rt.need(t)
			killedDaemonLeavesNothing(t, rt.policy, rt.ready, rt.enough, rt.watch)
		})
	}
}

func killedDaemonLeavesNothing(t *testing.T, policy string, ready, enough func(hostState) bool, watch bool) {
	marker := "agentbox-reap-" + rand.Text()
	dirA, dirB := t.TempDir(), t.TempDir()
	a := startDaemon(t, dirA, "--exec-pool", "1")
	b := startDaemon(t, dirB, "--exec-pool", "1")
	live := map[*daemonProc]*liveWork{}
	for _, d := range []*daemonProc{a, b} {
		live[d] = startLiveWork(t, d, policy, marker)
	}
	for _, d := range []struct {
		p   *daemonProc
		dir string
	}{{a, dirA}, {b, dirB}} {
		waitUntil(t, "the warm pool to fill and the session's command to run", 2*time.Minute, func() bool {
			return ready(snapshot(d.dir, d.p.cmd.Process.Pid, marker))
		})
	}
	before := snapshot(dirA, a.cmd.Process.Pid, marker)
	// The other daemon's lasting artefacts: in two snapshots a moment
	// apart (a short-lived helper process is not a sandbox).
	other := snapshot(dirB, b.cmd.Process.Pid, marker)
	time.Sleep(500 * time.Millisecond)
	other = other.and(snapshot(dirB, b.cmd.Process.Pid, marker))
	t.Logf("the killed daemon's artefacts: %s", before)
	t.Logf("the other daemon's artefacts: %s\n%s", other, other.describe())
	if !enough(before) {
		t.Fatalf("the daemon to kill has fewer live sandboxes than the test set up: %s", before)
	}

	if watch {
		a.kill9(t)
		// The deathwatch removes everything the daemon left, the gVisor
		// containers (not the daemon's children) with the agents in
		// them above all, with no restart.
		rest := before.remaining()
		for deadline := time.Now().Add(20 * time.Second); !rest.empty() && time.Now().Before(deadline); rest = before.remaining() {
			time.Sleep(100 * time.Millisecond)
		}
		if !rest.empty() {
			t.Errorf("20 s after SIGKILL, with no restart, the killed daemon's artefacts are still there: %s\n%s", rest, rest.describe())
		}
	} else {
		killDeathwatch(t, a.cmd.Process.Pid)
		a.kill9(t)
		// What SIGKILL leaves without the deathwatch: gVisor containers
		// keep running (they are not the daemon's children), with their
		// cgroups, mounts and state; process-runtime cgroups; task
		// directories.
		t.Logf("left after SIGKILL, before the restart: %s", before.remaining())
	}

	startDaemon(t, dirA, "--exec-pool", "0")
	// The restart removes what was left, in the background; processes
	// take a moment to exit.
	rest := before.remaining()
	for deadline := time.Now().Add(15 * time.Second); !rest.empty() && time.Now().Before(deadline); rest = before.remaining() {
		time.Sleep(100 * time.Millisecond)
	}
	if !rest.empty() {
		t.Errorf("after the restart, the killed run's artefacts are still there: %s\n%s", rest, rest.describe())
	}
	if now := other.remaining(); !slices.Equal(now.keys(), other.keys()) {
		t.Errorf("the other daemon's sandboxes were touched:\nbefore: %s\nnow:    %s\n%s", other, now, now.describe())
	}
	// And the other daemon's work goes on.
	for _, id := range live[b].processes {
		p, err := b.c.GetProcess(t.Context(), id)
		if err != nil || p.Status != client.ProcessRunning {
			t.Errorf("the other daemon's process %s: %+v, %v; want it running", id, p, err)
		}
	}
	for _, id := range live[b].sessions {
		s, err := b.c.GetSession(t.Context(), id)
		if err != nil || s.Status != client.StatusRunning {
			t.Errorf("the other daemon's session %s: %+v, %v; want it in its turn", id, s, err)
		}
	}
	res, err := b.c.Exec(t.Context(), client.ExecRequest{Argv: []string{"echo", "still here"}, Policy: json.RawMessage(policy)})
	if err != nil || strings.TrimSpace(res.Stdout) != "still here" {
		t.Errorf("exec in the other daemon: %+v, %v", res, err)
	}
	// The other daemon ends the ordinary way, closing its sandboxes.
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = b.cmd.Wait()
}

const (
	procPolicy   = `{"version": 1, "resources": {"timeout": "10m"}}`
	gvisorPolicy = `{"version": 1, "isolation": "gvisor", "resources": {"timeout": "10m"}}`
)

// liveWork is what startLiveWork left running in a daemon.
type liveWork struct{ processes, sessions []string }

// startLiveWork starts, under policy, an exec process and a sandboxed
// mock session whose turn runs a long command (both carry marker); the
// process fills the policy's warm pool.
func startLiveWork(t *testing.T, d *daemonProc, policy, marker string) *liveWork {
	t.Helper()
	w := &liveWork{}
	p, err := d.c.StartProcess(t.Context(), client.StartProcess{
		Argv: []string{"sh", "-c", "sleep 1000; echo " + marker}, Policy: json.RawMessage(policy)})
	if err != nil {
		t.Fatalf("start a process: %v", err)
	}
	w.processes = append(w.processes, p.ID)
	s, err := d.c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Policy: json.RawMessage(policy)})
	if err != nil {
		t.Fatalf("create a sandboxed session: %v", err)
	}
	if _, err := d.c.Send(t.Context(), s.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindCommand, Command: "sleep 1000; echo " + marker})); err != nil {
		t.Fatal(err)
	}
	w.sessions = append(w.sessions, s.ID)
	return w
}

// hostState is what agentbox sandboxes hold on the host, as seen from
// outside: processes (by pid and start time), cgroups, mounts, network
// namespaces, gVisor state directories and task workspaces.
type hostState struct {
	procs       map[string]bool // "pid@starttime"
	markerProcs int
	cgroups     map[string]bool // group directories
	mounts      map[string]bool // mount points
	netns       map[string]bool // "net:[inode]"
	gvisorDirs  []string
	taskDirs    []string
}

// snapshot finds what belongs to the daemon daemonPid with data dir dir:
// its descendants (process-runtime inits and their commands, runsc
// commands), the processes naming dir (every runsc process of its
// containers, which are not its children), the cgroups and network
// namespaces those are in, the mounts under dir.
func snapshot(dir string, daemonPid int, marker string) hostState {
	s := hostState{procs: map[string]bool{}, cgroups: map[string]bool{}, mounts: map[string]bool{}, netns: map[string]bool{}}
	hostNet, _ := os.Readlink("/proc/self/ns/net")
	parents := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(pid); err == nil {
			parents[pid] = st.ppid
		}
	}
	isOurs := func(pid int) bool {
		for p, n := parents[pid], 0; p > 1 && n < 64; p, n = parents[p], n+1 {
			if p == daemonPid {
				return true
			}
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		return strings.Contains(string(cmd), dir)
	}
	for pid := range parents {
		if pid == daemonPid || !isOurs(pid) {
			continue
		}
		// The runtimes' probes (runsc do true, which may take seconds on
		// a loaded host) are helpers that end by themselves, not sandboxes.
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(cmd), "agentbox-runsc-probe-") {
			continue
		}
		// A zombie (e.g. a probe killed at its deadline, not yet reaped:
		// its cmdline is empty, so the check above cannot name it) holds
		// nothing but its pid: remaining() does not count it either.
		st, err := readStat(pid)
		if err != nil || st.zombie {
			continue
		}
		s.procs[fmt.Sprintf("%d@%d", pid, st.start)] = true
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(cmd), marker) {
			s.markerProcs++
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); err == nil && ns != hostNet {
			s.netns[ns] = true
		}
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		for _, line := range strings.Split(string(cg), "\n") {
			if _, p, ok := strings.Cut(line, ":/agentbox/"); ok {
				name, _, _ := strings.Cut(p, "/")
				for _, g := range groupDirs(name) {
					s.cgroups[g] = true
				}
			}
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			s.mounts[f[4]] = true
		}
	}
	s.gvisorDirs, _ = filepath.Glob(filepath.Join(dir, "gvisor", "agentbox-*"))
	s.taskDirs, _ = filepath.Glob(filepath.Join(dir, "exec", "task-*"))
	return s
}

// groupDirs lists the directories of group agentbox/name in every cgroup
// hierarchy that has it.
func groupDirs(name string) []string {
	v1, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*/agentbox", name))
	v2, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/agentbox", name))
	return append(v1, v2...)
}

type procStat struct {
	ppid   int
	start  uint64
	zombie bool // exited; only its pid is left until its parent reaps it
}

// readStat reads a process's parent and start time from /proc/pid/stat.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command name may hold spaces and parentheses: fields start
	// after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("bad stat of %d", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("bad stat of %d", pid)
	}
	ppid, _ := strconv.Atoi(f[1])
	start, _ := strconv.ParseUint(f[19], 10, 64)
	return procStat{ppid: ppid, start: start, zombie: f[0] == "Z" || f[0] == "X"}, nil
}

// remaining is the part of s still on the host.
func (s hostState) remaining() hostState {
	r := hostState{procs: map[string]bool{}, cgroups: map[string]bool{}, mounts: map[string]bool{}, netns: map[string]bool{}}
	for k := range s.procs {
		pidS, startS, _ := strings.Cut(k, "@")
		pid, _ := strconv.Atoi(pidS)
		if st, err := readStat(pid); err == nil && !st.zombie && strconv.FormatUint(st.start, 10) == startS {
			r.procs[k] = true
		}
	}
	for g := range s.cgroups {
		if _, err := os.Stat(g); err == nil {
			r.cgroups[g] = true
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 4 && s.mounts[f[4]] {
			r.mounts[f[4]] = true
		}
	}
	// A network namespace lives as long as a process is in it (or a
	// bind mount of it: none of ours).
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if ns, err := os.Readlink("/proc/" + e.Name() + "/ns/net"); err == nil && s.netns[ns] {
			r.netns[ns] = true
		}
	}
	for _, d := range s.gvisorDirs {
		if _, err := os.Lstat(d); err == nil {
			r.gvisorDirs = append(r.gvisorDirs, d)
		}
	}
	for _, d := range s.taskDirs {
		if _, err := os.Lstat(d); err == nil {
			r.taskDirs = append(r.taskDirs, d)
		}
	}
	return r
}

func (s hostState) empty() bool { return len(s.keys()) == 0 }

// and is what s and o both hold.
func (s hostState) and(o hostState) hostState {
	r := hostState{procs: map[string]bool{}, cgroups: map[string]bool{}, mounts: map[string]bool{}, netns: map[string]bool{}, markerProcs: min(s.markerProcs, o.markerProcs)}
	for _, m := range []struct{ a, b, out map[string]bool }{{s.procs, o.procs, r.procs}, {s.cgroups, o.cgroups, r.cgroups}, {s.mounts, o.mounts, r.mounts}, {s.netns, o.netns, r.netns}} {
		for k := range m.a {
			if m.b[k] {
				m.out[k] = true
			}
		}
	}
	for _, d := range s.gvisorDirs {
		if slices.Contains(o.gvisorDirs, d) {
			r.gvisorDirs = append(r.gvisorDirs, d)
		}
	}
	for _, d := range s.taskDirs {
		if slices.Contains(o.taskDirs, d) {
			r.taskDirs = append(r.taskDirs, d)
		}
	}
	return r
}

// describe lists the processes of s with their command lines.
func (s hostState) describe() string {
	var b strings.Builder
	for _, k := range sortedKeys(s.procs) {
		pid, _, _ := strings.Cut(k, "@")
		cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		fmt.Fprintf(&b, "  pid %s: %s\n", pid, strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	return b.String()
}

// keys lists everything in s, sorted.
func (s hostState) keys() []string {
	var out []string
	for _, m := range []map[string]bool{s.procs, s.cgroups, s.mounts, s.netns} {
		for k := range m {
			out = append(out, k)
		}
	}
	out = append(append(out, s.gvisorDirs...), s.taskDirs...)
	slices.Sort(out)
	return out
}

func (s hostState) String() string {
	return fmt.Sprintf("%d processes, %d cgroup dirs %v, %d mounts, %d network namespaces, gVisor dirs %v, task dirs %v",
		len(s.procs), len(s.cgroups), sortedKeys(s.cgroups), len(s.mounts), len(s.netns), s.gvisorDirs, s.taskDirs)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func waitUntil(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// killDeathwatch kills the deathwatch of daemon pid (its child named
// agentbox-deathwatch) with SIGKILL and waits for it to go.
func killDeathwatch(t *testing.T, pid int) {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(p)
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if err != nil || st.ppid != pid || !strings.HasPrefix(string(cmd), "agentbox-deathwatch\x00") {
			continue
		}
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil {
			t.Fatalf("kill the deathwatch: %v", err)
		}
		waitUntil(t, "the deathwatch to go", 10*time.Second, func() bool { _, err := readStat(p); return err != nil })
		return
	}
	t.Fatalf("daemon %d has no deathwatch", pid)
}

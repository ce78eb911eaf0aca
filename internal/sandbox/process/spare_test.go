package process

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/sandboxtest"
	"github.com/agentbox/agentbox/internal/textdiff"
)

// parked returns the pids of rt's parked spares once there are n, failing
// the test if they do not come.
func parked(t testing.TB, rt *Runtime, n int) []int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rt.spares.mu.Lock()
		var pids []int
		for _, in := range rt.spares.parked {
			pids = append(pids, in.pid)
		}
		rt.spares.mu.Unlock()
		if len(pids) >= n {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spares parked after 30 s, want %d", len(pids), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// primeSpares makes (and closes) one sandbox, which starts the filling,
// and returns the pids of the n spares that then park.
func primeSpares(t testing.TB, rt *Runtime, n int) []int {
	t.Helper()
	sb, err := rt.Create(t.Context(), baseSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	return parked(t, rt, n)
}

// alive reports whether pid is a live process (not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// waitGone waits until none of pids is alive.
func waitGone(t testing.TB, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("spare %d still runs", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// probeScript prints, from inside a sandbox, everything a command gets
// from its sandbox that a spare could change: credentials, capabilities,
// no_new_privs and seccomp, signal dispositions, uid and gid maps,
// rlimits, descriptors, environment, cgroup, namespaces, mounts, the
// Landlock domain (a write to /proc/self/comm, which only Landlock
// refuses) and the rest of the process's setting. The mounts are listed
// by mount point, each with the mount point of the mount it is on (which
// of two mounts stacked on one point is on top, and what a mount hides,
// are in that): the kernel lists them in the order they were made, and an
// init prepares its root (prepareRoot) while the daemon makes the detached
// mounts it sends, before them for a spare, at the same time for a cold
// one.
const probeScript = `
for f in Uid Gid Groups CapInh CapPrm CapEff CapBnd CapAmb NoNewPrivs Seccomp Seccomp_filters SigBlk SigIgn Cpus_allowed_list; do grep "^$f:" /proc/self/status; done
echo uid_map; cat /proc/self/uid_map
echo gid_map; cat /proc/self/gid_map
echo setgroups; cat /proc/self/setgroups
cat /proc/self/limits
echo fds; ls -l /proc/self/fd/ | awk 'NR > 1 {print $9, $11}'
echo env; env | sort
echo cgroup; cat /proc/self/cgroup
echo ns; for n in user mnt pid net ipc uts cgroup time; do echo "$n $(readlink /proc/self/ns/$n)"; done
echo mounts; awk '{mp[$1] = $5; par[$1] = $2; line[$1] = $5 " " $6 " " $9 " " $11; id[NR] = $1} END {for (i = 1; i <= NR; i++) print line[id[i]], "on", (par[id[i]] in mp ? mp[par[id[i]]] : "-")}' /proc/self/mountinfo | sort -s -k1,1
echo landlock; (printf x > /proc/self/comm) 2>&1 && echo comm written
echo rest; hostname; id; umask; pwd; ls -la /dev /tmp ~ | awk '{print $1, $3, $4, $NF}'
ip -o link 2>/dev/null | awk '{print $2}'
`

// normalizer rewrites what differs between two sandboxes by identity
// alone (the host uids of the slot, the cgroup's name, namespace and pipe
// inode numbers), and the host's namespaces to "host".
func normalizer(t testing.TB, b *box) func(string) string {
	hostNS := map[string]bool{}
	for _, n := range []string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup", "time"} {
		l, err := os.Readlink("/proc/self/ns/" + n)
		if err != nil {
			t.Fatal(err)
		}
		hostNS[l] = true
	}
	nsRe := regexp.MustCompile(`[a-z_]+:\[[0-9]+\]`)
	pidRe := regexp.MustCompile(`/proc/[0-9]+/`)
	uidRe := regexp.MustCompile(`\b(` + strconv.Itoa(b.rootUID()) + `|` + strconv.Itoa(b.userUID()) + `)\b`)
	return func(s string) string {
		s = strings.ReplaceAll(s, b.id, "ID")
		// Pids inside differ: the threads of an init count in its pid
		// namespace, and a spare's Go runtime made more while it waited.
		s = pidRe.ReplaceAllString(s, "/proc/PID/")
		s = uidRe.ReplaceAllStringFunc(s, func(u string) string {
			if u == strconv.Itoa(b.rootUID()) {
				return "ROOTUID"
			}
			return "USERUID"
		})
		return nsRe.ReplaceAllStringFunc(s, func(l string) string {
			if hostNS[l] {
				return "host"
			}
			return l[:strings.IndexByte(l, ':')] + ":[new]"
		})
	}
}

// initState is what the host sees of a sandbox's init: its credentials,
// seccomp and no_new_privs, capabilities, signal mask, rlimits,
// environment, working directory, cgroup, maps and descriptors.
func initState(t testing.TB, b *box) string {
	t.Helper()
	pid := b.initPid
	read := func(name string) string {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	// Per-thread state, as the set of values over the init's threads:
	// the init drops its bounding set on the thread it forks commands
	// from, and which thread the kernel reports for the process is the
	// Go scheduler's choice, as is how many threads there are.
	// A thread the Go runtime is creating has every signal blocked for a
	// moment (newosproc): the state compared is what stays, so the
	// threads are read until two readings agree.
	threads := func() []string {
		var out []string
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Seccomp_filters", "SigBlk", "SigIgn"} {
			var vals []string
			for _, task := range tasks {
				st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name())) // a thread may have ended
				for _, line := range strings.Split(string(st), "\n") {
					if v, ok := strings.CutPrefix(line, f+":"); ok && !slices.Contains(vals, v) {
						vals = append(vals, v)
					}
				}
			}
			slices.Sort(vals)
			out = append(out, f+": "+strings.Join(vals, " | "))
		}
		return out
	}
	out := threads()
	for range 50 {
		time.Sleep(10 * time.Millisecond)
		again := threads()
		if slices.Equal(out, again) {
			break
		}
		out = again
	}
	out = append(out, read("limits"), "environ "+strconv.Quote(read("environ")), read("cgroup"), read("uid_map"), read("gid_map"))
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, "cwd "+cwd)
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	var fds []string
	for _, e := range ents {
		l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		info, _ := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
		flags := ""
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				flags = strings.TrimSpace(v)
			}
		}
		fds = append(fds, l+" "+flags)
	}
	slices.Sort(fds)
	out = append(out, "fds", strings.Join(fds, "\n"))
	return normalizer(t, b)(strings.Join(out, "\n"))
}

// TestSpareEquivalence: a sandbox made from a spare is the sandbox a cold
// Create makes from the same spec, seen from inside (a command's
// credentials, capabilities, seccomp, no_new_privs, Landlock, maps,
// rlimits, descriptors, environment, cgroup, namespaces and mounts) and
// from the host (its init's), for each kind of spec a spare may serve.
func TestSpareEquivalence(t *testing.T) {
	needRoot(t)
	if !inPrivateMounts(t) {
		return
	}
	cold := New(Options{})
	spares := New(Options{Spares: 1})
	t.Cleanup(func() { _ = spares.Close() })
	primeSpares(t, spares, 1)
	for _, tc := range []struct {
		name string
		mod  func(*sandbox.Spec)
	}{
		{"none", nil},
		{"limits", func(s *sandbox.Spec) {
			s.Limits = sandbox.Limits{MemoryBytes: 256 << 20, Pids: 256, CPUs: 1, DiskBytes: 32 << 20, Files: 5000}
			s.Env["LANG"] = "C.UTF-8"
		}},
		{"proxy", func(s *sandbox.Spec) {
			s.Network = sandbox.Network{Mode: sandbox.NetworkProxy, ProxyPort: 3128}
		}},
		{"read-outside-strict", func(s *sandbox.Spec) {
			s.ReadOutsideWorkspace = true
			s.Syscalls.Profile = "strict"
			s.WritePaths = []string{t.TempDir()}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := baseSpec(t)
			if tc.mod != nil {
				tc.mod(&spec)
			}
			var got [2]struct {
				info       sandbox.Info
				inside, at string
			}
			for i, rt := range []*Runtime{cold, spares} {
				if i == 1 {
					parked(t, rt, 1)
				}
				sb, err := rt.Create(t.Context(), spec)
				if err != nil {
					t.Fatal(err)
				}
				b := sb.(*box)
				if b.spare != (i == 1) {
					t.Fatalf("runtime %d: spare = %v", i, b.spare)
				}
				e, out, errs := run(t, sb, sh(probeScript))
				if e.Code != 0 {
					t.Fatalf("probe: %+v %s", e, errs)
				}
				got[i].info = sb.Info()
				got[i].inside = normalizer(t, b)(out + errs)
				got[i].at = initState(t, b)
				if _, err := sb.Close(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(got[0].info.Mechanisms, got[1].info.Mechanisms) || !slices.Equal(got[0].info.Degraded, got[1].info.Degraded) {
				t.Errorf("info: cold %+v, spare %+v", got[0].info, got[1].info)
			}
			if d := textdiff.Unified("inside", got[0].inside, got[1].inside, false); d != "" {
				t.Errorf("what a command sees, cold (-) and from a spare (+):\n%s", d)
			}
			if d := textdiff.Unified("init", got[0].at, got[1].at, false); d != "" {
				t.Errorf("what the host sees of the init, cold (-) and a spare (+):\n%s", d)
			}
			// The probe saw what it is meant to compare.
			for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000",
				"ROOTUID", "user user:[new]", "net net:[new]", "cannot create /proc/self/comm: Permission denied"} {
				if !strings.Contains(got[1].inside, want) {
					t.Errorf("probe of the spare's sandbox lacks %q:\n%s", want, got[1].inside)
				}
			}
		})
	}
}

// privateMountsEnv marks the test binary re-executed by inPrivateMounts;
// its value is the mount namespace of the process that re-executed it.
const privateMountsEnv = "AGENTBOX_PROCESS_TEST_PRIVATE_MOUNTS"

// inPrivateMounts runs the calling top-level test in a copy of the test
// binary in a mount namespace of its own, made private: mounts that test
// packages running beside this one make and remove on the host reach it no
// more. It reports true in that copy, where the test goes on, and false
// in the caller, where it has run the copy and reported its result.
//
// A sandbox that reads the host (ReadOutsideWorkspace) sees the host's
// mounts as they are when it is made: two sandboxes made a moment apart
// on a busy host differ by whatever was mounted between them, which is
// not a difference between a cold sandbox and a spare.
func inPrivateMounts(t *testing.T) bool {
	t.Helper()
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	if parent := os.Getenv(privateMountsEnv); parent != "" {
		// Never the host's mounts made private: only a namespace of
		// the copy's own.
		if parent == self {
			t.Fatalf("%s is set but this process is in its parent's mount namespace %s", privateMountsEnv, self)
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			t.Fatalf("making the test's mounts private: %v", err)
		}
		return true
	}
	cmd := exec.CommandContext(t.Context(), "/proc/self/exe", "-test.run=^"+t.Name()+"$", "-test.v")
	cmd.Env = append(os.Environ(), privateMountsEnv+"="+self)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in a mount namespace of its own: %v\n%s", t.Name(), err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("%s in a mount namespace of its own did not pass:\n%s", t.Name(), out)
	}
	return false
}

// TestSpareNeverReused: each spare becomes one sandbox and goes with it;
// the next Create gets a new one. A spare is not handed to a spec whose
// clone-time choices it does not have (the host's network), and one
// handed to a Create that fails goes with the failure.
func TestSpareNeverReused(t *testing.T) {
	needRoot(t)
	rt := New(Options{Spares: 1})
	t.Cleanup(func() { _ = rt.Close() })
	first := primeSpares(t, rt, 1)[0]

	sb, err := rt.Create(t.Context(), baseSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	b := sb.(*box)
	if !b.spare || b.initPid != first {
		t.Fatalf("sandbox init %d (spare %v), want the parked spare %d", b.initPid, b.spare, first)
	}
	mustRun(t, sb, "true")
	if _, err := sb.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitGone(t, first)
	second := parked(t, rt, 1)[0]
	if second == first {
		t.Fatal("the spare was parked again")
	}

	// The host's network: the spare's own network namespace cannot serve.
	sb, err = rt.Create(t.Context(), func() sandbox.Spec {
		s := baseSpec(t)
		s.Network.Mode = sandbox.NetworkHost
		return s
	}())
	if err != nil {
		t.Fatal(err)
	}
	if sb.(*box).spare {
		t.Error("a spare with a network namespace of its own served network mode host")
	}
	sb.Close(t.Context())
	if p := parked(t, rt, 1)[0]; p != second {
		t.Errorf("parked spare %d, want %d untouched", p, second)
	}

	// A Create that fails after taking the spare.
	spec := baseSpec(t)
	spec.WritePaths = []string{filepath.Join(t.TempDir(), "missing")}
	if _, err := rt.Create(t.Context(), spec); err == nil {
		t.Fatal("Create with a missing write path succeeded")
	}
	waitGone(t, second)
	if p := parked(t, rt, 1)[0]; p == second {
		t.Error("the spare of a failed Create was parked again")
	}
	if got := rt.spares.handedOut.Load(); got != 2 {
		t.Errorf("%d spares handed out, want 2", got)
	}
}

// TestSpareClose: Close ends every spare (and so frees its uid slot); Create
// still works after it, cold, and starts no spare.
func TestSpareClose(t *testing.T) {
	needRoot(t)
	rt := New(Options{Spares: 2})
	pids := primeSpares(t, rt, 2)
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("spare %d runs after Close", pid)
		}
	}
	if left := initChildren(); len(left) > 0 {
		t.Errorf("inits left after Close: %v", left)
	}
	sb, err := rt.Create(t.Context(), baseSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	if sb.(*box).spare {
		t.Error("a spare after Close")
	}
	rt.spares.mu.Lock()
	n, filling := len(rt.spares.parked), rt.spares.filling
	rt.spares.mu.Unlock()
	if n != 0 || filling {
		t.Errorf("after Close: %d spares parked, filling %v", n, filling)
	}
}

// initChildren lists the sandbox inits this process has started that
// are left.
func initChildren() []int { return sandboxtest.Children(initArg0) }

// spareProcessEnv makes the test binary a daemon with a spare that
// prints the spare's pid and waits to be killed (TestSpareDiesWithDaemon).
const spareProcessEnv = "AGENTBOX_PROCESS_TEST_SPARE"

func runSpareProcess(ws string) int {
	rt := New(Options{Spares: 1})
	sb, err := rt.Create(context.Background(), sandbox.Spec{Workspace: ws, Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	sb.Close(context.Background())
	for {
		rt.spares.mu.Lock()
		n := len(rt.spares.parked)
		var pid int
		if n > 0 {
			pid = rt.spares.parked[0].pid
		}
		rt.spares.mu.Unlock()
		if n > 0 {
			fmt.Println("spare", pid)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {} // until killed
}

// TestSpareDiesWithDaemon: a daemon killed with SIGKILL takes its spare
// with it (a spare has nothing on the host to reap but itself).
func TestSpareDiesWithDaemon(t *testing.T) {
	needRoot(t)
	cmd := exec.CommandContext(t.Context(), "/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), spareProcessEnv+"="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("second process: %v %q", err, line)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "spare ")))
	if err != nil || !alive(pid) {
		_ = cmd.Process.Kill()
		t.Fatalf("second process said %q", line)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitGone(t, pid)
}

// waitParked waits until the spare pid is parked: one of its threads
// blocked in read(2) on its config pipe (fd 3), which it reaches only
// after it marked every inherited descriptor close-on-exec.
func waitParked(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, task := range tasks {
			sc, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/syscall", pid, task.Name()))
			if strings.HasPrefix(string(sc), fmt.Sprintf("%d 0x%x ", unix.SYS_READ, fdConfig)) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("spare %d not parked on its config pipe", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSpareCarriesNothingOfTheDaemon: a parked spare has no environment
// but the init's own (initEnv), holds no descriptor of the daemon's
// cgroup (the Go runtime's cgroup-aware GOMAXPROCS would keep one),
// runs in /, holds nothing but its config pipe, control socket and stdio
// open across exec (a descriptor the daemon leaked without O_CLOEXEC is
// marked close-on-exec as soon as the spare starts, before it waits), has
// no child, and the sandbox made from it gives its commands only their
// stdio.
func TestSpareCarriesNothingOfTheDaemon(t *testing.T) {
	needRoot(t)
	leak, err := unix.Open("/etc/hostname", unix.O_RDONLY, 0) // no O_CLOEXEC: leaks into every child
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(leak)
	rt := New(Options{Spares: 1})
	t.Cleanup(func() { _ = rt.Close() })
	pid := primeSpares(t, rt, 1)[0]
	waitParked(t, pid)

	if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); err != nil || string(env) != strings.Join(initEnv, "\x00")+"\x00" {
		t.Errorf("spare environment %q (%v)", env, err)
	}
	if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err != nil || cwd != "/" {
		t.Errorf("spare cwd %q (%v)", cwd, err)
	}
	if ch, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)); len(strings.TrimSpace(string(ch))) != 0 {
		t.Errorf("spare has children: %s", ch)
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	sawLeak := false
	for _, e := range ents {
		fd, _ := strconv.Atoi(e.Name())
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
		info, _ := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%d", pid, fd))
		var flags int64
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				flags, _ = strconv.ParseInt(strings.TrimSpace(v), 8, 64)
			}
		}
		if target == "/etc/hostname" {
			sawLeak = true
		}
		if strings.HasPrefix(target, "/sys/fs/cgroup") {
			t.Errorf("spare fd %d is the daemon's cgroup file %s", fd, target)
		}
		if fd > 2 && flags&unix.O_CLOEXEC == 0 {
			t.Errorf("spare fd %d (%s) survives exec", fd, target)
		}
	}
	if !sawLeak {
		t.Log("the leaked descriptor did not reach the spare (nothing to check)")
	}
	sb, err := rt.Create(t.Context(), baseSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	if !sb.(*box).spare {
		t.Fatal("no spare used")
	}
	out := mustRun(t, sb, `ls -l /proc/self/fd/ | awk 'NR > 1 {print $9, $11}'`)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && (f[0] == "0" || f[0] == "1" || f[0] == "2" || strings.HasPrefix(f[1], "/proc/")) {
			continue // stdio, and the directory ls reads
		}
		t.Errorf("command descriptor %s", line)
	}
	if strings.Contains(out, "hostname") {
		t.Errorf("a command got the daemon's leaked descriptor: %s", out)
	}
}

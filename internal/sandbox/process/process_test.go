package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// needRoot skips tests that build real sandboxes when not run as root.
func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("process sandboxes need root here (uid maps to a host range, cgroups)")
	}
}

func baseSpec(t testing.TB) sandbox.Spec {
	return sandbox.Spec{
		Workspace: t.TempDir(),
		Env:       map[string]string{"PATH": "/usr/bin:/bin", "HOME": sandboxHome},
		Protected: []string{"CLAUDE.md", ".git/hooks/**"},
	}
}

// newBox creates a sandbox over a fresh workspace and closes it at the end.
func newBox(t testing.TB, mod func(*sandbox.Spec)) (sandbox.Sandbox, sandbox.Spec) {
	t.Helper()
	needRoot(t)
	spec := baseSpec(t)
	if mod != nil {
		mod(&spec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := New(Options{}).Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	return sb, spec
}

// run starts c in sb and returns its exit, stdout and stderr.
func run(t testing.TB, sb sandbox.Sandbox, c sandbox.Cmd) (sandbox.Exit, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	if c.Stdout == nil {
		c.Stdout = &out
	}
	if c.Stderr == nil {
		c.Stderr = &errb
	}
	p, err := sb.Start(context.Background(), c)
	if err != nil {
		t.Fatalf("Start %q: %v", c.Args, err)
	}
	e, err := p.Wait()
	if err != nil {
		t.Fatalf("Wait %q: %v", c.Args, err)
	}
	return e, out.String(), errb.String()
}

func sh(script string) sandbox.Cmd { return sandbox.Cmd{Args: []string{"/bin/sh", "-c", script}} }

// mustRun runs script and fails unless it exits 0.
func mustRun(t testing.TB, sb sandbox.Sandbox, script string) string {
	t.Helper()
	e, out, errs := run(t, sb, sh(script))
	if e.Code != 0 {
		t.Fatalf("%q: exit %+v\nstdout: %s\nstderr: %s", script, e, out, errs)
	}
	return out
}

func TestExitStatus(t *testing.T) {
	sb, _ := newBox(t, nil)
	tests := []struct {
		script string
		code   int
		signal string
	}{
		{"exit 0", 0, ""},
		{"exit 3", 3, ""},
		{"kill -TERM $$", -1, "SIGTERM"},
		{"false", 1, ""},
	}
	for _, tt := range tests {
		e, _, _ := run(t, sb, sh(tt.script))
		if e.Code != tt.code || e.Signal != tt.signal || e.Reason != "" {
			t.Errorf("%q: got %+v, want code %d signal %q", tt.script, e, tt.code, tt.signal)
		}
	}
	if _, err := sb.Start(t.Context(), sandbox.Cmd{Args: []string{"no-such-command"}}); err == nil {
		t.Error("Start of a missing command succeeded")
	}
	if _, err := sb.Start(t.Context(), sandbox.Cmd{}); err == nil {
		t.Error("Start of an empty command succeeded")
	}
}

func TestStdio(t *testing.T) {
	sb, _ := newBox(t, nil)
	c := sh("cat; echo to-stderr >&2")
	c.Stdin = strings.NewReader("from-stdin\n")
	e, out, errs := run(t, sb, c)
	if e.Code != 0 || out != "from-stdin\n" || errs != "to-stderr\n" {
		t.Fatalf("pipes: exit %+v stdout %q stderr %q", e, out, errs)
	}

	// *os.File is passed straight through.
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	os.WriteFile(in, []byte("file-stdin"), 0o644)
	fin, _ := os.Open(in)
	defer fin.Close()
	fout, _ := os.Create(filepath.Join(dir, "out"))
	defer fout.Close()
	c = sh("cat; echo; echo more")
	c.Stdin, c.Stdout = fin, fout
	if e, _, _ := run(t, sb, c); e.Code != 0 {
		t.Fatalf("files: exit %+v", e)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "out"))
	if string(got) != "file-stdin\nmore\n" {
		t.Fatalf("file stdout = %q", got)
	}

	// nil stdin reads /dev/null.
	if out := mustRun(t, sb, "wc -c"); strings.TrimSpace(out) != "0" {
		t.Fatalf("nil stdin gave %q", out)
	}
}

func TestEnvIsolation(t *testing.T) {
	t.Setenv("AGENTBOX_MARKER_SECRET", "s3cr3t-marker-value")
	sb, _ := newBox(t, func(s *sandbox.Spec) { s.Env["GIVEN"] = "yes" })
	c := sh("env; cat /proc/self/environ; cat /proc/1/environ 2>/dev/null; true")
	c.Env = map[string]string{"PER_CMD": "1", "GIVEN": "overridden"}
	e, out, _ := run(t, sb, c)
	if e.Code != 0 {
		t.Fatalf("exit %+v", e)
	}
	if strings.Contains(out, "s3cr3t-marker-value") || strings.Contains(out, "AGENTBOX_MARKER") {
		t.Fatalf("host environment leaked into the sandbox:\n%s", out)
	}
	for _, want := range []string{"PER_CMD=1", "GIVEN=overridden", "PATH=/usr/bin:/bin"} {
		if !strings.Contains(out, want) {
			t.Errorf("env lacks %s:\n%s", want, out)
		}
	}
	// Only 0, 1, 2 (and the directory ls itself opens) are open.
	e, out, _ = run(t, sb, sandbox.Cmd{Args: []string{"ls", "/proc/self/fd"}})
	if fds := strings.Fields(out); e.Code != 0 || strings.Join(fds, " ") != "0 1 2 3" {
		t.Errorf("open fds in a command: %q", out)
	}
}

func TestIsolationState(t *testing.T) {
	sb, _ := newBox(t, nil)
	info := sb.Info()
	joined := strings.Join(info.Mechanisms, " ")
	for _, want := range []string{"userns", "pidns", "netns", "overlay", "landlock:abi", "seccomp:default", "cgroup", "caps:none"} {
		if !strings.Contains(joined, want) {
			t.Errorf("Info.Mechanisms %v lacks %s", info.Mechanisms, want)
		}
	}
	if len(info.Degraded) != 0 {
		t.Errorf("Degraded = %v", info.Degraded)
	}
	out := mustRun(t, sb, `id -u; id -g; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status; hostname`)
	for _, want := range []string{"1000\n1000\n", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000",
		"CapPrm:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "sandbox\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	// pid namespace: only the command's own processes (the init is
	// hidden by hidepid and runs as another uid).
	out = mustRun(t, sb, `ls /proc | grep -E '^[0-9]+$' | wc -l`)
	if n, _ := strconv.Atoi(strings.TrimSpace(out)); n < 1 || n > 4 {
		t.Errorf("%d pids visible in the sandbox, want the command's own few", n)
	}
	// network namespace: only lo, and it is up.
	out = mustRun(t, sb, `tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; cat /sys/class/net/lo/operstate 2>/dev/null; true`)
	if strings.TrimSpace(out) != "lo" {
		t.Errorf("interfaces: %q, want only lo", out)
	}
	// Landlock scoping and uid: the init cannot be signalled.
	e, _, _ := run(t, sb, sh("kill -0 1"))
	if e.Code == 0 {
		t.Error("kill -0 1 succeeded inside the sandbox")
	}
	// seccomp: unshare is denied.
	e, _, errs := run(t, sb, sandbox.Cmd{Args: []string{"unshare", "-U", "true"}})
	if e.Code == 0 {
		t.Errorf("unshare -U succeeded: %s", errs)
	}
}

func TestReadOnlyRoot(t *testing.T) {
	sb, _ := newBox(t, nil)
	for _, script := range []string{
		"echo x >> /etc/passwd", "touch /usr/bin/evil", "touch /newfile", "mkdir /dev/x",
		"echo 1 > /proc/sys/kernel/hostname", "touch /proc/evil",
	} {
		if e, _, _ := run(t, sb, sh(script)); e.Code == 0 {
			t.Errorf("%q succeeded inside the sandbox", script)
		}
	}
	if _, err := os.Stat("/newfile"); err == nil {
		t.Fatal("/newfile appeared on the host")
	}
	// The writable places are writable.
	mustRun(t, sb, "echo a > /tmp/a && echo b > $HOME/.bashrc && echo c > /dev/null && echo d > /dev/shm/d && cat /tmp/a")
}

func TestWorkspaceOverlayCommit(t *testing.T) {
	sb, spec := newBox(t, nil)
	ws := spec.Workspace
	os.WriteFile(filepath.Join(ws, "keep.txt"), []byte("old"), 0o644)
	mustRun(t, sb, `test "$(pwd)" = "$PWD" && echo new > new.txt && echo changed > keep.txt && mkdir -p sub && echo s > sub/f && echo evil > CLAUDE.md && mkdir -p .git/hooks && echo hook > .git/hooks/post-checkout && ls -la`)
	// Nothing reaches the host before Commit.
	if _, err := os.Stat(filepath.Join(ws, "new.txt")); err == nil {
		t.Fatal("new.txt on the host before Commit")
	}
	v, err := sb.Commit(t.Context())
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	for name, want := range map[string]string{"new.txt": "new\n", "keep.txt": "changed\n", "sub/f": "s\n"} {
		got, err := os.ReadFile(filepath.Join(ws, name))
		if err != nil || string(got) != want {
			t.Errorf("%s on the host = %q, %v; want %q", name, got, err, want)
		}
	}
	for _, name := range []string{"CLAUDE.md", ".git/hooks/post-checkout"} {
		if _, err := os.Stat(filepath.Join(ws, name)); err == nil {
			t.Errorf("protected %s was created on the host", name)
		}
	}
	dropped := map[string]bool{}
	for _, x := range v {
		if x.Action == "dropped" {
			dropped[x.Target] = true
		}
	}
	// The workspace had no .git: creating one is dropped as a whole.
	if !dropped["CLAUDE.md"] || !dropped[".git"] {
		t.Errorf("violations %+v lack the protected creations", v)
	}
	// Close commits again but reports nothing new.
	if v, err := sb.Close(t.Context()); err != nil || len(v) != 0 {
		t.Errorf("Close: %v, %+v", err, v)
	}
}

func TestDiskLimit(t *testing.T) {
	sb, _ := newBox(t, func(s *sandbox.Spec) { s.Limits.DiskBytes = 2 << 20 })
	e, _, _ := run(t, sb, sh("head -c 4000000 /dev/zero > /tmp/big"))
	if e.Code == 0 || e.Reason != sandbox.ReasonDisk {
		t.Fatalf("filling /tmp: %+v, want %s", e, sandbox.ReasonDisk)
	}
	mustRun(t, sb, "rm /tmp/big")
	e, _, _ = run(t, sb, sh("head -c 4000000 /dev/zero > big"))
	if e.Code == 0 || e.Reason != sandbox.ReasonDisk {
		t.Fatalf("filling the workspace: %+v, want %s", e, sandbox.ReasonDisk)
	}
}

func TestTimeoutKillsTree(t *testing.T) {
	sb, _ := newBox(t, func(s *sandbox.Spec) { s.Limits.Timeout = 300 * time.Millisecond })
	ns := pidNS(t, sb.(*box))
	start := time.Now()
	// A double-forked daemon, and a foreground sleep.
	e, _, _ := run(t, sb, sh("(setsid sh -c 'trap \"\" TERM; sleep 1000' &) ; sleep 1000"))
	if e.Reason != sandbox.ReasonTimeout || e.Code != -1 {
		t.Fatalf("exit %+v, want %s", e, sandbox.ReasonTimeout)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("timeout took %s", d)
	}
	b := sb.(*box)
	waitNoProcs(t, b, ns)
	if _, err := sb.Start(t.Context(), sh("true")); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("Start after the sandbox was killed: %v, want ErrClosed", err)
	}
}

func TestCmdTimeoutOverride(t *testing.T) {
	sb, _ := newBox(t, nil)
	c := sh("sleep 1000")
	c.Timeout = 200 * time.Millisecond
	if e, _, _ := run(t, sb, c); e.Reason != sandbox.ReasonTimeout {
		t.Fatalf("exit %+v, want timeout", e)
	}
}

// TestResetTimeout: a process started ahead of its task (the warm pool's
// zygote) gets the task's timeout when the task is handed to it, and is
// killed for that one, said as the runtime says any timeout.
func TestResetTimeout(t *testing.T) {
	sb, _ := newBox(t, nil)
	c := sh("sleep 1000")
	c.Timeout = time.Hour
	p, err := sb.Start(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	p.(sandbox.TimeoutResetter).ResetTimeout(200 * time.Millisecond)
	e, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if e.Reason != sandbox.ReasonTimeout || e.Message != "killed after the 200ms timeout" {
		t.Fatalf("exit %+v, want the 200ms timeout", e)
	}
	p.(sandbox.TimeoutResetter).ResetTimeout(time.Millisecond) // after the end: nothing to kill
}

func TestMemoryLimit(t *testing.T) {
	sb, _ := newBox(t, func(s *sandbox.Spec) { s.Limits.MemoryBytes = 64 << 20 })
	e, _, _ := run(t, sb, sandbox.Cmd{Args: []string{"python3", "-c", "b = bytearray(512 << 20); print(len(b))"}})
	if e.Reason != sandbox.ReasonMemory {
		t.Fatalf("exit %+v, want %s", e, sandbox.ReasonMemory)
	}
	// The sandbox survives an OOM kill of one command.
	mustRun(t, sb, "true")
}

func TestPidsLimit(t *testing.T) {
	sb, _ := newBox(t, func(s *sandbox.Spec) { s.Limits.Pids = 16 })
	e, _, _ := run(t, sb, sh("for i in $(seq 64); do sleep 30 & done; wait"))
	if e.Reason != sandbox.ReasonPids {
		t.Fatalf("exit %+v, want %s", e, sandbox.ReasonPids)
	}
}

func TestSignal(t *testing.T) {
	sb, _ := newBox(t, nil)
	p, err := sb.Start(t.Context(), sh("trap 'exit 7' TERM; while :; do sleep 0.05; done"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Pid() <= 0 {
		t.Errorf("Pid() = %d", p.Pid())
	}
	time.Sleep(200 * time.Millisecond) // let the trap be installed
	if err := p.Signal(os.Signal(sigTERM)); err != nil {
		t.Fatal(err)
	}
	e, _ := p.Wait()
	if e.Code != 7 {
		t.Fatalf("after SIGTERM: %+v, want exit 7", e)
	}
	if err := p.Signal(sigTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Signal after exit: %v", err)
	}
	p, err = sb.Start(t.Context(), sh("sleep 1000"))
	if err != nil {
		t.Fatal(err)
	}
	p.Signal(os.Kill)
	if e, _ := p.Wait(); e.Code != -1 || e.Reason != "" {
		t.Fatalf("after SIGKILL: %+v", e)
	}
}

// TestInitIgnoresSignals sends the init every signal but SIGKILL and
// SIGSTOP, from the host (the strongest sender there is short of the
// supervisor's kill): PID 1 must drop them all and go on serving.
func TestInitIgnoresSignals(t *testing.T) {
	sb, _ := newBox(t, nil)
	pid := sb.(*box).initPid
	for sig := syscall.Signal(1); sig <= 64; sig++ {
		if sig == syscall.SIGKILL || sig == syscall.SIGSTOP {
			continue
		}
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatalf("kill(init, %v): %v", sig, err)
		}
	}
	// A signal that ended the init would show here: the init's death
	// ends the sandbox.
	time.Sleep(100 * time.Millisecond)
	if out := mustRun(t, sb, "echo alive"); out != "alive\n" {
		t.Fatalf("after the signals: %q", out)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("init gone after the signals: %v", err)
	}
	// What the init does to stay deaf must not reach a command: an
	// inherited SIG_IGN would survive execve.
	if out := mustRun(t, sb, "exec grep SigIgn /proc/self/status"); strings.TrimSpace(out) != "SigIgn:\t0000000000000000" {
		t.Errorf("a command starts with ignored signals: %q", out)
	}
}

func TestWarmStarts(t *testing.T) {
	sb, _ := newBox(t, nil)
	for i := range 20 {
		if out := mustRun(t, sb, fmt.Sprintf("echo %d", i)); out != fmt.Sprintf("%d\n", i) {
			t.Fatalf("run %d: %q", i, out)
		}
	}
	// Concurrent commands.
	var ps []sandbox.Process
	var outs []*bytes.Buffer
	for i := range 5 {
		var b bytes.Buffer
		c := sh(fmt.Sprintf("sleep 0.1; echo %d", i))
		c.Stdout = &b
		p, err := sb.Start(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		ps, outs = append(ps, p), append(outs, &b)
	}
	for i, p := range ps {
		if e, _ := p.Wait(); e.Code != 0 || outs[i].String() != fmt.Sprintf("%d\n", i) {
			t.Errorf("concurrent %d: %+v %q", i, e, outs[i])
		}
	}
}

func TestReadOutsideWorkspace(t *testing.T) {
	hidden := t.TempDir()
	os.WriteFile(filepath.Join(hidden, "secret"), []byte("x"), 0o644)
	needRoot(t)
	spec := baseSpec(t)
	spec.ReadOutsideWorkspace = true
	sb, err := New(Options{HideDirs: []string{hidden}}).Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	out := mustRun(t, sb, "cat /etc/hostname >/dev/null && ls /root /home | wc -l && echo ok > x && cat x")
	if !strings.HasSuffix(out, "ok\n") {
		t.Errorf("output %q", out)
	}
	if e, _, _ := run(t, sb, sh("cat "+filepath.Join(hidden, "secret"))); e.Code == 0 {
		t.Error("a hidden dir is readable")
	}
	if e, _, _ := run(t, sb, sh("touch /etc/evil")); e.Code == 0 {
		t.Error("the host root is writable")
	}
}

func TestExtraPaths(t *testing.T) {
	ro, rw := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(ro, "r"), []byte("read-me"), 0o600)
	sb, _ := newBox(t, func(s *sandbox.Spec) {
		s.ReadPaths = []string{ro}
		s.WritePaths = []string{rw}
	})
	if out := mustRun(t, sb, "cat "+ro+"/r 2>&1 || true"); out == "" {
		t.Error("no output reading the read path")
	}
	mustRun(t, sb, "echo w > "+rw+"/w")
	if got, _ := os.ReadFile(filepath.Join(rw, "w")); string(got) != "w\n" {
		t.Errorf("write path: %q", got)
	}
	if e, _, _ := run(t, sb, sh("touch "+ro+"/x")); e.Code == 0 {
		t.Error("a read path is writable")
	}
}

func TestFailClosedWithoutCgroups(t *testing.T) {
	needRoot(t)
	saved := newCgroup
	newCgroup = nil
	defer func() { newCgroup = saved }()
	spec := baseSpec(t)
	spec.Limits.MemoryBytes = 64 << 20
	_, err := New(Options{}).Create(t.Context(), spec)
	if !errors.Is(err, sandbox.ErrUnenforceable) || !strings.Contains(err.Error(), "cgroup") {
		t.Fatalf("Create without cgroups: %v, want ErrUnenforceable naming cgroup", err)
	}
	spec.AllowDegraded = true
	sb, err := New(Options{}).Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	if d := sb.Info().Degraded; len(d) != 1 || d[0] != "cgroup" {
		t.Fatalf("Degraded = %v", d)
	}
}

func TestCloseLeavesNothing(t *testing.T) {
	needRoot(t)
	mountsBefore := hostMounts(t)
	spec := baseSpec(t)
	spec.Limits.Pids = 64
	sb, err := New(Options{}).Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	b := sb.(*box)
	ns := pidNS(t, b)
	p, err := sb.Start(t.Context(), sh("(setsid sleep 1000 &); sleep 1000"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if e, _ := p.Wait(); e.Code != -1 {
		t.Errorf("running command after Close: %+v", e)
	}
	waitNoProcs(t, b, ns)
	if _, err := os.Stat("/sys/fs/cgroup/pids/agentbox/agentbox-" + b.id); err == nil {
		t.Error("cgroup left behind")
	}
	// Other packages' tests (the gvisor runtime's host-side overlays) may
	// mount and unmount meanwhile: what counts is a mount of this
	// sandbox's, named by its id or below the test's directories.
	ours := func(point string) bool {
		return strings.Contains(point, b.id) || strings.HasPrefix(point, filepath.Dir(spec.Workspace))
	}
	if added := newMounts(mountsBefore, hostMounts(t), ours); len(added) > 0 {
		t.Errorf("host mounts left behind: %v", added)
	}
	if _, err := sb.Close(t.Context()); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := sb.Start(t.Context(), sh("true")); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("Start after Close: %v", err)
	}
}

// newMounts returns the mount points of after that are not in before and
// that keep says belong to the test.
func newMounts(before, after string, keep func(string) bool) []string {
	had := map[string]int{}
	for _, p := range strings.Split(before, "\n") {
		had[p]++
	}
	var out []string
	for _, p := range strings.Split(after, "\n") {
		if had[p] > 0 {
			had[p]--
			continue
		}
		if keep(p) {
			out = append(out, p)
		}
	}
	return out
}

// hostMounts lists the mount points of the host's mount namespace.
func hostMounts(t testing.TB) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			points = append(points, f[4])
		}
	}
	return strings.Join(points, "\n")
}

// pidNS names the pid namespace of b's init (while it runs).
func pidNS(t testing.TB, b *box) string {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", b.initPid))
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// waitNoProcs waits until no host process runs as one of b's uids, in b's
// pid namespace ns or in the host's. Sandboxes of other agentbox
// processes on the host (older ones did not take uid slots host-wide) are
// in pid namespaces of their own.
func waitNoProcs(t testing.TB, b *box, ns string) {
	t.Helper()
	uids := map[string]bool{}
	for _, u := range []int{100000 + b.slot, 101000 + b.slot} {
		uids[strconv.Itoa(u)] = true
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := procsWithUID(uids, ns)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left behind: %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func procsWithUID(uids map[string]bool, ns string) []string {
	hostNS, _ := os.Readlink("/proc/self/ns/pid")
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if got, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err != nil || got != ns && got != hostNS {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" && uids[f[1]] {
				out = append(out, e.Name())
			}
		}
	}
	return out
}

const sigTERM = syscall.SIGTERM

// TestCloseWhileCommandsEnd: commands that fail as the sandbox is closed
// (a session's last processes, an agent's relays) have their verdict
// worked out, reading the sandbox's mounts, while Close releases them;
// under -race, nothing of it races.
func TestCloseWhileCommandsEnd(t *testing.T) {
	for range 5 {
		sb, _ := newBox(t, nil)
		var ps []sandbox.Process
		for i := range 40 {
			// Failing by themselves, one every few milliseconds, around
			// the moment Close starts.
			p, err := sb.Start(t.Context(), sh(fmt.Sprintf("sleep 0.%03d; exit 1", 100+i*5)))
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		time.Sleep(200 * time.Millisecond)
		if _, err := sb.Close(t.Context()); err != nil {
			t.Errorf("Close: %v", err)
		}
		for _, p := range ps {
			_, _ = p.Wait()
		}
	}
}

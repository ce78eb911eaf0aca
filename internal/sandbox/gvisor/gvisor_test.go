package gvisor

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// needRunsc skips only when runsc is not installed; every other problem
// (a broken runsc, no root) fails the test.
func needRunsc(tb testing.TB) *Runtime {
	tb.Helper()
	if _, err := exec.LookPath("runsc"); err != nil {
		tb.Skip("runsc is not installed (Debian package runsc; scripts/setup installs it)")
	}
	if os.Geteuid() != 0 {
		tb.Fatal("the gvisor runtime needs root (CI runs as root)")
	}
	rt := New(Options{StateDir: tb.TempDir()})
	if p := rt.Probe(tb.Context()); !p.Available {
		tb.Fatalf("gvisor unavailable: %+v", p)
	}
	return rt
}

func baseSpec(tb testing.TB) sandbox.Spec {
	ws := tb.TempDir()
	return sandbox.Spec{
		Workspace: ws,
		Env:       map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": sandboxHome, "LANG": "C.UTF-8"},
		Limits:    sandbox.Limits{MemoryBytes: 512 << 20, Pids: 128, Timeout: time.Minute, DiskBytes: 64 << 20, OutputBytes: 1 << 20},
		Protected: []string{"CLAUDE.md", ".mcp.json", ".git/hooks/**"},
	}
}

func newBox(t *testing.T, rt *Runtime, spec sandbox.Spec) sandbox.Sandbox {
	t.Helper()
	sb, err := rt.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(t.Context()) })
	return sb
}

type result struct {
	exit           sandbox.Exit
	stdout, stderr string
}

func run(t *testing.T, sb sandbox.Sandbox, c sandbox.Cmd) result {
	t.Helper()
	var out, errb syncBuffer
	c.Stdout, c.Stderr = &out, &errb
	p, err := sb.Start(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	e, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return result{e, out.String(), errb.String()}
}

func sh(script string) sandbox.Cmd { return sandbox.Cmd{Args: []string{"/bin/sh", "-c", script}} }

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

func TestKernelIsGVisor(t *testing.T) {
	rt := needRunsc(t)
	sb := newBox(t, rt, baseSpec(t))
	r := run(t, sb, sh("uname -r; dmesg | head -n 1; id -u; id -g; hostname"))
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.exit.Code != 0 || len(lines) != 5 {
		t.Fatalf("exit %+v, stdout %q, stderr %q", r.exit, r.stdout, r.stderr)
	}
	if lines[0] != "4.4.0" || !strings.Contains(lines[1], "Starting gVisor") {
		t.Errorf("uname -r %q, dmesg %q: want gVisor's kernel", lines[0], lines[1])
	}
	if lines[2] != "1000" || lines[3] != "1000" || lines[4] != "sandbox" {
		t.Errorf("uid %s gid %s hostname %s; want 1000 1000 sandbox", lines[2], lines[3], lines[4])
	}
	info := sb.Info()
	if info.Runtime != Name || !strings.Contains(strings.Join(info.Mechanisms, " "), "gvisor:ptrace") {
		t.Errorf("Info = %+v", info)
	}
}

func TestWorkspaceAndProtectedFiles(t *testing.T) {
	rt := needRunsc(t)
	spec := baseSpec(t)
	ws := spec.Workspace
	if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, ".mcp.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := newBox(t, rt, spec)
	r := run(t, sb, sh(`set -e; cat a.txt; echo new >> a.txt; mkdir -p d; echo b > d/b.txt;
echo evil > CLAUDE.md; echo '{"evil":1}' > .mcp.json; mkdir -p .git/hooks; echo x > .git/hooks/pre-commit; pwd`))
	if r.exit.Code != 0 {
		t.Fatalf("exit %+v, stderr %q", r.exit, r.stderr)
	}
	if !strings.HasPrefix(r.stdout, "old\n") || !strings.Contains(r.stdout, ws) {
		t.Errorf("stdout %q: want the host file's content and cwd %s", r.stdout, ws)
	}
	// Nothing reaches the host before a commit.
	if _, err := os.Stat(filepath.Join(ws, "d")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("d/ appeared on the host before Commit (%v)", err)
	}
	v, err := sb.Close(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "old\nnew\n" {
		t.Errorf("a.txt = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "d/b.txt")); string(b) != "b\n" {
		t.Errorf("d/b.txt = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".mcp.json")); string(b) != "{}" {
		t.Errorf(".mcp.json changed on the host: %q", b)
	}
	for _, p := range []string{"CLAUDE.md", ".git/hooks/pre-commit"} {
		if _, err := os.Stat(filepath.Join(ws, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("protected %s was created on the host (%v)", p, err)
		}
	}
	dropped := map[string]bool{}
	for _, x := range v {
		if x.Action == "dropped" {
			dropped[x.Target] = true
		}
	}
	// The workspace had no .git: creating one is dropped as a whole.
	for _, p := range []string{"CLAUDE.md", ".mcp.json", ".git"} {
		if !dropped[p] {
			t.Errorf("no dropped violation for %s in %+v", p, v)
		}
	}
}

func TestRootReadOnlyAndNoNetwork(t *testing.T) {
	rt := needRunsc(t)
	sb := newBox(t, rt, baseSpec(t))
	// (ls and stat fail here with EINVAL: Debian 12's runsc rejects
	// coreutils' statx flags; the shell's glob and cat do not use statx.)
	for _, script := range []string{"echo x >> /etc/passwd", "echo x > /usr/bin/evil", "echo x > /newfile", "mkdir /root/x"} {
		r := run(t, sb, sh(script))
		if r.exit.Code == 0 {
			t.Errorf("%q succeeded; want a read-only root", script)
		}
	}
	r := run(t, sb, sh("echo ok > /tmp/t && cat /tmp/t && for i in /sys/class/net/*; do echo ${i##*/}; done"))
	if r.exit.Code != 0 || strings.TrimSpace(r.stdout) != "ok\nlo" {
		t.Errorf("tmp write / interfaces: exit %+v stdout %q stderr %q; want ok and only lo", r.exit, r.stdout, r.stderr)
	}
	if _, err := os.Stat("/newfile"); err == nil {
		t.Error("/newfile exists on the host")
	}
}

func TestEnvIsolation(t *testing.T) {
	rt := needRunsc(t)
	t.Setenv("AGENTBOX_TEST_SECRET", "marker-7f3a")
	spec := baseSpec(t)
	sb := newBox(t, rt, spec)
	r := run(t, sb, sandbox.Cmd{Args: []string{"env"}, Env: map[string]string{"EXTRA": "1"}})
	if r.exit.Code != 0 {
		t.Fatalf("env: %+v %q", r.exit, r.stderr)
	}
	if strings.Contains(r.stdout, "marker-7f3a") {
		t.Fatalf("host secret leaked into the sandbox: %q", r.stdout)
	}
	got := strings.Fields(r.stdout)
	want := []string{"EXTRA=1", "HOME=" + sandboxHome, "LANG=C.UTF-8", "PATH=/usr/local/bin:/usr/bin:/bin"}
	for _, w := range want {
		if !strings.Contains(r.stdout, w+"\n") {
			t.Errorf("env lacks %s: %q", w, r.stdout)
		}
	}
	if len(got) != len(want) {
		t.Errorf("env has %d variables, want exactly %v: %q", len(got), want, r.stdout)
	}
}

func TestTimeoutKillsEverything(t *testing.T) {
	rt := needRunsc(t)
	spec := baseSpec(t)
	sb := newBox(t, rt, spec)
	c := sh("sleep 1000 & (setsid sleep 1000 &) ; exec sleep 1000")
	c.Timeout = time.Second
	start := time.Now()
	r := run(t, sb, c)
	if r.exit.Reason != sandbox.ReasonTimeout {
		t.Fatalf("exit %+v after %v, want a timeout verdict", r.exit, time.Since(start))
	}
	if r.exit.Code == 0 {
		t.Errorf("exit code 0 after a kill: %+v", r.exit)
	}
	id := sb.ID()
	if _, err := sb.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if pids := processesMentioning(id); len(pids) > 0 {
		t.Errorf("processes left after Close: %v", pids)
	}
	// In every hierarchy: runsc creates the group in those the cgroup
	// package does not manage (blkio, cpuset, devices, systemd) too.
	for _, pat := range []string{"/sys/fs/cgroup/*/agentbox/gvisor-", "/sys/fs/cgroup/agentbox/gvisor-"} {
		if matches, _ := filepath.Glob(pat + id[len("agentbox-"):]); len(matches) > 0 {
			t.Errorf("cgroup left: %v", matches)
		}
	}
	if _, err := os.Stat(filepath.Join(rt.opts.StateDir, id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bundle dir left (%v)", err)
	}
	if _, err := sb.Start(t.Context(), sh("true")); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("Start after Close: %v, want ErrClosed", err)
	}
}

// processesMentioning lists pids whose command line contains s.
func processesMentioning(s string) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(s)) {
			out = append(out, filepath.Base(d)+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

func TestMemoryLimit(t *testing.T) {
	rt := needRunsc(t)
	spec := baseSpec(t)
	spec.Limits.MemoryBytes = 256 << 20
	sb := newBox(t, rt, spec)
	r := run(t, sb, sandbox.Cmd{Args: []string{"python3", "-c", "x = bytearray(1 << 30); x[::4096] = b'1' * len(x[::4096]); print('survived')"}})
	if r.exit.Reason != sandbox.ReasonMemory || strings.Contains(r.stdout, "survived") {
		t.Fatalf("exit %+v stdout %q stderr %q; want memory_limit_exceeded", r.exit, r.stdout, r.stderr)
	}
}

func TestProbeAndUnavailable(t *testing.T) {
	rt := New(Options{Runsc: "/nonexistent/runsc", StateDir: t.TempDir()})
	p := rt.Probe(t.Context())
	if p.Available || !strings.Contains(p.Reason, "runsc not installed") {
		t.Errorf("Probe with a missing runsc = %+v", p)
	}
	if _, err := rt.Create(t.Context(), sandbox.Spec{Workspace: t.TempDir()}); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("Create: %v, want ErrUnavailable", err)
	}
}

// TestHideDirs: a sandbox reading outside its workspace sees nothing of a
// hidden directory (the daemon's data directory: other sessions' files,
// the store), yet its workspace and state directory below it, as a
// daemon's are, are reachable and writable by the sandbox user, although
// the host directory's mode (0700, root's) refuses it the way. Before
// hiding, runsc exec failed to enter the working directory (permission
// denied), for every agent.
func TestHideDirs(t *testing.T) {
	data, err := os.MkdirTemp("/var/tmp", "agentbox-hide-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(data) })
	if err := os.WriteFile(filepath.Join(data, "secret"), []byte("other session"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, state := filepath.Join(data, "workspaces", "w"), filepath.Join(data, "agents", "home", "s")
	for _, d := range []string{ws, filepath.Join(state, "work")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("runsc is not installed")
	}
	rt := New(Options{StateDir: filepath.Join(data, "gvisor"), HideDirs: []string{data}})
	spec := baseSpec(t)
	spec.Workspace, spec.ReadOutsideWorkspace, spec.StateDirs = ws, true, []string{state}
	sb := newBox(t, rt, spec)
	r := run(t, sb, sandbox.Cmd{Dir: filepath.Join(state, "work"), Args: []string{"/bin/sh", "-c",
		"pwd; echo x > f && cat f; echo y > " + ws + "/g && cat " + ws + "/g; cat " + data + "/secret; echo " + data + "/*"}})
	want := filepath.Join(state, "work") + "\nx\ny\n"
	if !strings.HasPrefix(r.stdout, want) || strings.Contains(r.stdout, "other session") || strings.Contains(r.stdout, "/secret") || strings.Contains(r.stdout, "/gvisor") {
		t.Errorf("exit %+v, stdout %q, stderr %q; want %q, then neither the hidden file nor the runtime's state listed", r.exit, r.stdout, r.stderr, want)
	}
	if _, err := os.Stat(filepath.Join(data, "gvisor", "hide")); err == nil {
		t.Error("a mount point was made in the host's hidden directory")
	}
}

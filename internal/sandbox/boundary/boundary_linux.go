//go:build linux

package boundary

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Runtime runs processes in the container the daemon runs in. It answers
// for isolation "process": the host gave this daemon only policies whose
// isolation the container provides (a gVisor one runs under runsc, a
// microVM one is refused on the host).
type Runtime struct{}

var (
	_ sandbox.Runtime         = (*Runtime)(nil)
	_ sandbox.WorkspaceViewer = (*box)(nil)
)

// New returns the runtime.
func New() *Runtime { return &Runtime{} }

// Name implements sandbox.Runtime.
func (*Runtime) Name() string { return "process" }

// Verify fails unless this process is inside a boundary: not root, no
// effective capabilities, no privilege gain (no_new_privs) and a
// read-only root filesystem, as the Docker provider makes its containers
// (no_new_privs where the kernel reports it: gVisor's /proc does not; the
// read-only root by statfs, or under gVisor, whose statfs does not say,
// Docker's /.dockerenv).
// A daemon started with --boundary anywhere else refuses to start.
func Verify() error {
	if os.Geteuid() == 0 {
		return errors.New("--boundary container: this process is root; a provider's container runs its daemon unprivileged")
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fmt.Errorf("--boundary container: %w", err)
	}
	var capEff, nnp string
	sc := bufio.NewScanner(strings.NewReader(string(status)))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		switch k {
		case "CapEff":
			capEff = strings.TrimSpace(v)
		case "NoNewPrivs":
			nnp = strings.TrimSpace(v)
		}
	}
	if strings.Trim(capEff, "0") != "" {
		return fmt.Errorf("--boundary container: this process has capabilities (CapEff %s)", capEff)
	}
	// gVisor's /proc (a container under runsc) has no NoNewPrivs line:
	// there the field is absent, not 0.
	if nnp != "1" && nnp != "" {
		return errors.New("--boundary container: no_new_privs is not set on this process")
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs("/", &st); err != nil {
		return fmt.Errorf("--boundary container: %w", err)
	}
	if st.Flags&stRdonly == 0 && !dockerEnv() {
		return errors.New("--boundary container: the root filesystem is writable")
	}
	return nil
}

// dockerEnv reports whether Docker's /.dockerenv marks this root as a
// container's: only root can make it on a host, and Docker makes it in
// every container, under runsc too, whose read-only root statfs does not
// report as such.
func dockerEnv() bool {
	fi, err := os.Lstat("/.dockerenv")
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Uid == 0
}

// stRdonly is ST_RDONLY of statfs's flags.
const stRdonly = 0x1

// Probe implements sandbox.Runtime.
func (*Runtime) Probe(context.Context) sandbox.Probe {
	return sandbox.Probe{Runtime: "process", Available: true, Mechanisms: []sandbox.Mechanism{
		{Name: "boundary", OK: true, Detail: "the provider's container is the sandbox (serve --boundary container)"},
	}}
}

// Create implements sandbox.Runtime: it refuses what neither the
// container nor this runtime enforces, naming it.
func (*Runtime) Create(_ context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := Check(spec); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(spec.Workspace); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("boundary sandbox: workspace %q is not a directory", spec.Workspace)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &box{id: "ctr-" + hex.EncodeToString(b[:]), spec: spec, procs: map[*proc]struct{}{}}, nil
}

// Check refuses the parts of a spec the container does not enforce:
// any network but none (the container's egress is the host's gate, which
// the host set up from the policy it mapped), extra writable host paths,
// a strict or extended seccomp profile (the container has Docker's
// default one).
func Check(spec sandbox.Spec) error {
	fail := func(field, why string) error {
		return fmt.Errorf("%w: %s: %s (this daemon's sandbox is its provider's container)", sandbox.ErrUnenforceable, field, why)
	}
	switch spec.Network.Mode {
	case "", sandbox.NetworkNone:
	default:
		return fail("network.mode "+spec.Network.Mode, "the container has no network of its own; its egress is decided by the host's gate, set up from the policy the host mapped")
	}
	if len(spec.WritePaths) > 0 {
		return fail("filesystem.write", "no host path is mounted into the container")
	}
	if spec.Syscalls.Profile != "" && spec.Syscalls.Profile != "default" {
		return fail("syscalls.profile "+spec.Syscalls.Profile, "the container has Docker's default seccomp profile only")
	}
	if len(spec.Syscalls.Deny) > 0 {
		return fail("syscalls.deny", "the container has Docker's default seccomp profile only")
	}
	return nil
}

// box is one sandbox: the processes started in it.
type box struct {
	id   string
	spec sandbox.Spec

	mu     sync.Mutex
	procs  map[*proc]struct{}
	closed bool
}

func (b *box) ID() string { return b.id }

func (b *box) Info() sandbox.Info {
	return sandbox.Info{Runtime: RuntimeName, Mechanisms: []string{"boundary:container"}}
}

// Start implements sandbox.Sandbox: cmd runs as a child of this daemon,
// in a process group of its own (a terminal's session with TTY), killed
// with it when this daemon dies.
func (b *box) Start(ctx context.Context, cmd sandbox.Cmd) (sandbox.Process, error) {
	if len(cmd.Args) == 0 {
		return nil, errors.New("boundary sandbox: no command")
	}
	env := make(map[string]string, len(b.spec.Env)+len(cmd.Env))
	for k, v := range b.spec.Env {
		env[k] = v
	}
	for k, v := range cmd.Env {
		env[k] = v
	}
	path, err := lookPath(cmd.Args[0], env["PATH"])
	if err != nil {
		return nil, err
	}
	// Detached from ctx on purpose: the process's life is the sandbox's
	// (Close, its timeout), ctx bounds the start only.
	c := exec.CommandContext(context.WithoutCancel(ctx), path, cmd.Args[1:]...)
	c.Args[0] = cmd.Args[0]
	c.Env = make([]string, 0, len(env))
	for k, v := range env {
		c.Env = append(c.Env, k+"="+v)
	}
	c.Dir = cmd.Dir
	if c.Dir == "" {
		c.Dir = b.spec.Workspace
	}
	c.Stdin, c.Stdout, c.Stderr = cmd.Stdin, cmd.Stdout, cmd.Stderr
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cmd.TTY {
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, sandbox.ErrClosed
	}
	if err := c.Start(); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("boundary sandbox: start %q: %w: %w", cmd.Args[0], sandbox.ErrNoCommand, err)
		}
		return nil, fmt.Errorf("boundary sandbox: start %q: %w", cmd.Args[0], err)
	}
	p := &proc{c: c, box: b, done: make(chan struct{})}
	b.procs[p] = struct{}{}
	timeout := cmd.Timeout
	if timeout <= 0 {
		timeout = b.spec.Limits.Timeout
	}
	if timeout > 0 {
		p.timer = time.AfterFunc(timeout, func() {
			p.mu.Lock()
			p.timedOut = true
			p.mu.Unlock()
			p.kill()
		})
	}
	go p.wait()
	return p, nil
}

// lookPath finds name in path (the sandbox's PATH) unless it holds a
// slash.
func lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("boundary sandbox: %w: %q is not in PATH %q", sandbox.ErrNoCommand, name, path)
}

// ViewWorkspace implements sandbox.WorkspaceViewer: the workspace is the
// directory the processes work in, with nothing over it.
func (b *box) ViewWorkspace() (*os.Root, error) {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return nil, sandbox.ErrClosed
	}
	return os.OpenRoot(b.spec.Workspace)
}

// DirectWorkspace implements sandbox.DirectWorkspace: the processes work
// in the workspace itself, inside the boundary the daemon shares.
func (b *box) DirectWorkspace() string { return b.spec.Workspace }

// Commit implements sandbox.Sandbox: nothing is copied anywhere; the
// workspace is the container's own.
func (b *box) Commit(context.Context) ([]sandbox.Violation, error) { return nil, nil }

// Close implements sandbox.Sandbox: every process group still running is
// killed and waited for.
func (b *box) Close(ctx context.Context) ([]sandbox.Violation, error) {
	b.mu.Lock()
	b.closed = true
	procs := make([]*proc, 0, len(b.procs))
	for p := range b.procs {
		procs = append(procs, p)
	}
	b.mu.Unlock()
	for _, p := range procs {
		p.kill()
		select {
		case <-p.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return nil, nil
}

// proc is one started process.
type proc struct {
	c     *exec.Cmd
	box   *box
	timer *time.Timer
	done  chan struct{}

	mu       sync.Mutex
	timedOut bool
	exit     sandbox.Exit
	err      error
}

func (p *proc) Pid() int { return p.c.Process.Pid }

// Signal implements sandbox.Process: SIGKILL kills the process group.
func (p *proc) Signal(sig os.Signal) error {
	if sig == syscall.SIGKILL {
		p.kill()
		return nil
	}
	return p.c.Process.Signal(sig)
}

// kill kills the process's group (the process itself once it is gone:
// its group may outlive it).
func (p *proc) kill() {
	_ = syscall.Kill(-p.c.Process.Pid, syscall.SIGKILL)
}

func (p *proc) wait() {
	err := p.c.Wait()
	if p.timer != nil {
		p.timer.Stop()
	}
	// What the process left in its group goes with it.
	_ = syscall.Kill(-p.c.Process.Pid, syscall.SIGKILL)
	var exit sandbox.Exit
	st := p.c.ProcessState
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
	}
	if st != nil {
		exit.Code = st.ExitCode()
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			exit.Code, exit.Signal = -1, unix.SignalName(ws.Signal())
		}
		if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
			exit.Usage = sandbox.Usage{MaxRSSBytes: ru.Maxrss * 1024,
				CPUMillis: (ru.Utime.Nano() + ru.Stime.Nano()) / int64(time.Millisecond)}
		}
	}
	p.mu.Lock()
	if p.timedOut {
		exit.Reason, exit.Message = sandbox.ReasonTimeout, "the process ran past its timeout and was killed"
	}
	p.exit = exit
	p.mu.Unlock()
	p.box.mu.Lock()
	delete(p.box.procs, p)
	p.box.mu.Unlock()
	close(p.done)
}

// Wait implements sandbox.Process.
func (p *proc) Wait() (sandbox.Exit, error) {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit, p.err
}

// ResetTimeout implements sandbox.TimeoutResetter.
func (p *proc) ResetTimeout(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.timedOut {
		return
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	if d > 0 {
		p.timer = time.AfterFunc(d, func() {
			p.mu.Lock()
			p.timedOut = true
			p.mu.Unlock()
			p.kill()
		})
	}
}

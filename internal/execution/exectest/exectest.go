// Package exectest provides a test double of sandbox.Runtime that runs
// commands on the host with os/exec, WITHOUT any isolation, and a policy
// double, to test code built on sandboxes (buffering, limits, concurrency,
// pools, HTTP handlers) with real processes. Never use it outside tests;
// the real runtimes are in sandbox/process and sandbox/gvisor.
package exectest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Runtime is the host runtime double. Name it with Key; the zero value
// is named "host".
type Runtime struct {
	Key string
	// CreateErr, when set, fails every Create.
	CreateErr error
	// CloseViolations are the violations every sandbox sees during its
	// run: as the sandbox.Sandbox contract says (the violations seen since
	// the last Commit), its first Commit returns them, or its Close when
	// nothing committed before.
	CloseViolations []sandbox.Violation
	// LateViolations are returned by every sandbox's Close only: they
	// stand for violations seen after the last Commit (by a process left
	// running).
	LateViolations []sandbox.Violation
	// CloseGate, when set, holds every sandbox's Close until it is closed
	// (a slow teardown). Set it before the first Create.
	CloseGate chan struct{}

	created atomic.Int64
	closed  atomic.Int64
	mu      sync.Mutex
	boxes   []*hostSandbox
}

func (r *Runtime) Name() string {
	if r.Key == "" {
		return "host"
	}
	return r.Key
}

func (r *Runtime) Probe(context.Context) sandbox.Probe {
	return sandbox.Probe{Runtime: r.Name(), Available: true}
}

func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if r.CreateErr != nil {
		return nil, r.CreateErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := r.created.Add(1)
	sb := &hostSandbox{rt: r, id: fmt.Sprintf("host-%d", n), spec: spec}
	if spec.Network.Mode == sandbox.NetworkProxy {
		sb.egress = &idleListener{done: make(chan struct{})}
	}
	r.mu.Lock()
	r.boxes = append(r.boxes, sb)
	r.mu.Unlock()
	return sb, nil
}

// Specs returns the spec of every sandbox created, in order.
func (r *Runtime) Specs() []sandbox.Spec {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]sandbox.Spec, len(r.boxes))
	for i, b := range r.boxes {
		out[i] = b.spec
	}
	return out
}

// Open is the number of sandboxes created and not closed.
func (r *Runtime) Open() int64 { return r.created.Load() - r.closed.Load() }

// MaxStarts is the largest number of processes started in one sandbox.
func (r *Runtime) MaxStarts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, b := range r.boxes {
		b.mu.Lock()
		n = max(n, b.starts)
		b.mu.Unlock()
	}
	return n
}

type hostSandbox struct {
	rt   *Runtime
	id   string
	spec sandbox.Spec
	// egress is the Egress listener of a proxy-mode spec. Nothing ever
	// arrives on it: the double's processes run on the host, with its
	// network.
	egress *idleListener

	mu        sync.Mutex
	starts    int
	closed    bool
	committed bool // the run's violations were returned
	procs     []*hostProcess
}

func (s *hostSandbox) ID() string { return s.id }

// Egress implements sandbox.EgressSandbox (nil unless the spec's network
// mode is proxy).
func (s *hostSandbox) Egress() net.Listener {
	if s.egress == nil {
		return nil
	}
	return s.egress
}

// idleListener accepts nothing until it is closed.
type idleListener struct {
	once sync.Once
	done chan struct{}
}

func (l *idleListener) Accept() (net.Conn, error) {
	<-l.done
	return nil, net.ErrClosed
}

func (l *idleListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *idleListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sandbox.DefaultProxyPort}
}

func (s *hostSandbox) Info() sandbox.Info {
	return sandbox.Info{Runtime: s.rt.Name(), Mechanisms: []string{"none"}}
}

func (s *hostSandbox) Start(ctx context.Context, c sandbox.Cmd) (sandbox.Process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, sandbox.ErrClosed
	}
	s.starts++
	// Detached from ctx on purpose: a sandboxed process lives as long as
	// its sandbox, not the request that started it (sandbox.Sandbox.Start).
	cmd := exec.CommandContext(context.WithoutCancel(ctx), c.Args[0], c.Args[1:]...)
	cmd.Dir = c.Dir
	if cmd.Dir == "" {
		cmd.Dir = s.spec.Workspace
	}
	for k, v := range s.spec.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	for k, v := range c.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Stdin, c.Stdout, c.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c.TTY {
		// A new session whose controlling terminal is stdin; its
		// process group is the session's, so killTree still works.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &hostProcess{cmd: cmd}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = s.spec.Limits.Timeout
	}
	if timeout > 0 {
		p.timer = time.AfterFunc(timeout, func() {
			p.timedOut.Store(true)
			p.killTree()
		})
	}
	s.procs = append(s.procs, p)
	return p, nil
}

func (s *hostSandbox) Commit(context.Context) ([]sandbox.Violation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, sandbox.ErrClosed
	}
	return s.runViolations(), nil
}

// runViolations returns CloseViolations the first time only.
func (s *hostSandbox) runViolations() []sandbox.Violation {
	if s.committed {
		return nil
	}
	s.committed = true
	return s.rt.CloseViolations
}

func (s *hostSandbox) Close(context.Context) ([]sandbox.Violation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil
	}
	s.closed = true
	for _, p := range s.procs {
		p.killTree()
	}
	if s.rt.CloseGate != nil {
		<-s.rt.CloseGate
	}
	if s.egress != nil {
		_ = s.egress.Close()
	}
	s.rt.closed.Add(1)
	return append(slices.Clone(s.runViolations()), s.rt.LateViolations...), nil
}

type hostProcess struct {
	cmd      *exec.Cmd
	timer    *time.Timer
	timedOut atomic.Bool
}

func (p *hostProcess) Pid() int { return p.cmd.Process.Pid }

func (p *hostProcess) killTree() { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) }

func (p *hostProcess) Signal(sig os.Signal) error {
	if sig == syscall.SIGKILL {
		p.killTree()
		return nil
	}
	return p.cmd.Process.Signal(sig)
}

func (p *hostProcess) Wait() (sandbox.Exit, error) {
	err := p.cmd.Wait()
	if p.timer != nil {
		p.timer.Stop()
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return sandbox.Exit{}, err
	}
	st := p.cmd.ProcessState
	ex := sandbox.Exit{Code: st.ExitCode()}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		ex.Signal = ws.Signal().String()
	}
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		ex.Usage = sandbox.Usage{MaxRSSBytes: ru.Maxrss * 1024, CPUMillis: (st.UserTime() + st.SystemTime()).Milliseconds()}
	}
	if p.timedOut.Load() {
		ex.Reason, ex.Message = sandbox.ReasonTimeout, "the process ran past its timeout"
	}
	return ex, nil
}

// Policy is a policy double: it compiles into a spec with the workspace,
// the host's PATH and its Limits.
type Policy struct {
	Runtime string // the isolation, i.e. a Runtime's Name
	Key     string // the hash
	Limits  sandbox.Limits
}

func (p *Policy) Isolation() string { return p.Runtime }
func (p *Policy) Hash() string      { return p.Key }

func (p *Policy) Compile(ws string, _ func(string) (string, bool)) (sandbox.Spec, error) {
	return sandbox.Spec{
		Workspace: ws, WorkspaceDir: ws,
		Env:    map[string]string{"PATH": os.Getenv("PATH"), "HOME": ws, "LANG": "C.UTF-8"},
		Limits: p.Limits,
	}, nil
}

package gvisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/reexec"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/cgroup"
	"github.com/agentbox/agentbox/internal/sandbox/owner"
	"github.com/agentbox/agentbox/internal/sandbox/seccomp"
	"github.com/agentbox/agentbox/internal/sandbox/workspace"
)

// pidsSlack leaves room for threads the Sentry may still start.
const pidsSlack = 16

// box is one warm gVisor container.
type box struct {
	rt   *Runtime
	id   string
	spec sandbox.Spec
	dir  string
	info sandbox.Info
	cg   *cgroup.Group
	ws   *workspaceOverlay
	// states are the state directories' overlays (Spec.StateDirs).
	states []*layered
	// record is the sandbox in this process's owner records (package
	// owner) until destroy has removed all of it.
	record *owner.Entry
	// Network mode proxy only (egress.go): the host side of the control
	// socket and the forwarder's `runsc exec`. Nothing is bound into the
	// container for them.
	egress        *egressListener
	forwarder     *exec.Cmd
	forwarderDone chan struct{}

	execs atomic.Int64
	dead  atomic.Bool

	mu sync.Mutex
	// commitMu serialises commits of the workspace and state directories.
	commitMu sync.Mutex
	// committer applies the overlay's upper layer (created with it);
	// stateCommitters the state directories' (Spec.StateDirs).
	committer       *workspace.Committer
	stateCommitters []*workspace.Committer
	closed          bool
	closeRes        []sandbox.Violation
	closeErr        error
}

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return "agentbox-" + hex.EncodeToString(b[:])
}

func create(ctx context.Context, r *Runtime, spec sandbox.Spec) (_ sandbox.Sandbox, err error) {
	b := &box{rt: r, id: newID(), spec: spec}
	b.dir = filepath.Join(r.opts.StateDir, b.id)
	b.info = sandbox.Info{Runtime: Name, Mechanisms: []string{"gvisor:" + r.opts.Platform, "uid:1000", "no-caps", "no_new_privs"}}
	cgName := "gvisor-" + b.id[len("agentbox-"):]
	// Written down before any of it exists: if this process dies, the
	// container outlives it (runsc run --detach), and the next agentbox
	// to start removes the container, its cgroups, mounts and directory.
	if b.record, err = owner.Default().Record(owner.Record{Kind: KindSandbox, Name: cgName, Path: b.dir}); err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	if err := os.MkdirAll(b.dir, 0o700); err != nil {
		b.record.Release()
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	defer func() {
		if err != nil {
			// What cannot be torn down (a mount, a cgroup) is leaked: say so.
			if derr := b.destroy(); derr != nil {
				err = errors.Join(err, fmt.Errorf("gvisor: clean up after a failed create: %w", derr))
			}
		}
	}()

	// The pids limit is set once the container runs (see below).
	b.cg, err = cgroup.New(cgName, cgroup.Limits{
		MemoryBytes: spec.Limits.MemoryBytes,
		CPUs:        spec.Limits.CPUs,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: gvisor: cgroup: %w", sandbox.ErrUnenforceable, err)
	}
	b.info.Mechanisms = append(b.info.Mechanisms, "cgroup:"+b.cg.Version())

	b.ws, err = mountOverlay(b.dir, spec.Workspace, spec.Limits)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrUnenforceable, err)
	}
	for i, p := range spec.StateDirs {
		so, err := mountState(filepath.Join(b.dir, fmt.Sprintf("state%d", i)), p, spec.Limits)
		if so != nil {
			b.states = append(b.states, so)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", sandbox.ErrUnenforceable, err)
		}
	}
	b.committer = &workspace.Committer{Upper: b.ws.upper, Workspace: spec.Workspace, Options: workspace.OptionsFor(spec)}
	for i, so := range b.states {
		b.stateCommitters = append(b.stateCommitters, &workspace.Committer{
			Upper: so.upper, Workspace: spec.StateDirs[i], Options: workspace.StateOptionsFor(spec),
		})
	}
	b.info.Mechanisms = append(b.info.Mechanisms, "overlay")
	if b.ws.idmapped {
		b.info.Mechanisms = append(b.info.Mechanisms, "idmap")
	}
	switch spec.Network.Mode {
	case sandbox.NetworkNone:
		b.info.Mechanisms = append(b.info.Mechanisms, "network:none")
	case sandbox.NetworkProxy:
		b.info.Mechanisms = append(b.info.Mechanisms, "network:proxy")
	}

	bd := &bundle{dir: b.dir, rootfs: filepath.Join(b.dir, "rootfs")}
	if err := os.MkdirAll(bd.rootfs, 0o755); err != nil {
		return nil, err
	}
	if err := bd.buildRoot(spec); err != nil {
		return nil, err
	}
	if err := bd.hide(append([]string{r.opts.StateDir}, r.opts.HideDirs...)); err != nil {
		return nil, err
	}
	if err := reexec.Check(wrapperArg0); err != nil {
		return nil, err
	}
	if err := bd.add(bind(sandbox.SelfExe(), wrapperPath, false)); err != nil {
		return nil, err
	}
	// /tmp first: the workspace may live below it.
	if err := bd.add(bind(b.ws.tmp, "/tmp", true)); err != nil {
		return nil, err
	}
	if err := bd.add(bind(b.ws.home, sandboxHome, true)); err != nil {
		return nil, err
	}
	if err := bd.add(bind(b.ws.merged, spec.WorkspaceDir, true)); err != nil {
		return nil, err
	}
	for i, so := range b.states {
		if err := bd.add(bind(so.merged, spec.StateDirs[i], true)); err != nil {
			return nil, err
		}
	}
	for _, p := range spec.ReadPaths {
		if err := bd.add(bind(p, p, false)); err != nil {
			return nil, err
		}
	}
	for _, p := range spec.WritePaths {
		if err := bd.add(bind(p, p, true)); err != nil {
			return nil, err
		}
	}
	// The group exists already with its limits; runsc joins it and, not
	// owning it, leaves it to us.
	// gVisor's kernel enforces the same seccomp profile as the process
	// runtime (runsc --oci-seccomp), so escape attempts meet the same
	// errnos; the host kernel is behind gVisor's own filters anyway.
	filter, err := seccomp.OCI(spec.Syscalls.Profile, spec.Syscalls.Deny)
	if err != nil {
		return nil, err
	}
	b.info.Mechanisms = append(b.info.Mechanisms, "seccomp")
	cfg := bd.config(spec, cgroupsPath(b.cg), filter)
	if err := writeJSON(filepath.Join(b.dir, "config.json"), cfg); err != nil {
		return nil, err
	}

	// Bounded: the container starts in ~150 ms; a hang means a broken
	// platform. The container itself is detached from ctx on purpose.
	rctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	// The detached sandbox inherits runsc's stdout and stderr, so they go
	// to a file: a pipe would never reach EOF.
	logPath := filepath.Join(b.dir, "run.log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := r.runscCmd(rctx, b.state(), spec.Network.Mode, "run", "--detach", "--bundle", b.dir, b.id)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		out, _ := os.ReadFile(logPath)
		if rctx.Err() != nil {
			return nil, fmt.Errorf("gvisor: runsc run did not start the container within %v", startTimeout)
		}
		return nil, fmt.Errorf("gvisor: runsc run: %w: %s", err, lastLine(out))
	}
	if spec.Network.Mode == sandbox.NetworkProxy {
		// Before the pids limit: the forwarder's tasks are part of what
		// the sandbox holds at start.
		if err := b.startForwarder(rctx); err != nil {
			return nil, err
		}
	}
	// On the ptrace platform every task inside is a host task in the
	// group, next to gVisor's own threads (Sentry, gofer: ~100 at
	// start). The limit is what gVisor holds now plus the policy's
	// number plus slack for the Sentry's growth, so pids.events counts
	// the workload's refused forks.
	if spec.Limits.Pids > 0 {
		st, err := b.cg.Stats()
		if err != nil {
			return nil, err
		}
		if err := b.cg.SetPids(st.PidsCurrent + spec.Limits.Pids + pidsSlack); err != nil {
			return nil, fmt.Errorf("%w: gvisor: %w", sandbox.ErrUnenforceable, err)
		}
		b.info.Mechanisms = append(b.info.Mechanisms, "pids")
	}
	if b.egress != nil {
		return proxyBox{b}, nil
	}
	return b, nil
}

// cgroupsPath is the group's path relative to its hierarchy root.
func cgroupsPath(g *cgroup.Group) string {
	return "/" + cgroup.Parent + "/" + g.Name()
}

func (b *box) ID() string         { return b.id }
func (b *box) Info() sandbox.Info { return b.info }

// Start runs cmd with `runsc exec`. The process is bound to the sandbox,
// not to ctx: ctx only bounds the start.
func (b *box) Start(ctx context.Context, c sandbox.Cmd) (sandbox.Process, error) {
	if len(c.Args) == 0 {
		return nil, errors.New("gvisor: empty command")
	}
	if c.TTY {
		// runsc exec would need a console socket; without one the
		// command would run with no controlling terminal.
		return nil, fmt.Errorf("gvisor: %w", sandbox.ErrNoTerminal)
	}
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return nil, sandbox.ErrClosed
	}
	if b.dead.Load() {
		return nil, errDead
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := b.execs.Add(1)
	procFile := filepath.Join(b.dir, fmt.Sprintf("process-%d.json", n))
	args := wrapperArgs(b.spec.Syscalls.Profile, b.spec.Syscalls.Deny, c.Args)
	if err := writeJSON(procFile, process(b.spec, args, c.Env, c.Dir)); err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	p := &proc{box: b, done: make(chan struct{})}
	p.cmd = b.rt.runscCmd(context.Background(), b.state(), b.spec.Network.Mode, "exec", "--process", procFile, b.id)
	p.cmd.Stdin = c.Stdin
	p.cmd.Stdout, p.stdout = limit(c.Stdout, b.spec.Limits.OutputBytes)
	p.cmd.Stderr, p.stderr = limit(c.Stderr, b.spec.Limits.OutputBytes)
	p.before, _ = b.cg.Stats()
	if err := p.cmd.Start(); err != nil {
		_ = os.Remove(procFile) // best effort: destroy removes the whole bundle
		return nil, fmt.Errorf("gvisor: runsc exec: %w", err)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = b.spec.Limits.Timeout
	}
	if timeout > 0 {
		// Set before the timer exists: wait reads it once timedOut is set.
		p.timeout = timeout
		p.timer = time.AfterFunc(timeout, func() {
			p.timedOut.Store(true)
			b.killAll()
		})
	}
	go p.wait(procFile)
	return p, nil
}

// limit bounds w at n bytes, but an *os.File, which runsc exec is given
// as the process's own descriptor (sandbox.Cmd's stdio work as in
// os/exec): the caller may close its copy once Start returns (a pipe's
// write end), which a copy through a goroutine of ours would then write
// into, losing the output; whoever reads the other end bounds it, as
// under the process runtime.
func limit(w io.Writer, n int64) (io.Writer, *sandbox.LimitedWriter) {
	if _, file := w.(*os.File); w == nil || n <= 0 || file {
		return w, nil
	}
	lw := &sandbox.LimitedWriter{W: w, N: n}
	return lw, lw
}

// killAll kills every process in the container, the pause process too:
// gVisor cannot kill "a tree", so a timeout or SIGKILL ends the sandbox.
// Whatever runsc leaves on the host is then killed through the cgroup.
func (b *box) killAll() {
	b.dead.Store(true)
	if err := b.rt.control(b.state(), b.spec.Network.Mode, "kill", "--all", b.id, "KILL"); err != nil {
		// Nobody to tell here; Close kills through the cgroup again and
		// reports a failure then.
		_ = b.cg.Kill()
	}
}

func (b *box) Commit(ctx context.Context) ([]sandbox.Violation, error) {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return nil, sandbox.ErrClosed
	}
	return b.commit(ctx)
}

// commit applies the workspace and the state directories; ctx bounds the
// review of held changes.
func (b *box) commit(ctx context.Context) ([]sandbox.Violation, error) {
	b.commitMu.Lock()
	defer b.commitMu.Unlock()
	if b.spec.Throwaway {
		return nil, nil // nothing ever reaches the host
	}
	v, err := b.committer.Commit(ctx)
	if err != nil {
		err = fmt.Errorf("gvisor: commit: %w", err)
	}
	// State directories are written back within the limits only: each is
	// the sandboxed program's own, and nothing on the host runs from it.
	for i, sc := range b.stateCommitters {
		sv, serr := sc.Commit(ctx)
		v = append(v, sv...)
		if serr != nil {
			err = errors.Join(err, fmt.Errorf("gvisor: commit state directory %s: %w", b.spec.StateDirs[i], serr))
		}
	}
	return v, err
}

// Close kills the container, commits the workspace, and removes the
// container, the cgroup, the mounts and the bundle. Safe to call twice.
func (b *box) Close(ctx context.Context) ([]sandbox.Violation, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return b.closeRes, b.closeErr
	}
	b.closed = true
	b.dead.Store(true)
	if b.cg != nil {
		_ = b.cg.Kill() // stop writes before the final commit; destroy kills again and reports
	}
	var errs []error
	b.closeRes, errs = nil, nil
	if b.ws != nil {
		v, err := b.commit(ctx)
		b.closeRes = v
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := b.destroy(); err != nil {
		errs = append(errs, err)
	}
	b.closeErr = errors.Join(errs...)
	return b.closeRes, b.closeErr
}

// destroy releases everything create made, in reverse order.
func (b *box) destroy() error {
	var errs []error
	// Killing the cgroup ends the Sentry, the gofer and every stub: the
	// whole container. Its runsc state goes with the directory.
	// runsc also makes the group in the v1 hierarchies the cgroup
	// package does not manage (and, as nothing calls `runsc delete`,
	// never removes it): Remove takes it from every hierarchy.
	if b.cg != nil {
		if err := cgroup.Remove(b.cg.Name()); err != nil {
			errs = append(errs, err)
		}
	}
	if b.egress != nil {
		// Connections already accepted are their server's; the
		// forwarder's end of each went with the container.
		b.egress.wait()
	}
	if b.forwarder != nil {
		// It ends with the container; bounded all the same.
		select {
		case <-b.forwarderDone:
		case <-time.After(controlTimeout):
			_ = b.forwarder.Process.Kill()
			<-b.forwarderDone
		}
	}
	for _, so := range b.states {
		if err := so.unmount(); err != nil {
			errs = append(errs, err)
		}
	}
	if b.ws != nil {
		if err := b.ws.unmount(); err != nil {
			errs = append(errs, err)
		}
	}
	// Unmount anything runsc may have left under the bundle before
	// removing it, so RemoveAll never descends into a host mount.
	if err := owner.RemoveTree(b.dir); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		b.record.Release()
	}
	return errors.Join(errs...)
}

// state is the sandbox's runsc --root.
func (b *box) state() string { return filepath.Join(b.dir, "state") }

// proc is one `runsc exec`.
type proc struct {
	box            *box
	cmd            *exec.Cmd
	stdout, stderr *sandbox.LimitedWriter
	before         cgroup.Stats
	timer          *time.Timer
	timedOut       atomic.Bool
	timeout        time.Duration

	done chan struct{}
	exit sandbox.Exit
	err  error
}

func (p *proc) Pid() int { return p.cmd.Process.Pid }

// Signal forwards sig through runsc exec, which relays it to the process.
// SIGKILL cannot be relayed (it would kill runsc exec alone), so it kills
// the whole container.
func (p *proc) Signal(sig os.Signal) error {
	select {
	case <-p.done:
		return os.ErrProcessDone
	default:
	}
	if sig == syscall.SIGKILL {
		p.box.killAll()
		return nil
	}
	return p.cmd.Process.Signal(sig)
}

func (p *proc) Wait() (sandbox.Exit, error) {
	<-p.done
	return p.exit, p.err
}

func (p *proc) wait(procFile string) {
	defer close(p.done)
	defer func() { _ = os.Remove(procFile) }() // best effort: destroy removes the whole bundle
	err := p.cmd.Wait()
	if p.timer != nil {
		p.timer.Stop()
	}
	e := sandbox.Exit{}
	// ErrWaitDelay: runsc exec ended but a background child inside still
	// holds the output pipe; the exit status is known all the same.
	switch st := p.cmd.ProcessState; {
	case st == nil:
		p.err = fmt.Errorf("gvisor: runsc exec: %w", err)
	case !st.Success():
		ws := st.Sys().(syscall.WaitStatus)
		switch {
		case ws.Signaled():
			e.Code, e.Signal = -1, unix.SignalName(ws.Signal())
		case ws.ExitStatus() > 128 && ws.ExitStatus() <= 128+64:
			// runsc exec reports a process killed by signal N as 128+N.
			e.Code, e.Signal = -1, unix.SignalName(syscall.Signal(ws.ExitStatus()-128))
		default:
			e.Code = ws.ExitStatus()
		}
	}
	after, _ := p.box.cg.Stats()
	e.Usage = sandbox.Usage{MaxRSSBytes: after.MemoryMaxBytes, CPUMillis: after.CPUMillis - p.before.CPUMillis}
	failed := e.Code != 0 || e.Signal != ""
	full := ""
	if failed {
		full = p.box.filesFull()
	}
	switch {
	case p.timedOut.Load():
		e.Reason, e.Message = sandbox.ReasonTimeout, fmt.Sprintf("killed after the %v timeout", p.timeout)
	case after.OOMKills > p.before.OOMKills:
		e.Reason, e.Message = sandbox.ReasonMemory, fmt.Sprintf("memory limit of %d bytes exceeded", p.box.spec.Limits.MemoryBytes)
		p.box.dead.Store(!p.box.running())
	case failed && after.PidsMaxHits > p.before.PidsMaxHits:
		e.Reason, e.Message = sandbox.ReasonPids, fmt.Sprintf("process limit of %d exceeded", p.box.spec.Limits.Pids)
	case full != "":
		e.Reason = full
		if e.Reason == sandbox.ReasonDisk {
			e.Message = fmt.Sprintf("disk limit of %d bytes reached (/tmp, home or workspace writes)", p.box.spec.Limits.DiskBytes)
		} else {
			e.Message = fmt.Sprintf("file-count limit of %d entries reached (/tmp, home or workspace)", p.box.spec.Limits.Files)
		}
	case p.stdout != nil && p.stdout.Truncated() || p.stderr != nil && p.stderr.Truncated():
		e.Reason, e.Message = sandbox.ReasonOutput, fmt.Sprintf("output truncated at %d bytes", p.box.spec.Limits.OutputBytes)
	}
	p.exit = e
}

// running asks runsc whether the container still runs.
func (b *box) running() bool {
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	out, err := b.rt.runscCmd(ctx, b.state(), b.spec.Network.Mode, "state", b.id).Output()
	return err == nil && containsAny(string(out), `"status": "running"`)
}

// filesFull says which limit a scratch tmpfs (workspace changes, /tmp,
// home) ran out of: ReasonDisk, ReasonFiles, or "" for none.
func (b *box) filesFull() string {
	dirs := []string{b.ws.scratch, b.ws.tmp, b.ws.home}
	for _, so := range b.states {
		dirs = append(dirs, so.scratch)
	}
	for _, dir := range dirs {
		var st unix.Statfs_t
		switch {
		case unix.Statfs(dir, &st) != nil:
		case b.spec.Limits.DiskBytes > 0 && st.Bavail == 0:
			return sandbox.ReasonDisk
		case b.spec.Limits.Files > 0 && st.Ffree == 0:
			return sandbox.ReasonFiles
		}
	}
	return ""
}

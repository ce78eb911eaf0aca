package process

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/owner"
	"github.com/agentbox/agentbox/internal/sandbox/workspace"
)

// box is one process sandbox, seen from the supervisor.
type box struct {
	id   string
	spec sandbox.Spec
	info sandbox.Info
	// slot is the sandbox's uid slot (kept after it is freed: tests look
	// for processes of its uids); uidSlot holds it host-wide until
	// destroy.
	slot    int
	uidBase int // Options.UIDBase
	uidSlot *owner.Slot

	cg               cgroupGroup
	cgRecord         *owner.Entry // the cgroup, for whoever starts after we die
	upper, tmp, home *os.File     // detached tmpfs mounts (see host_linux.go)
	closers          []io.Closer
	initPid          int        // the init, in our pid namespace; 0 before adopt
	initFD           int        // pidfd of the init; guarded by fdMu once started
	fdMu             sync.Mutex // a timeout's killAll races with destroy closing initFD
	initStderr       *tailBuffer
	cfgW             *os.File      // the init's config pipe, until configure
	spare            bool          // the init was a spare (spare_linux.go)
	dispatching      bool          // dispatch runs (set once, by configure)
	waitDone         chan struct{} // closed when the init is reaped
	ctl              *net.UnixConn
	egressSock       *net.UnixConn   // until the init is ready
	egress           *egressListener // Network.Mode proxy only
	ready            chan message
	dead             chan struct{} // closed when the control socket ends
	killed           atomic.Bool   // we killed the sandbox on purpose
	nextID           atomic.Uint64
	sendMu           sync.Mutex
	mu               sync.Mutex
	// closersMu guards closers (the detached mounts among them) against
	// destroy while filesFull reads the mounts: a command may end as the
	// sandbox is closed.
	closersMu       sync.RWMutex
	procs           map[uint64]*proc
	closed          bool
	closeOnce       sync.Once
	closeViolations []sandbox.Violation
	closeErr        error
	commitMu        sync.Mutex
	committer       *workspace.Committer
	// The state directories' upper layers and commits (Spec.StateDirs).
	stateUppers     []*os.File
	stateCommitters []*workspace.Committer
}

var _ sandbox.EgressSandbox = (*box)(nil)

// Egress implements sandbox.EgressSandbox; nil without the proxy.
func (b *box) Egress() net.Listener {
	if b.egress == nil {
		return nil
	}
	return b.egress
}

func (b *box) ID() string         { return b.id }
func (b *box) Info() sandbox.Info { return b.info }
func (b *box) stderrTail() string {
	if b.initStderr == nil {
		return ""
	}
	return strings.TrimSpace(b.initStderr.String())
}

// dispatch routes the init's messages to the processes they are about.
// It ends, and marks the sandbox dead, when the init closes the socket
// (it exited or was killed).
func (b *box) dispatch() {
	defer close(b.dead)
	buf := make([]byte, maxReply)
	oob := make([]byte, unix.CmsgSpace(4*4))
	first := true
	for {
		n, oobn, flags, _, err := b.ctl.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		fds := parseRights(oob[:oobn])
		m, err := decodeMessage(buf[:n])
		if err == nil && flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			err = errors.New("oversized control packet")
		}
		if err != nil {
			closeAll(fds)
			b.killAll() // a confused init cannot be trusted with more work
			return
		}
		if first {
			first = false
			closeAll(fds)
			if m.Op != opReady {
				b.killAll()
				return
			}
			b.ready <- m
			continue
		}
		b.mu.Lock()
		p := b.procs[m.ID]
		b.mu.Unlock()
		if p == nil {
			closeAll(fds)
			continue
		}
		switch m.Op {
		case opStarted:
			fd := -1
			if len(fds) > 0 {
				fd = fds[0]
				closeAll(fds[1:])
			}
			if p.gotStarted { // a second "started" for one id: ignore it
				if fd >= 0 {
					_ = unix.Close(fd)
				}
				continue
			}
			p.gotStarted = true
			p.pidfd = fd
			p.started <- m
		case opExit:
			closeAll(fds)
			b.mu.Lock()
			delete(b.procs, m.ID) // a repeated exit finds nothing
			b.mu.Unlock()
			p.exitMsg = m
			close(p.exited)
		default:
			closeAll(fds)
		}
	}
}

func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd) // received, never used: nothing to lose
	}
}

// killAll ends every process of the sandbox, init included. The init goes
// first: it is PID 1 of the sandbox's pid namespace, so its death makes
// the kernel kill everything in the namespace, double-forked daemons and
// nested namespaces included, and fail every fork there from the moment
// it starts (zap_pid_ns_processes); the init is reaped only once the
// namespace is empty. Every process of the sandbox is in that namespace:
// the cgroup holds the init and what it starts, nothing else. The cgroup
// is then the check, and the backstop: whatever is still in it once the
// init is gone (or when the init could not be signalled) is killed
// through it (freeze → kill → thaw, or cgroup.kill). Freezing is not done
// when nothing is left: on cgroup v1 the first frozen group and the last
// thawed one each patch the kernel's text (the freezer's static key),
// which on a virtual machine cost more than the rest of a teardown.
func (b *box) killAll() {
	b.killed.Store(true)
	b.fdMu.Lock()
	defer b.fdMu.Unlock()
	// Best effort throughout: the cgroup check below catches what the
	// init's death did not take, and destroy reports a cgroup left behind.
	// An init already reaped emptied its namespace as it died (a second
	// killAll, from destroy after Close, finds it so).
	signalled := b.initReaped()
	switch {
	case signalled:
	case b.initFD >= 0:
		signalled = unix.PidfdSendSignal(b.initFD, unix.SIGKILL, nil, 0) == nil
	case b.initPid > 0:
		signalled = unix.Kill(b.initPid, unix.SIGKILL) == nil // not reaped yet: the pid is still its
	}
	if b.cg == nil {
		return
	}
	if signalled && b.waitDone != nil {
		t := time.NewTimer(initReapWait)
		select {
		case <-b.waitDone:
		case <-t.C:
		}
		t.Stop()
		if pids, err := b.cg.Pids(); err == nil && len(pids) == 0 {
			return
		}
	}
	_ = b.cg.Kill()
}

// initReaped reports whether the init has exited and been reaped.
func (b *box) initReaped() bool {
	if b.waitDone == nil {
		return false
	}
	select {
	case <-b.waitDone:
		return true
	default:
		return false
	}
}

// initReapWait bounds how long killAll waits for the killed init to be
// reaped before it kills through the cgroup. The init is reaped once its
// namespace is empty, which takes a few milliseconds unless a process is
// stuck in uninterruptible sleep.
const initReapWait = 2 * time.Second

// Start implements sandbox.Sandbox.
func (b *box) Start(ctx context.Context, c sandbox.Cmd) (sandbox.Process, error) {
	if len(c.Args) == 0 || c.Args[0] == "" {
		return nil, errors.New("process sandbox: empty command")
	}
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return nil, sandbox.ErrClosed
	}
	select {
	case <-b.dead:
		return nil, fmt.Errorf("process sandbox %s: %w (its init has exited)", b.id, sandbox.ErrClosed)
	default:
	}

	if c.TTY && !oneTerminal(c) {
		return nil, errors.New("process sandbox: a terminal command takes the terminal's *os.File as stdin, stdout and stderr")
	}
	p := &proc{
		b:       b,
		id:      b.nextID.Add(1),
		pidfd:   -1,
		started: make(chan message, 1),
		exited:  make(chan struct{}),
	}
	if err := p.setupStdio(c); err != nil {
		p.closeStdio()
		return nil, err
	}
	if b.cg != nil && b.countersMatter() {
		p.before, _ = b.cg.Stats()
	}
	b.mu.Lock()
	b.procs[p.id] = p
	b.mu.Unlock()

	m := message{Op: opStart, ID: p.id, Args: c.Args, Env: mergeEnv(b.spec.Env, c.Env), Dir: c.Dir, TTY: c.TTY}
	if m.Dir == "" {
		m.Dir = b.spec.WorkspaceDir
	}
	err := b.send(m, p.childFDs())
	p.closeChildEnds()
	if err != nil {
		p.closeStdio()
		return nil, fmt.Errorf("process sandbox: send command: %w", err)
	}

	var reply message
	select {
	case reply = <-p.started:
	case <-b.dead:
		p.closeStdio()
		return nil, fmt.Errorf("process sandbox %s: init exited: %w", b.id, sandbox.ErrClosed)
	case <-ctx.Done():
		// The command may start any moment now, with nobody to wait
		// for it: end the sandbox rather than leak a process.
		b.killAll()
		p.closeStdio()
		return nil, ctx.Err()
	}
	if reply.Error != "" {
		p.closeStdio()
		b.mu.Lock()
		delete(b.procs, p.id)
		b.mu.Unlock()
		if reply.NoCommand {
			return nil, fmt.Errorf("process sandbox: start %q: %w: %s", c.Args[0], sandbox.ErrNoCommand, reply.Error)
		}
		return nil, fmt.Errorf("process sandbox: start %q: %s", c.Args[0], reply.Error)
	}
	p.hostPid = hostPid(p.pidfd)
	p.startCopies()
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = b.spec.Limits.Timeout
	}
	p.ResetTimeout(timeout)
	return p, nil
}

// send writes one control packet with fds attached.
func (b *box) send(m message, fds []int) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(data) > maxPacket {
		return fmt.Errorf("command too large (%d bytes)", len(data))
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	b.sendMu.Lock()
	defer b.sendMu.Unlock()
	_, _, err = b.ctl.WriteMsgUnix(data, oob, nil)
	return err
}

// mergeEnv returns base overridden by extra, as sorted KEY=VALUE pairs.
func mergeEnv(base, extra map[string]string) []string {
	all := make(map[string]string, len(base)+len(extra))
	for k, v := range base {
		all[k] = v
	}
	for k, v := range extra {
		all[k] = v
	}
	out := make([]string, 0, len(all))
	for k, v := range all {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// hostPid reads the pid a pidfd refers to, in our pid namespace.
func hostPid(pidfd int) int {
	if pidfd < 0 {
		return 0
	}
	f, err := os.Open(fmt.Sprintf("/proc/self/fdinfo/%d", pidfd))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "Pid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// Commit implements sandbox.Sandbox.
func (b *box) Commit(ctx context.Context) ([]sandbox.Violation, error) {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return nil, sandbox.ErrClosed
	}
	return b.commit(ctx)
}

// commit applies the workspace; ctx bounds the review of held changes.
func (b *box) commit(ctx context.Context) ([]sandbox.Violation, error) {
	b.commitMu.Lock()
	defer b.commitMu.Unlock()
	if b.spec.Throwaway {
		return nil, nil // nothing ever reaches the host
	}
	if b.committer == nil {
		return nil, errors.New("process sandbox: no workspace to commit")
	}
	v, err := b.committer.Commit(ctx)
	if err != nil {
		return v, fmt.Errorf("process sandbox: commit workspace: %w", err)
	}
	for _, c := range b.stateCommitters {
		sv, serr := c.Commit(ctx)
		v = append(v, sv...)
		if serr != nil {
			err = errors.Join(err, fmt.Errorf("process sandbox: commit state directory %s: %w", c.Workspace, serr))
		}
	}
	return v, err
}

// Close implements sandbox.Sandbox.
func (b *box) Close(ctx context.Context) ([]sandbox.Violation, error) {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closed = true
		b.mu.Unlock()
		b.killAll()
		b.waitInit()
		b.closeViolations, b.closeErr = b.commit(ctx)
		if err := b.destroy(); err != nil {
			b.closeErr = errors.Join(b.closeErr, err)
		}
	})
	return b.closeViolations, b.closeErr
}

// waitInit waits (bounded) until the init is reaped and its socket closed.
func (b *box) waitInit() {
	if b.waitDone == nil {
		return
	}
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-b.waitDone:
	case <-t.C:
	}
	if b.ctl != nil {
		_ = b.ctl.Close() // ends dispatch if the init somehow survived
	}
	if !b.dispatching {
		return // nothing reads the socket: the init never got its config
	}
	select {
	case <-b.dead:
	case <-t.C:
	}
}

// destroy releases everything; it is also the cleanup of a failed Create.
// It reports a cgroup it could not remove, which would otherwise leak.
func (b *box) destroy() error {
	if b.initPid > 0 {
		b.killAll()
		b.waitInit()
	} else if b.ctl != nil {
		_ = b.ctl.Close()
	}
	if b.cfgW != nil {
		_ = b.cfgW.Close() // the init never got a config: it exits
		b.cfgW = nil
	}
	b.closersMu.Lock()
	for _, c := range b.closers {
		c.Close()
	}
	b.closers = nil
	b.upper, b.tmp, b.home, b.stateUppers = nil, nil, nil, nil // closed with closers
	b.closersMu.Unlock()
	if b.egress != nil {
		_ = b.egress.Close()
	}
	if b.egressSock != nil {
		_ = b.egressSock.Close()
		b.egressSock = nil
	}
	b.fdMu.Lock()
	if b.initFD >= 0 {
		_ = unix.Close(b.initFD) // a pidfd: closing it loses nothing
		b.initFD = -1
	}
	var err error
	if b.cg != nil {
		err = b.cg.Delete()
	}
	if err == nil {
		b.cgRecord.Release() // gone (or never made)
	}
	b.fdMu.Unlock()
	if b.uidSlot != nil {
		b.uidSlot.Release()
		b.uidSlot = nil
	}
	if err != nil {
		return fmt.Errorf("process sandbox: %w", err)
	}
	return nil
}

// countersMatter reports whether the cgroup's OOM and pids counters can
// decide a verdict; reading them costs a few file reads per command.
func (b *box) countersMatter() bool {
	return b.spec.Limits.MemoryBytes > 0 || b.spec.Limits.Pids > 0
}

// filesFull is the verdict of a failed command when a sandbox filesystem
// ran out of space (ReasonDisk) or of entries (ReasonFiles), with the
// message naming it; "" when none did.
func (b *box) filesFull() (reason, msg string) {
	b.closersMu.RLock()
	defer b.closersMu.RUnlock()
	for _, m := range b.scratch() {
		bytes, inodes, err := freeSpace(m.f)
		switch {
		case err != nil:
		case bytes < 8192:
			return sandbox.ReasonDisk, fmt.Sprintf("the %s disk limit was reached", m.name)
		case inodes == 0 && b.spec.Limits.Files > 0:
			return sandbox.ReasonFiles, fmt.Sprintf("the %s file-count limit of %d entries was reached", m.name, b.spec.Limits.Files)
		}
	}
	return "", ""
}

// scratchFS is one writable filesystem of the sandbox.
type scratchFS struct {
	name string
	f    *os.File
}

// scratch lists the sandbox's writable filesystems.
func (b *box) scratch() []scratchFS {
	var out []scratchFS
	for _, m := range []scratchFS{{"workspace", b.upper}, {"/tmp", b.tmp}, {"home", b.home}} {
		if m.f != nil {
			out = append(out, m)
		}
	}
	for i, f := range b.stateUppers {
		out = append(out, scratchFS{b.spec.StateDirs[i], f})
	}
	return out
}

// tailBuffer keeps the last few KiB of the init's stderr for error
// messages (a panic in the init shows up here).
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 4096 {
		t.buf = t.buf[len(t.buf)-4096:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

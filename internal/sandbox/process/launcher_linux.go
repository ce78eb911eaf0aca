package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/reexec"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// The launcher.
//
// A sandbox init is cloned into a new user namespace, and the Go runtime
// cannot clone a child into a new user namespace with vfork (the child
// waits for its parent to write its uid map, and a vfork parent is
// suspended until the child execs): os/exec then forks, copying the
// forking process's page tables, and every page the forking process
// writes afterwards faults once more (copy-on-write, with a TLB shootdown
// on each CPU the process runs on). Done by the daemon, whose heap is
// large and busy, that cost lands on the requests it serves: the page
// faults of every thread wait while the page tables are copied, and the
// faults after it slow down everything the daemon does next.
//
// So the daemon does not fork its inits itself. It starts a launcher
// once (its own binary re-executed as "agentbox-sandbox-launcher", with
// vfork, since no user namespace is involved), a small process that does
// nothing but start inits: the daemon sends it a start request with the
// init's config pipe, control socket and stderr, the launcher starts the
// init exactly as the daemon did (the same attributes: namespaces, uid
// and gid maps, credentials, Pdeathsig, Setsid, a pidfd), answers with the
// init's pid and pidfd, and reports when it has reaped it. The launcher
// holds no secret and nothing of the daemon's: an empty environment, /
// as its directory, its socket to the daemon and nothing else (every
// other descriptor of ours is close-on-exec), so an init gets from it
// what it got from the daemon: its two descriptors, its stderr and
// /dev/null. A sandbox never reaches the launcher: its socket is the
// daemon's, and the init, its child, is in namespaces of its own.
//
// Lifetimes: one launcher serves every runtime of the process (like the
// idmap cache, it is the process's). It dies with the daemon (Pdeathsig)
// and its inits die with it (Pdeathsig, as before with the daemon as their
// parent); it ends when its socket closes, which happens once it has had
// no init for launcherIdle (a daemon with a spare always has one), or at
// once when a runtime is closed and no init is left. A
// launcher that died is started again by the next start; the inits it had
// started are killed by its death, and the daemon sees them end through
// their pidfds.

// launcherArg0 turns this binary into the launcher.
const launcherArg0 = "agentbox-sandbox-launcher"

// fdLauncher is the launcher's socket to the daemon.
const fdLauncher = 3

// launchWait bounds a start request to the launcher.
const launchWait = 30 * time.Second

// launcherIdle is how long a launcher with no init left stays up.
const launcherIdle = 5 * time.Second

// initLauncher starts every init of the process.
var initLauncher launcher

func init() {
	reexec.Register(launcherArg0, runLauncher)
}

// launchMsg is one packet between the daemon and the launcher.
type launchMsg struct {
	Op string `json:"op"` // "start" (daemon), "started", "reaped" (launcher)
	ID uint64 `json:"id,omitempty"`
	// start
	NewNet  bool `json:"new_net,omitempty"`
	RootUID int  `json:"root_uid,omitempty"`
	UserUID int  `json:"user_uid,omitempty"`
	// started, reaped
	Pid   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
	// EPERM, EINVAL or ENOSPC from the clone: user namespaces refused.
	Userns bool `json:"userns,omitempty"`
}

// initAttr is how every init is started, by the launcher: in new
// namespaces (a network namespace of its own when newNet), as the uid
// slot's root, with its config pipe and control socket as fds 3 and 4.
func initAttr(newNet bool, rootUID, userUID int, pidfd *int) *syscall.SysProcAttr {
	flags := uintptr(syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
		syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS)
	if newNet {
		flags |= syscall.CLONE_NEWNET
	}
	ids := []syscall.SysProcIDMap{
		{ContainerID: 0, HostID: rootUID, Size: 1},
		{ContainerID: sandboxUID, HostID: userUID, Size: 1},
	}
	return &syscall.SysProcAttr{
		Cloneflags:                 flags,
		UidMappings:                ids,
		GidMappings:                ids,
		GidMappingsEnableSetgroups: true,
		// Required with a non-identity map: without it the child's
		// host uid 0 is unmapped inside and execve drops every
		// capability in the new user namespace.
		Credential: &syscall.Credential{Uid: 0, Gid: 0},
		Pdeathsig:  syscall.SIGKILL,
		Setsid:     true,
		PidFD:      pidfd,
	}
}

// runLauncher is the launcher's whole life: start inits on request until
// the daemon closes the socket.
func runLauncher() int {
	// Every init is forked from this thread, which lives as long as the
	// launcher: Pdeathsig is sent when the forking thread ends.
	runtime.LockOSThread()
	unix.CloseOnExec(fdLauncher)
	// Descriptors the daemon leaked to us (it may itself have inherited
	// some without O_CLOEXEC) must not reach an init.
	if err := unix.CloseRange(fdLauncher+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox launcher: close inherited descriptors:", err)
		return 1
	}
	f := os.NewFile(fdLauncher, "launcher")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox launcher:", err)
		return 1
	}
	conn := c.(*net.UnixConn)
	var sendMu sync.Mutex
	send := func(m launchMsg, fd int) {
		data, err := json.Marshal(m)
		if err != nil {
			return
		}
		var oob []byte
		if fd >= 0 {
			oob = unix.UnixRights(fd)
		}
		sendMu.Lock()
		defer sendMu.Unlock()
		// A failed write means the daemon is gone, and so are we soon.
		_, _, _ = conn.WriteMsgUnix(data, oob, nil)
	}
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(3*4))
	for {
		n, oobn, flags, _, err := conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return 0 // the daemon closed the socket: our inits die with us
		}
		fds := parseRights(oob[:oobn])
		var m launchMsg
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || json.Unmarshal(buf[:n], &m) != nil || m.Op != "start" || len(fds) != 3 {
			closeAll(fds)
			return 1 // only the daemon writes here: a confused one ends us
		}
		files := []*os.File{os.NewFile(uintptr(fds[0]), "config"), os.NewFile(uintptr(fds[1]), "control"), os.NewFile(uintptr(fds[2]), "stderr")}
		pidfd := -1
		// Detached on purpose: the init is a sandbox (or a spare) and
		// lives until the daemon ends it, not as long as this request.
		cmd := exec.CommandContext(context.Background(), "/proc/self/exe")
		cmd.Args = []string{initArg0}
		cmd.Env = initEnv // nothing from any environment, ever
		cmd.Dir = "/"
		cmd.Stderr = files[2]
		cmd.ExtraFiles = files[:2] // fdConfig, fdControl: nothing else
		cmd.SysProcAttr = initAttr(m.NewNet, m.RootUID, m.UserUID, &pidfd)
		err = cmd.Start()
		for _, f := range files {
			f.Close() // the init has its own
		}
		if err != nil {
			send(launchMsg{Op: "started", ID: m.ID, Error: err.Error(),
				Userns: errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC)}, -1)
			continue
		}
		send(launchMsg{Op: "started", ID: m.ID, Pid: cmd.Process.Pid}, pidfd)
		if pidfd >= 0 {
			_ = unix.Close(pidfd) // the daemon has its own now
		}
		// Reported after "started", which the daemon has read first.
		go func() {
			_ = cmd.Wait() // the init says how things ended to the daemon; this only reaps it
			send(launchMsg{Op: "reaped", Pid: cmd.Process.Pid}, -1)
		}()
	}
}

// launcher is the daemon's end of the launcher: the process running
// now, if any.
type launcher struct {
	mu     sync.Mutex
	cur    *launcherProc
	nextID uint64
	idle   *time.Timer // ends cur once it has had no init for launcherIdle
}

// launcherProc is one launcher process.
type launcherProc struct {
	conn    *net.UnixConn
	cmd     *exec.Cmd
	gone    chan struct{} // closed once the process is reaped and read is done
	exited  chan struct{} // closed once the process is reaped
	sendMu  sync.Mutex
	pending map[uint64]chan launchResult // guarded by launcher.mu
	reaped  map[int]chan struct{}        // waitDone of its live inits, by pid; guarded by launcher.mu
}

type launchResult struct {
	m      launchMsg
	pidfd  int
	reaped chan struct{}
}

// start starts an init through the launcher (started first if need be)
// and returns its pid, pidfd and a channel closed once it is reaped. The
// descriptors are the init's: its config pipe, control socket and stderr.
func (l *launcher) start(newNet bool, rootUID, userUID int, cfgR, ctl, stderr *os.File) (pid, pidfd int, reaped chan struct{}, err error) {
	l.mu.Lock()
	if l.cur == nil {
		if err := l.spawnLocked(); err != nil {
			l.mu.Unlock()
			return 0, -1, nil, err
		}
	}
	lp := l.cur
	l.nextID++
	id := l.nextID
	res := make(chan launchResult, 1)
	lp.pending[id] = res
	l.mu.Unlock()

	data, err := json.Marshal(launchMsg{Op: "start", ID: id, NewNet: newNet, RootUID: rootUID, UserUID: userUID})
	if err == nil {
		lp.sendMu.Lock()
		_, _, err = lp.conn.WriteMsgUnix(data, unix.UnixRights(int(cfgR.Fd()), int(ctl.Fd()), int(stderr.Fd())), nil)
		lp.sendMu.Unlock()
	}
	if err != nil {
		l.forget(lp, id)
		return 0, -1, nil, fmt.Errorf("start sandbox init: launcher: %w", err)
	}
	t := time.NewTimer(launchWait)
	defer t.Stop()
	var r launchResult
	select {
	case r = <-res:
	case <-lp.gone:
		// Its answer, if it sent one, was read before it was reaped.
		select {
		case r = <-res:
		default:
			l.forget(lp, id)
			return 0, -1, nil, errors.New("start sandbox init: the launcher exited")
		}
	case <-t.C:
		l.forget(lp, id)
		return 0, -1, nil, fmt.Errorf("start sandbox init: no answer from the launcher in %s", launchWait)
	}
	if r.m.Error != "" {
		if r.m.Userns {
			return 0, -1, nil, fmt.Errorf("%w: user namespaces: %s", sandbox.ErrUnenforceable, r.m.Error)
		}
		return 0, -1, nil, fmt.Errorf("start sandbox init: %s", r.m.Error)
	}
	return r.m.Pid, r.pidfd, r.reaped, nil
}

func (l *launcher) forget(lp *launcherProc, id uint64) {
	l.mu.Lock()
	delete(lp.pending, id)
	l.stopIfIdleLocked()
	l.mu.Unlock()
}

// spawnLocked starts a launcher process.
func (l *launcher) spawnLocked() error {
	if err := reexec.Check(launcherArg0); err != nil {
		return err
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("launcher socket: %w", err)
	}
	child := os.NewFile(uintptr(pair[1]), "launcher")
	defer child.Close()
	parent := os.NewFile(uintptr(pair[0]), "launcher")
	c, err := net.FileConn(parent)
	parent.Close()
	if err != nil {
		return fmt.Errorf("launcher socket: %w", err)
	}
	// /proc/self/exe, as for the init, and detached on purpose: the
	// launcher lives as long as the inits it starts, not this call.
	cmd := exec.CommandContext(context.Background(), "/proc/self/exe")
	cmd.Args = []string{launcherArg0}
	cmd.Env = initEnv // nothing from the daemon's environment
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{child} // fdLauncher: nothing else
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setsid: true}
	// Started and reaped on a thread of its own, held for the launcher's
	// whole life: its Pdeathsig fires when the thread that started it
	// ends, and another thread of ours could end any time (a goroutine
	// that exits while locked to its thread takes the thread with it),
	// which would end every sandbox at once.
	started, exited := make(chan error, 1), make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine, after the launcher
		err := cmd.Start()
		started <- err
		if err == nil {
			_ = cmd.Wait() // only reaps it: read notices it go on its socket
		}
		close(exited)
	}()
	if err := <-started; err != nil {
		c.Close()
		return fmt.Errorf("start sandbox launcher: %w", err)
	}
	lp := &launcherProc{conn: c.(*net.UnixConn), cmd: cmd, gone: make(chan struct{}), exited: exited,
		pending: map[uint64]chan launchResult{}, reaped: map[int]chan struct{}{}}
	l.cur = lp
	go l.read(lp)
	return nil
}

// read routes a launcher's packets until it exits, then forgets it: the
// inits it started and had not reaped die with it (Pdeathsig), and each
// is seen to end through its pidfd (watchExit).
func (l *launcher) read(lp *launcherProc) {
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, flags, _, err := lp.conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			break
		}
		fds := parseRights(oob[:oobn])
		var m launchMsg
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || json.Unmarshal(buf[:n], &m) != nil {
			closeAll(fds)
			break
		}
		l.mu.Lock()
		switch m.Op {
		case "started":
			r := launchResult{m: m, pidfd: -1}
			if len(fds) > 0 {
				r.pidfd = fds[0]
				closeAll(fds[1:])
			}
			if m.Error == "" {
				r.reaped = make(chan struct{})
				lp.reaped[m.Pid] = r.reaped
			}
			if res := lp.pending[m.ID]; res != nil {
				delete(lp.pending, m.ID)
				res <- r
			} else if r.pidfd >= 0 {
				// Its Create gave up waiting: the init is nobody's.
				_ = unix.PidfdSendSignal(r.pidfd, unix.SIGKILL, nil, 0)
				_ = unix.Close(r.pidfd)
			}
		case "reaped":
			closeAll(fds)
			if ch := lp.reaped[m.Pid]; ch != nil {
				close(ch)
				delete(lp.reaped, m.Pid)
			}
			l.stopIfIdleLocked()
		default:
			closeAll(fds)
		}
		l.mu.Unlock()
	}
	_ = lp.conn.Close()       // it is gone, or sent nonsense: nothing more to read
	_ = lp.cmd.Process.Kill() // gone already, or a launcher that sent nonsense
	<-lp.exited
	l.mu.Lock()
	if l.cur == lp {
		l.cur = nil
	}
	orphans := lp.reaped
	lp.reaped = map[int]chan struct{}{}
	l.mu.Unlock()
	close(lp.gone)
	for pid, ch := range orphans {
		go watchExit(pid, ch)
	}
}

// stopIfIdleLocked ends the launcher once it has had no init (and no
// start in flight) for launcherIdle; a start after that starts a new one.
func (l *launcher) stopIfIdleLocked() {
	lp := l.cur
	if lp == nil || len(lp.reaped) > 0 || len(lp.pending) > 0 {
		return
	}
	if l.idle != nil {
		l.idle.Stop()
	}
	l.idle = time.AfterFunc(launcherIdle, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.cur == lp && len(lp.reaped) == 0 && len(lp.pending) == 0 {
			_ = lp.conn.CloseWrite() // the launcher reads EOF and exits; read sees it go
			l.cur = nil
		}
	})
}

// stopIdle ends the launcher now if it has no init left (Runtime.Close:
// the daemon is shutting down, or a test is done), and waits (bounded) for
// it to be gone.
func (l *launcher) stopIdle() {
	l.mu.Lock()
	lp := l.cur
	idle := lp != nil && len(lp.reaped) == 0 && len(lp.pending) == 0
	if idle {
		_ = lp.conn.CloseWrite() // the launcher reads EOF and exits; read sees it go
		l.cur = nil
	}
	l.mu.Unlock()
	if !idle {
		return
	}
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-lp.gone:
	case <-t.C:
	}
}

// watchExit closes ch once the process pid has exited (its pidfd polls
// readable), for an init whose launcher died before reaping it.
func watchExit(pid int, ch chan struct{}) {
	defer close(ch)
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // gone already
	}
	defer func() { _ = unix.Close(fd) }() // a pidfd: closing it loses nothing
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err == nil || !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// copyStderr keeps what an init writes to stderr in t until it closes,
// then closes done.
func copyStderr(r *os.File, t *tailBuffer, done chan struct{}) {
	_, _ = io.Copy(t, r) // ends at EOF: the init has exited
	r.Close()
	close(done)
}

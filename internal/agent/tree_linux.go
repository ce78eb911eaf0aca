package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/reexec"
	"github.com/agentbox/agentbox/internal/residency"
)

// Every agent process started on the host (an unsandboxed Proc, codex's
// app-server, opencode's server, a mock agent's shell command) runs under
// a supervisor: this binary re-executed with argv[0] supervisorArg0. The
// supervisor is a child subreaper (PR_SET_CHILD_SUBREAPER), so every
// descendant of the agent that is orphaned — by a double fork, after
// setsid, whatever its process group — is reparented to it and stays in
// its tree. It ends that whole tree, SIGKILL to every descendant until
// none is left, when:
//   - the agent process itself exits (what it left behind dies with it);
//   - the daemon asks (Tree.Signal with SIGKILL, or closes its end);
//   - the daemon dies: its end of the control socket closes, which the
//     supervisor sees as EOF whichever way the daemon went; a parent-death
//     signal (SIGHUP) is the second path (checked against getppid, since
//     Go ties it to the forking thread, not the process).
//
// The supervisor exits as the agent did (the same code, or the same
// signal), so callers read an exit status as if they ran the agent
// directly. Subreapers need no privilege; without them (or without /proc
// to find descendants) StartTree refuses, naming the missing mechanism.
const supervisorArg0 = "agentbox-agent-supervisor"

// deathSignal is the supervisor's parent-death signal: one it can catch,
// so it can end the tree before it goes.
const deathSignal = syscall.SIGHUP

// init registers the supervisor, which this binary becomes when main
// calls reexec.Init.
func init() {
	reexec.Register(supervisorArg0, func() int {
		// The agent is forked on this thread, and its parent-death
		// signal is tied to it: it must never exit before the process.
		runtime.LockOSThread()
		// Named for ps (the executable's name is "exe").
		name := []byte("agentbox-tree\x00")
		_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0)
		return supervise(os.Args[1:])
	})
}

// Tree is a process started with StartTree: the supervisor (the Cmd's
// process) and the agent's tree under it.
type Tree struct {
	cmd *exec.Cmd
	pid int // the agent's

	mu  sync.Mutex
	ctl *os.File // nil once closed
}

// startReplyWait bounds how long StartTree waits for the supervisor to
// say it started the agent.
const startReplyWait = 30 * time.Second

// StartTree starts cmd (built with exec.Command or exec.CommandContext,
// not started, without SysProcAttr) under the process-tree supervisor and
// returns once the agent runs. The caller waits with Tree.Wait, not
// cmd.Wait. When cmd has a context, its end kills the whole tree.
func StartTree(cmd *exec.Cmd) (*Tree, error) {
	if cmd.Err != nil {
		return nil, cmd.Err
	}
	if cmd.SysProcAttr != nil {
		return nil, errors.New("agent: StartTree sets SysProcAttr itself")
	}
	if err := reexec.Check(supervisorArg0); err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent: supervisor socket: %w", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		_ = unix.Close(fds[0])
		_ = unix.Close(fds[1])
		return nil, fmt.Errorf("agent: supervisor socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "supervisor"), os.NewFile(uintptr(fds[1]), "supervisor")
	defer theirs.Close()
	t := &Tree{cmd: cmd, ctl: ours}
	fd := 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, theirs)
	cmd.Args = append([]string{supervisorArg0, strconv.Itoa(fd), cmd.Path}, cmd.Args...)
	// /proc/self/exe: this very binary, even if the file was replaced.
	cmd.Path = "/proc/self/exe"
	// A new session: no terminal signal of the daemon's reaches the tree;
	// the daemon ends it through the control socket.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: deathSignal}
	if cmd.Cancel != nil {
		cmd.Cancel = func() error { return t.Signal(syscall.SIGKILL) }
	}
	if err := cmd.Start(); err != nil {
		ours.Close()
		return nil, err
	}
	theirs.Close()
	_ = ours.SetReadDeadline(time.Now().Add(startReplyWait))
	buf := make([]byte, 4096)
	n, err := ours.Read(buf)
	_ = ours.SetReadDeadline(time.Time{})
	reply := string(buf[:max(n, 0)])
	if pid, ok := strings.CutPrefix(reply, "ok "); ok && err == nil {
		t.pid, _ = strconv.Atoi(pid)
		return t, nil
	}
	t.closeCtl()
	_ = cmd.Wait()
	switch {
	case strings.HasPrefix(reply, "err "):
		return nil, errors.New(strings.TrimPrefix(reply, "err "))
	case err != nil:
		return nil, fmt.Errorf("agent: process supervisor: %w", err)
	}
	return nil, fmt.Errorf("agent: process supervisor: unexpected reply %q", reply)
}

// Pid is the agent process's pid (not the supervisor's).
func (t *Tree) Pid() int { return t.pid }

// Signal sends sig to every process of the tree: the agent and all its
// descendants. SIGKILL ends the tree for good.
func (t *Tree) Signal(sig syscall.Signal) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctl == nil {
		return os.ErrProcessDone
	}
	if _, err := t.ctl.Write([]byte{byte(sig)}); err != nil {
		return fmt.Errorf("agent: signal the process tree: %w", err)
	}
	return nil
}

// Wait waits for the supervisor, which exits once the agent has and no
// process of its tree is left; cmd.ProcessState is the agent's status.
func (t *Tree) Wait() error {
	err := t.cmd.Wait()
	t.closeCtl()
	return err
}

func (t *Tree) closeCtl() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctl != nil {
		t.ctl.Close()
		t.ctl = nil
	}
}

// supervise is the supervisor's main: args are the control socket's
// descriptor, the agent's path and its argv.
func supervise(args []string) int {
	if len(args) < 3 {
		fmt.Fprintln(os.Stderr, "agentbox: process supervisor: bad arguments")
		return 127
	}
	fd, err := strconv.Atoi(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentbox: process supervisor: bad arguments")
		return 127
	}
	unix.CloseOnExec(fd)
	ctl := os.NewFile(uintptr(fd), "control")
	fail := func(format string, a ...any) int {
		_, _ = ctl.Write([]byte("err agent: " + fmt.Sprintf(format, a...)))
		return 127
	}
	ppid := os.Getppid()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail("cannot keep the agent's processes together: the child subreaper (PR_SET_CHILD_SUBREAPER) is missing: %v", err)
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return fail("cannot find the agent's processes: /proc is missing: %v", err)
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGCHLD, deathSignal, syscall.SIGTERM, syscall.SIGINT)
	pid, err := syscall.ForkExec(args[1], args[2:], &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		// Its own process group, as agents had before; Pdeathsig ends
		// it should the supervisor itself be killed.
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return fail("start %s: %v", args[1], err)
	}
	// The supervisor holds none of the agent's stdio open: readers see
	// EOF when the tree is gone, and a writer EPIPE once the agent closed
	// its stdin. Before the "ok": the daemon may write at once, and until
	// these are replaced the supervisor's copy of the stdin pipe took the
	// write of an agent that had closed its own (TestFailed, 1 run in 9).
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		for i := range 3 {
			_ = unix.Dup3(int(null.Fd()), i, 0)
		}
		null.Close()
	}
	if _, err := ctl.Write([]byte("ok " + strconv.Itoa(pid))); err != nil {
		killTree()
		return 127
	}
	// The supervisor lives as long as its agent, one per session: what
	// its start mapped of this binary (every package's init ran) goes,
	// and what it goes on using comes back (internal/residency).
	_, _ = residency.ReleaseImage()

	cmds := make(chan byte)
	go func() {
		defer close(cmds)
		b := make([]byte, 16)
		for {
			n, err := ctl.Read(b)
			if err != nil || n == 0 {
				return
			}
			for _, c := range b[:n] {
				cmds <- c
			}
		}
	}()
	for {
		select {
		case c, ok := <-cmds:
			if !ok { // the daemon closed its end, or died
				killTree()
				return 128 + int(syscall.SIGKILL)
			}
			signalTree(syscall.Signal(c))
		case s := <-sigs:
			switch s {
			case syscall.SIGCHLD:
				if ws, done := reap(pid); done {
					killTree()
					return exitAs(ws)
				}
			case deathSignal:
				if os.Getppid() != ppid {
					killTree()
					return 128 + int(syscall.SIGKILL)
				}
			default:
				signalTree(s.(syscall.Signal))
			}
		}
	}
}

// reap collects exited children; done says the agent was one of them.
func reap(agent int) (status syscall.WaitStatus, done bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return status, done
		}
		if pid == agent {
			status, done = ws, true
		}
	}
}

// signalTree sends sig to every live descendant.
func signalTree(sig syscall.Signal) {
	for _, pid := range descendants() {
		_ = syscall.Kill(pid, sig)
	}
}

// killTree kills every descendant, again and again until none is alive:
// a process forked before its parent died is reparented here and found
// on the next round. A process that will not die (stuck in the kernel)
// is given up on after a bound.
func killTree() {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		left := descendants()
		if len(left) == 0 {
			break
		}
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		reap(0)
		time.Sleep(time.Millisecond)
	}
	reap(0)
}

// descendants lists the live (not yet exited) descendants of this
// process, read from /proc.
func descendants() []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name may hold anything: fields follow the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	queue := []int{os.Getpid()}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// exitAs exits the supervisor the way the agent ended: with its code, or
// killed by the same signal (without a core dump), so that the daemon's
// exec.Cmd reports the agent's own status.
func exitAs(ws syscall.WaitStatus) int {
	if !ws.Signaled() {
		return ws.ExitStatus()
	}
	sig := ws.Signal()
	_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	signal.Reset()
	// The Go runtime's own handlers (for SIGSEGV and the like) too: the
	// default action is what kills.
	def := kernelSigaction{}
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&def)), 0, 8, 0, 0)
	var set unix.Sigset_t
	set.Val[(int(sig)-1)/64] |= 1 << ((uint(sig) - 1) % 64)
	_ = unix.PthreadSigmask(unix.SIG_UNBLOCK, &set, nil)
	_ = unix.Tgkill(os.Getpid(), unix.Gettid(), sig)
	time.Sleep(100 * time.Millisecond) // the signal is delivered on return to user space; this is a fallback
	return 128 + int(sig)
}

// kernelSigaction is the kernel's struct sigaction (the same on amd64 and
// arm64).
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

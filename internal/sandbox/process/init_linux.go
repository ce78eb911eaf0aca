package process

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/reexec"
)

// init registers the sandbox's init and the user-namespace helper, which
// this binary becomes when main calls reexec.Init.
func init() {
	reexec.Register(initArg0, func() int {
		// Every fork of a workload happens on this thread, so per-thread
		// state (the capability bounding set) set here is what they
		// inherit, whatever else the Go runtime does with threads.
		runtime.LockOSThread()
		return runInit()
	})
	reexec.Register(usernsArg0, runUsernsHelper)
}

// sandboxInit is the init's state: PID 1 of the sandbox's pid namespace.
type sandboxInit struct {
	ctl *net.UnixConn
	// running maps pids of started commands to their ids.
	running map[int]uint64
	// sigchld is notified of SIGCHLD (asked for as the init starts).
	sigchld chan os.Signal
}

// initFail reports a setup failure to the supervisor; missing names the
// mechanism when the failure means the policy cannot be enforced.
type initFail struct {
	missing string
	err     error
}

func (f *initFail) Error() string { return f.err.Error() }

func runInit() int {
	resetIgnoredSignals()
	for _, fd := range []int{fdConfig, fdControl} {
		unix.CloseOnExec(fd)
	}
	// Descriptors the daemon leaked to us (it may itself have inherited
	// some without O_CLOEXEC) must not reach a command. Done first: a
	// spare may wait long for its config.
	if err := unix.CloseRange(fdControl+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox init: close inherited descriptors:", err)
		return 1
	}
	// Before anything else starts a thread (see dropBoundingSet); a
	// failure is reported once the config has come.
	capErr := dropBoundingSet()
	ctlFile := os.NewFile(fdControl, "control")
	conn, err := net.FileConn(ctlFile)
	ctlFile.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox init: control socket:", err)
		return 1
	}
	in := &sandboxInit{ctl: conn.(*net.UnixConn), running: map[int]uint64{}}
	// Asked for now, not once the sandbox is up: the runtime's first
	// Notify starts a thread of its own, which would otherwise delay the
	// first command. Nothing runs here that could send SIGCHLD until a
	// command is started, and SIGCHLD's disposition stays the runtime's.
	in.sigchld = make(chan os.Signal, 1)
	signal.Notify(in.sigchld, syscall.SIGCHLD)

	// The part of the root no policy changes is built now, before the
	// config: a spare has it ready when a Create hands it one. A failure
	// is reported once the config has come, as any other of the setup.
	prepErr := prepareRoot()
	warmDecoders()

	// A spare waits here, with no policy applied, until a Create hands it
	// one; a supervisor that goes away first closes the pipe empty.
	cfgFile := os.NewFile(fdConfig, "config")
	data, err := io.ReadAll(io.LimitReader(cfgFile, maxPacket))
	cfgFile.Close()
	var cfg initConfig
	if err == nil {
		err = json.Unmarshal(data, &cfg)
	}
	if err != nil {
		in.reply(message{Op: opReady, Error: "read config: " + err.Error()}, -1)
		return 1
	}
	want := len(cfg.Mounts)
	if cfg.EgressPort > 0 {
		want++
	}
	fds, err := in.receiveFDs(want)
	if err != nil {
		in.reply(message{Op: opReady, Error: "receive mounts: " + err.Error()}, -1)
		return 1
	}
	cfg.mountFDs = fds[:len(cfg.Mounts)]
	if cfg.EgressPort > 0 {
		cfg.EgressFD = fds[len(cfg.Mounts)]
	}

	if capErr != nil {
		in.reply(message{Op: opReady, Error: capErr.Error(), Missing: "capabilities"}, -1)
		return 1
	}
	if prepErr != nil {
		in.reply(message{Op: opReady, Error: "prepare the root: " + prepErr.Error()}, -1)
		return 1
	}
	mech, degraded, err := setup(&cfg)
	if err != nil {
		m := message{Op: opReady, Error: err.Error()}
		var f *initFail
		if errors.As(err, &f) {
			m.Missing = f.missing
		}
		in.reply(m, -1)
		return 1
	}
	if cfg.EgressPort > 0 {
		if err := serveEgress(cfg.EgressPort, cfg.EgressFD); err != nil {
			in.reply(message{Op: opReady, Error: "egress proxy: " + err.Error(), Missing: "egress-proxy"}, -1)
			return 1
		}
		mech = append(mech, "egress-proxy:127.0.0.1:"+strconv.Itoa(cfg.EgressPort))
	}
	in.reply(message{Op: opReady, Mechanisms: mech, Degraded: degraded}, -1)
	in.serve()
	return 0
}

// warmDecoders builds encoding/json's per-type state for the config and
// the control packets (it caches it on first use), and with it faults in
// the code that does so: done before the config, that is work the
// sandbox's start does not wait for. It reads and writes nothing.
func warmDecoders() {
	var cfg initConfig
	_ = json.Unmarshal([]byte(`{"mounts":[{}],"overlay":{},"state_overlays":[{}],"syscalls":{}}`), &cfg) // a fixed, valid document
	_, _ = decodeMessage([]byte(`{"op":"start","args":["a"],"env":["a=b"]}`))                            // likewise
	_, _ = json.Marshal(message{Op: opReady, Mechanisms: []string{"a"}})                                 // a plain struct: cannot fail
}

// reply sends one packet to the supervisor, with fd attached when >= 0.
func (in *sandboxInit) reply(m message, fd int) {
	data, err := json.Marshal(m)
	if err != nil {
		return
	}
	for len(data) > maxReply && len(m.Error) > 64 {
		// Only an error can be long (it may quote paths): shorten it
		// until the packet fits the supervisor's buffer.
		m.Error = m.Error[:len(m.Error)/2] + " [truncated]"
		if data, err = json.Marshal(m); err != nil {
			return
		}
	}
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	// A failed write means the supervisor is gone; serve sees that on its
	// next read and ends the sandbox.
	_, _, _ = in.ctl.WriteMsgUnix(data, oob, nil)
}

// receiveFDs reads "fds" packets until it has n descriptors, the
// config's mounts and egress socket, in order.
func (in *sandboxInit) receiveFDs(n int) ([]int, error) {
	fds := make([]int, 0, n)
	buf := make([]byte, 512)
	oob := make([]byte, unix.CmsgSpace(fdBatch*4))
	for len(fds) < n {
		k, oobn, flags, _, err := in.ctl.ReadMsgUnix(buf, oob)
		if err != nil {
			return nil, err
		}
		got := parseRights(oob[:oobn])
		for _, fd := range got {
			unix.CloseOnExec(fd)
		}
		fds = append(fds, got...)
		if k == 0 {
			return nil, errors.New("control socket closed")
		}
		if flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0 || len(got) == 0 {
			return nil, errors.New("malformed descriptor packet")
		}
		m, err := decodeMessage(buf[:k])
		if err != nil {
			return nil, fmt.Errorf("a packet before the mounts: %w", err)
		}
		if m.Op != opFDs {
			return nil, fmt.Errorf("unexpected packet %v before the mounts", m.Op)
		}
	}
	if len(fds) != n {
		return nil, fmt.Errorf("%d descriptors for %d mounts", len(fds), n)
	}
	return fds, nil
}

// request is a start packet with its descriptors.
type request struct {
	m   message
	fds []int
}

// serve runs commands until the supervisor goes away. Starting, reaping and
// replying all happen on this goroutine, so the pid table needs no lock
// and a command's "started" always precedes its "exit".
func (in *sandboxInit) serve() {
	reqs := make(chan request)
	go in.readRequests(reqs)
	for {
		select {
		case r, ok := <-reqs:
			if !ok {
				// The supervisor closed the socket: end the sandbox.
				// Exiting PID 1 kills everything in the namespace.
				return
			}
			in.start(r)
		case <-in.sigchld:
			in.reap()
		}
	}
}

func (in *sandboxInit) readRequests(out chan<- request) {
	defer close(out)
	buf := make([]byte, maxPacket)
	oob := make([]byte, unix.CmsgSpace(3*4))
	for {
		n, oobn, flags, _, err := in.ctl.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		fds := parseRights(oob[:oobn])
		if flags&unix.MSG_CTRUNC != 0 {
			closeAll(fds)
			return
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
		}
		m, err := decodeMessage(buf[:n])
		if err != nil || m.Op != opStart {
			closeAll(fds)
			return
		}
		out <- request{m: m, fds: fds}
	}
}

// start forks one command as the sandbox user.
func (in *sandboxInit) start(r request) {
	defer closeAll(r.fds)
	fail := func(err error) {
		in.reply(message{Op: opStarted, ID: r.m.ID, Error: err.Error(), NoCommand: errors.Is(err, errNoCommand) || errors.Is(err, syscall.ENOENT)}, -1)
	}
	if len(r.fds) != 3 || len(r.m.Args) == 0 {
		fail(errors.New("malformed start request"))
		return
	}
	path, err := lookPath(r.m.Args[0], r.m.Env)
	if err != nil {
		fail(err)
		return
	}
	pidfd := -1
	pid, err := syscall.ForkExec(path, r.m.Args, &syscall.ProcAttr{
		Dir:   r.m.Dir,
		Env:   r.m.Env,
		Files: []uintptr{uintptr(r.fds[0]), uintptr(r.fds[1]), uintptr(r.fds[2])},
		Sys: &syscall.SysProcAttr{
			// setgroups([]) + setgid + setuid to an unprivileged id
			// clears every capability; a new session keeps the
			// command away from any terminal of ours (TIOCSTI).
			Credential: &syscall.Credential{Uid: sandboxUID, Gid: sandboxUID, Groups: []uint32{}},
			Setsid:     true,
			// With a terminal, the command's stdin (descriptor 0 in
			// the child) becomes the new session's controlling
			// terminal (TIOCSCTTY), so job control and ^C work.
			Setctty: r.m.TTY,
			Ctty:    0,
			PidFD:   &pidfd,
		},
	})
	if err != nil {
		fail(fmt.Errorf("%s: %w", r.m.Args[0], err))
		return
	}
	in.running[pid] = r.m.ID
	in.reply(message{Op: opStarted, ID: r.m.ID, Pid: pid}, pidfd)
	if pidfd >= 0 {
		_ = unix.Close(pidfd) // sent to the supervisor already; ours loses nothing
	}
}

// reap collects every exited child: started commands are reported,
// orphans that were reparented to us are just reaped.
func (in *sandboxInit) reap() {
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, &ru)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		id, ok := in.running[pid]
		if !ok {
			continue
		}
		delete(in.running, pid)
		m := message{Op: opExit, ID: id, Pid: pid,
			MaxRSSBytes: ru.Maxrss * 1024,
			CPUMillis:   (ru.Utime.Nano() + ru.Stime.Nano()) / 1e6,
		}
		if ws.Signaled() {
			m.Signal = int(ws.Signal())
			m.Code = -1
		} else {
			m.Code = ws.ExitStatus()
		}
		in.reply(m, -1)
	}
}

// lookPath resolves name in the command's PATH, inside the sandbox.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, errNoCommand)
}

// errNoCommand: lookPath found no such program.
var errNoCommand = errors.New("executable file not found in $PATH")

// kernelSigaction is the kernel's struct sigaction (the same on amd64 and
// arm64).
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// resetIgnoredSignals sets every signal the init inherited as ignored back
// to its default: an ignored disposition survives fork and exec, so it
// would reach every command. (A cgo build's runtime, such as the race
// detector's, starts with some real-time signals ignored.)
func resetIgnoredSignals() {
	const sigIgn = 1
	for sig := 1; sig <= 64; sig++ {
		if sig == int(unix.SIGKILL) || sig == int(unix.SIGSTOP) {
			continue
		}
		var old kernelSigaction
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 || old.handler != sigIgn {
			continue
		}
		def := kernelSigaction{}
		_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&def)), 0, 8, 0, 0)
	}
}

package process

import (
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/reexec"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/cgroup"
	"github.com/agentbox/agentbox/internal/sandbox/owner"
)

// Spare inits.
//
// A cold Create spends about 1.8 ms starting the init in its new
// namespaces and 2.5 ms in the Go start-up of the re-executed binary before
// the init can read its config. Neither depends on the policy, so the
// runtime can do both ahead of time: a spare is an init started exactly as
// a cold Create starts one (startInit, the same code), parked on its config
// pipe with no policy applied and nothing but its config pipe and control
// socket from the daemon. A Create that finds a spare adopts it and goes on
// as a cold Create does (configure: cgroup, config, mounts over the control
// socket, then the init builds the root and applies Landlock and seccomp),
// so a sandbox made from a spare and a cold one differ only in when their
// init started. A spare is handed out once, never back: a sandbox that
// fails to build, or ends, takes its init with it.
//
// What is fixed when the init is cloned decides which requests a spare may
// serve: its uid map (the uid slot it holds, not the policy) and its
// namespaces. Every spare has a network namespace of its own, so it serves
// network modes none and proxy; a request for the host's network starts
// cold. A spare also sees the host's mount tree as the clone copied it (the
// minimal root binds /usr and a few /etc files from it): it is discarded
// when older than spareMaxAge, which bounds how stale that copy can be.
//
// A spare is the runtime's: Close ends every spare, and a daemon that dies
// takes its spares with it (Pdeathsig, as for every init). A spare leaves
// nothing on the host to reap (no cgroup until it is a sandbox, no mounts
// but its own namespace's), and its uid slot is a lock its daemon holds.

// MaxSpares bounds Options.Spares: each spare is a process and a uid slot.
const MaxSpares = 4

// spareMaxAge is how long a spare may wait before it is replaced.
const spareMaxAge = 5 * time.Minute

// initEnv is the init's whole environment (its commands get theirs in
// each start request). containermaxprocs=0: the Go runtime would
// otherwise open the CPU controller files of the cgroup it starts in and
// keep them open to adjust GOMAXPROCS: the daemon's cgroup's for a spare
// (which joins its sandbox's cgroup only when handed out), and, by a race
// with the cgroup join, sometimes for a cold init too. GOMAXPROCS=1: an
// init and the launcher wait on pipes and sockets, and one P is all they
// use; the runtime of a process started with more builds a P, an mcache
// and worker state for each, and more threads for Landlock's and
// seccomp's all-threads calls to visit. On a 2-CPU VM where a page fault
// costs 12-15 us that was about a fifth of a cold exec's page faults
// (760 -> 590 per exec, BenchmarkExecTrue/cold under perf stat).
var initEnv = []string{"GODEBUG=containermaxprocs=0", "GOMAXPROCS=1"}

// initProc is a sandbox init started and waiting for its config.
type initProc struct {
	pid      int // in the daemon's pid namespace
	ctl      *net.UnixConn
	cfgW     *os.File // the config pipe: the init does nothing until it is written and closed
	pidfd    int
	slot     *owner.Slot
	stderr   *tailBuffer
	waitDone chan struct{} // closed when the init is reaped
	born     time.Time
	id       string // the sandbox's id; its cgroup is named after it

	// The sandbox's cgroup, made as the init starts, with the init in it
	// and no limits (makeCgroup). cgDone is nil without cgroup support,
	// and closed once the rest is set: cg and cgRecord (nil if none was
	// made), cgErr when the group could not be made (the policy decides
	// whether that may be degraded), cgHardErr when the sandbox cannot be
	// made at all (the group could not be recorded, or the init not put
	// in it).
	cgDone    chan struct{}
	cg        cgroupGroup
	cgRecord  *owner.Entry
	cgErr     error
	cgHardErr error
}

// makeCgroup makes the sandbox's cgroup, with no limits, and puts the
// init in it; it closes in.cgDone when done. The init runs nothing until
// its config, and configure writes the policy's limits before that, so
// the group is the one a Create made and joined before the config; made
// with the init, it is ready when a Create takes a spare (on cgroup v1 a
// group is a directory in each of five hierarchies, and each move of a
// process waits for an RCU grace period).
func (in *initProc) makeCgroup(mk func(string, sandbox.Limits) (cgroupGroup, error)) {
	defer close(in.cgDone)
	name := "agentbox-" + in.id
	// Written down before it exists: if this process dies, the next
	// agentbox to start removes the group and what runs in it.
	rec, err := owner.Default().Record(owner.Record{Kind: cgroup.KindCgroup, Name: name})
	if err != nil {
		in.cgHardErr = fmt.Errorf("process sandbox: %w", err)
		return
	}
	in.cgRecord = rec
	cg, err := mk(name, sandbox.Limits{})
	if err != nil {
		in.cgErr = err
		return
	}
	in.cg = cg
	if err := cg.Add(in.pid); err != nil {
		in.cgHardErr = fmt.Errorf("add sandbox init to its cgroup: %w", err)
	}
}

// releaseCgroup removes the cgroup of an init no sandbox took (its init
// is gone), and its record once it is gone.
func (in *initProc) releaseCgroup() {
	if in.cgDone == nil {
		return
	}
	<-in.cgDone
	if in.cg != nil {
		if err := in.cg.Delete(); err != nil {
			return // the record stays: the next agentbox to start removes it
		}
	}
	in.cgRecord.Release()
}

// startInit starts an init in new namespaces (a network namespace of its
// own when newNet), as uid slot's root, parked on its config pipe. The
// launcher (launcher_linux.go) forks it, not this process. It takes slot:
// on failure the slot is released.
func (r *Runtime) startInit(slot *owner.Slot, newNet bool) (_ *initProc, err error) {
	defer func() {
		if err != nil {
			slot.Release()
		}
	}()
	if err := reexec.Check(initArg0); err != nil {
		return nil, err
	}
	rootUID := r.opts.UIDBase + slot.N
	userUID := r.opts.UIDBase + sandboxUID + slot.N
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer cfgR.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		cfgW.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	child := os.NewFile(uintptr(pair[1]), "control")
	defer child.Close()
	parent := os.NewFile(uintptr(pair[0]), "control")
	conn, err := net.FileConn(parent)
	parent.Close()
	if err != nil {
		cfgW.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		conn.Close()
		cfgW.Close()
		return nil, fmt.Errorf("init stderr: %w", err)
	}
	in := &initProc{ctl: conn.(*net.UnixConn), cfgW: cfgW, pidfd: -1, slot: slot, stderr: &tailBuffer{}}
	pid, pidfd, reaped, err := initLauncher.start(newNet, rootUID, userUID, cfgR, child, errW)
	errW.Close() // the init has its own
	if err != nil {
		errR.Close()
		_ = in.ctl.Close() // the start failed: that error is the one to report
		cfgW.Close()
		return nil, err
	}
	// waitDone, as os/exec's Wait did: reaped, and its stderr read to the
	// end, so that an error quoting it has all of it.
	copied := make(chan struct{})
	go copyStderr(errR, in.stderr, copied)
	in.pid, in.pidfd, in.waitDone = pid, pidfd, make(chan struct{})
	in.id = fmt.Sprintf("p%d-%d", slot.N, time.Now().UnixNano())
	if mk := newCgroup; mk != nil {
		in.cgDone = make(chan struct{})
		go in.makeCgroup(mk)
	}
	go func() {
		<-reaped
		<-copied
		close(in.waitDone)
	}()
	in.born = time.Now()
	return in, nil
}

// usable reports whether a parked spare may still be handed out: alive
// and not older than spareMaxAge.
func (in *initProc) usable() bool {
	select {
	case <-in.waitDone:
		return false
	default:
	}
	return time.Since(in.born) < spareMaxAge
}

// discard kills a spare that was never handed out and releases what it
// holds.
func (in *initProc) discard() {
	if in.pidfd >= 0 {
		_ = unix.PidfdSendSignal(in.pidfd, unix.SIGKILL, nil, 0)
	} else {
		_ = unix.Kill(in.pid, unix.SIGKILL) // not reaped yet (waitDone): the pid is still its
	}
	t := time.NewTimer(10 * time.Second)
	select {
	case <-in.waitDone:
	case <-t.C:
	}
	t.Stop()
	_ = in.ctl.Close()  // nothing was sent on it
	_ = in.cfgW.Close() // nor on the config pipe
	if in.pidfd >= 0 {
		_ = unix.Close(in.pidfd) // a pidfd: closing it loses nothing
	}
	in.releaseCgroup()
	in.slot.Release()
}

// sparePool keeps up to max spares started ahead of Create.
type sparePool struct {
	max   int
	start func() (*initProc, error)

	mu      sync.Mutex
	parked  []*initProc
	filling bool
	closed  bool
	wg      sync.WaitGroup // the filler and discards in the background

	handedOut atomic.Int64 // spares adopted by Create (tests)
}

// take returns a spare for a sandbox that needs a network namespace of its
// own (newNet) or nil. A spare it returns is the caller's and is never
// returned to the pool. The caller refills the pool (fill) as soon as it
// has its init: the launcher starts the next spare (the daemon does not
// fork), so the spare's start-up runs while the caller's init builds its
// sandbox, and is further along when the next Create comes.
func (p *sparePool) take(newNet bool) *initProc {
	if p == nil {
		return nil
	}
	if !newNet {
		return nil // every spare has a network namespace of its own
	}
	for {
		p.mu.Lock()
		if len(p.parked) == 0 {
			p.mu.Unlock()
			return nil
		}
		in := p.parked[0]
		p.parked = p.parked[1:]
		if !in.usable() {
			p.wg.Add(1)
			p.mu.Unlock()
			go func() {
				defer p.wg.Done()
				in.discard()
			}()
			continue
		}
		p.mu.Unlock()
		p.handedOut.Add(1)
		return in
	}
}

// fill starts spares in the background until max are parked. A spare that
// fails to start ends the filling until the next take: Create starts cold
// meanwhile, and reports any error that has.
func (p *sparePool) fill() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.filling || len(p.parked) >= p.max {
		return
	}
	p.filling = true
	p.wg.Add(1)
	// Detached from every request on purpose: spares are the runtime's,
	// and Close ends them.
	go func() {
		defer p.wg.Done()
		for {
			in, err := p.start()
			p.mu.Lock()
			if err != nil || p.closed {
				p.filling = false
				p.mu.Unlock()
				if in != nil {
					in.discard()
				}
				return
			}
			p.parked = append(p.parked, in)
			if len(p.parked) >= p.max {
				p.filling = false
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
		}
	}()
}

// close ends every spare and stops refilling; it returns once no spare
// process is left.
func (p *sparePool) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	parked := p.parked
	p.parked = nil
	p.mu.Unlock()
	for _, in := range parked {
		in.discard()
	}
	p.wg.Wait()
}

// Spares is how many spare inits the runtime keeps: Options.Spares, at
// most MaxSpares.
func (r *Runtime) Spares() int {
	if r.spares == nil {
		return 0
	}
	return r.spares.max
}

// Close ends the runtime's spare inits (Options.Spares) and starts no
// more; sandboxes it made are not touched, and Create still works, cold.
// The launcher ends too when no init of the process is left.
func (r *Runtime) Close() error {
	r.spares.close()
	initLauncher.stopIdle()
	return nil
}

// checkInit is the one check every init passes before it gets a policy,
// spare or not: its namespaces are new (the network's exactly when the
// policy wants its own) and its uid and gid maps are its slot's, as
// configure is about to rely on. A clone-time choice that does not match
// the policy fails the Create instead of building a sandbox around it.
func checkInit(pid int, newNet bool, rootUID, userUID int) error {
	for _, ns := range []string{"user", "mnt", "pid", "ipc", "uts", "net"} {
		ours, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			return fmt.Errorf("sandbox init: %w", err)
		}
		theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
		if err != nil {
			return fmt.Errorf("sandbox init: %w", err)
		}
		if want := ns != "net" || newNet; (ours != theirs) != want {
			return fmt.Errorf("sandbox init: its %s namespace is not what the policy needs (new: %v)", ns, want)
		}
	}
	want := fmt.Sprintf("0 %d 1\n%d %d 1\n", rootUID, sandboxUID, userUID)
	for _, m := range []string{"uid_map", "gid_map"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, m))
		if err != nil {
			return fmt.Errorf("sandbox init: %w", err)
		}
		if normalizeMap(string(b)) != want {
			return fmt.Errorf("sandbox init: %s is %q, not its uid slot's", m, b)
		}
	}
	return nil
}

// normalizeMap writes a /proc uid_map with single spaces.
func normalizeMap(s string) string {
	var out []byte
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		out = append(out, strings.Join(strings.Fields(line), " ")...)
		out = append(out, '\n')
	}
	return string(out)
}

package process

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/cgroup"
)

// outputGrace is how long Wait keeps copying output after the process
// exited: a background child still holding the pipe must not block Wait.
const outputGrace = 2 * time.Second

// proc is one command started in a box.
type proc struct {
	b       *box
	id      uint64
	pidfd   int
	hostPid int

	started    chan message
	gotStarted bool // dispatcher only
	// exited is closed by the dispatcher after it stored exitMsg.
	exited  chan struct{}
	exitMsg message
	// timerMu guards timer, timeout and ended; the timer's function
	// does not take it.
	timerMu  sync.Mutex
	timer    *time.Timer
	timeout  time.Duration // of the timer, read by wait once timedOut
	ended    bool          // wait stopped the timer for good
	timedOut atomic.Bool
	before   cgroup.Stats

	// stdio: child ends are sent to the init, parent ends are copied.
	child    [3]*os.File
	parent   [3]*os.File
	borrowed [3]bool
	copyFns  []func()
	copies   sync.WaitGroup

	waitOnce sync.Once
	exit     sandbox.Exit
	waitErr  error
}

var (
	_ sandbox.Process         = (*proc)(nil)
	_ sandbox.TimeoutResetter = (*proc)(nil)
)

func (p *proc) Pid() int { return p.hostPid }

// Signal implements sandbox.Process. SIGKILL ends the whole tree, which
// in this runtime is the whole sandbox: a process's descendants may have
// left its process group or session, but never the sandbox.
func (p *proc) Signal(sig os.Signal) error {
	select {
	case <-p.exited:
		return os.ErrProcessDone
	default:
	}
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("process sandbox: unsupported signal %v", sig)
	}
	if s == syscall.SIGKILL {
		p.b.killAll()
		return nil
	}
	if p.pidfd < 0 {
		return fmt.Errorf("process sandbox: no handle on process %d", p.id)
	}
	return unix.PidfdSendSignal(p.pidfd, s, nil, 0)
}

// ResetTimeout implements sandbox.TimeoutResetter.
func (p *proc) ResetTimeout(d time.Duration) {
	p.timerMu.Lock()
	defer p.timerMu.Unlock()
	if p.ended {
		return
	}
	if p.timer != nil {
		if !p.timer.Stop() {
			return // it fired: the process is being killed for it
		}
		p.timer = nil
	}
	if d <= 0 {
		return
	}
	p.timeout = d
	p.timer = time.AfterFunc(d, func() {
		p.timedOut.Store(true)
		p.b.killAll()
	})
}

// Wait implements sandbox.Process.
func (p *proc) Wait() (sandbox.Exit, error) {
	p.waitOnce.Do(p.wait)
	return p.exit, p.waitErr
}

func (p *proc) wait() {
	var m message
	died := false
	select {
	case <-p.exited:
		m = p.exitMsg
	case <-p.b.dead:
		// The dispatcher delivers every message before it closes dead.
		select {
		case <-p.exited:
			m = p.exitMsg
		default:
			died = true
		}
	}
	p.timerMu.Lock()
	p.ended = true
	if p.timer != nil {
		p.timer.Stop()
	}
	timeout := p.timeout
	p.timerMu.Unlock()
	p.finishCopies()
	if p.pidfd >= 0 {
		_ = unix.Close(p.pidfd) // a pidfd: closing it loses nothing
	}
	p.b.mu.Lock()
	delete(p.b.procs, p.id)
	p.b.mu.Unlock()

	e := sandbox.Exit{Code: m.Code}
	switch {
	case died:
		e.Code, e.Signal = -1, unix.SignalName(syscall.SIGKILL)
	case m.Signal != 0:
		e.Code, e.Signal = -1, unix.SignalName(syscall.Signal(m.Signal))
	}
	e.Usage = sandbox.Usage{MaxRSSBytes: m.MaxRSSBytes, CPUMillis: m.CPUMillis}
	var after cgroup.Stats
	haveStats := false
	failed := e.Code != 0
	if p.b.cg != nil && (died || (failed && p.b.countersMatter())) {
		if s, err := p.b.cg.Stats(); err == nil {
			after, haveStats = s, true
			if died {
				// The init is gone with the rusage: use the tree's.
				e.Usage = sandbox.Usage{MaxRSSBytes: s.MemoryMaxBytes, CPUMillis: s.CPUMillis}
			}
		}
	}
	switch {
	case p.timedOut.Load():
		e.Reason = sandbox.ReasonTimeout
		e.Message = fmt.Sprintf("killed after the %s timeout", timeout)
	case haveStats && after.OOMKills > p.before.OOMKills:
		e.Reason = sandbox.ReasonMemory
		e.Message = fmt.Sprintf("the memory limit of %d bytes was reached", p.b.spec.Limits.MemoryBytes)
	case haveStats && failed && after.PidsMaxHits > p.before.PidsMaxHits:
		e.Reason = sandbox.ReasonPids
		e.Message = fmt.Sprintf("the process limit of %d was reached", p.b.spec.Limits.Pids)
	case failed && !died:
		e.Reason, e.Message = p.b.filesFull()
	case died && !p.b.killed.Load():
		e.Reason = sandbox.ReasonSandboxFailed
		e.Message = "the sandbox init exited unexpectedly"
		if tail := p.b.stderrTail(); tail != "" {
			e.Message += ": " + tail
		}
	}
	p.exit = e
}

// setupStdio prepares the three descriptors the command gets. An *os.File
// is passed straight through; any other reader or writer gets a pipe and a
// copying goroutine; nil gets /dev/null.
func (p *proc) setupStdio(c sandbox.Cmd) error {
	var err error
	if c.Stdin == nil {
		p.child[0], err = os.Open(os.DevNull)
	} else if f, ok := c.Stdin.(*os.File); ok {
		p.child[0] = f
		p.borrowed[0] = true
	} else {
		var r, w *os.File
		if r, w, err = os.Pipe(); err == nil {
			p.child[0], p.parent[0] = r, w
			src := c.Stdin
			p.copyFns = append(p.copyFns, func() {
				// EPIPE once the command stops reading is expected.
				_, _ = io.Copy(w, src)
				w.Close()
			})
		}
	}
	if err != nil {
		return err
	}
	for i, out := range []io.Writer{c.Stdout, c.Stderr} {
		fd := i + 1
		if out == nil {
			p.child[fd], err = os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		} else if f, ok := out.(*os.File); ok {
			p.child[fd] = f
			p.borrowed[fd] = true
		} else {
			var r, w *os.File
			if r, w, err = os.Pipe(); err == nil {
				p.child[fd], p.parent[fd] = w, r
				dst := out
				p.copies.Add(1)
				p.copyFns = append(p.copyFns, func() {
					defer p.copies.Done()
					// A failing dst's error has nowhere to go (Wait
					// reports the command's exit), but the pipe is
					// still drained: a command must not block on a
					// full pipe because its reader gave up.
					if _, err := io.Copy(dst, r); err != nil {
						_, _ = io.Copy(io.Discard, r)
					}
				})
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (p *proc) childFDs() []int {
	fds := make([]int, 3)
	for i, f := range p.child {
		fds[i] = int(f.Fd())
	}
	return fds
}

// closeChildEnds closes our copies of the descriptors the init now holds.
func (p *proc) closeChildEnds() {
	for i, f := range p.child {
		if f != nil && !p.borrowed[i] {
			f.Close()
		}
		p.child[i] = nil
	}
}

func (p *proc) closeStdio() {
	p.closeChildEnds()
	for i, f := range p.parent {
		if f != nil {
			f.Close()
			p.parent[i] = nil
		}
	}
}

func (p *proc) startCopies() {
	for _, fn := range p.copyFns {
		go fn()
	}
}

// finishCopies waits for the output to drain, at most outputGrace after
// the process ended, then closes the pipes.
func (p *proc) finishCopies() {
	done := make(chan struct{})
	go func() {
		p.copies.Wait()
		close(done)
	}()
	t := time.NewTimer(outputGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	for i, f := range p.parent {
		if f != nil {
			f.Close()
			p.parent[i] = nil
		}
	}
	<-done
}

// oneTerminal reports whether a TTY command's three descriptors are the
// same file, as sandbox.Cmd.TTY requires.
func oneTerminal(c sandbox.Cmd) bool {
	f, ok := c.Stdin.(*os.File)
	return ok && f != nil && c.Stdout == io.Writer(f) && c.Stderr == io.Writer(f)
}

// Package procrt is the runtime of agents that run as one process per
// session and speak a protocol over its stdin and stdout (claude, pi and
// every ACP agent): it starts the agent.Proc with pipes, reads its stdout
// (as bounded lines, or through the protocol's own reader), keeps the tail
// of its stderr, records how it ended (agent.Exiter), runs one turn at a
// time with the interrupt's escalation, and ends the process on Close. An
// adapter on top of it keeps only its protocol (what it writes, how it
// handles what it reads) and its mapper.
package procrt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

// Errors of BeginTurn (wrapped, after the runtime's name).
var (
	ErrBusy   = errors.New("a turn is already running")
	ErrClosed = errors.New("session closed")
)

// Defaults of the adapters' options.
const (
	DefaultMaxLine          = agent.MaxEventBytes // bytes of one stdout line
	DefaultInterruptTimeout = 5 * time.Second
	DefaultCloseGrace       = 2 * time.Second
	DefaultStartTimeout     = 60 * time.Second
)

const (
	// stderrTail is how much of the process's stderr is kept.
	stderrTail = 8 << 10
	// drainWait is how long the end of the process waits for its output
	// to be read (a grandchild may hold the pipes) before giving up on it.
	drainWait = 2 * time.Second
	// writeTimeout bounds one write to the process's stdin (it reads it
	// continuously; a stuck process must not hang its writer).
	writeTimeout = 30 * time.Second
)

// Config says how a Runtime names its process and ends it.
type Config struct {
	// Name starts the runtime's errors ("claude", "gemini").
	Name string
	// Who names the process in session.ended ("the claude CLI").
	Who string
	// Short names it in a turn's messages ("the CLI", "pi").
	Short string
	// ErrPrefix starts a turn's error once the process is gone
	// ("claude: the CLI", "pi", "gemini: the agent").
	ErrPrefix string
	// Host receives the output_too_long error events of ServeLines.
	Host agent.Host
	// InterruptTimeout bounds Interrupt: how long the process has to end
	// the turn before it is killed.
	InterruptTimeout time.Duration
	// CloseGrace is how long Close waits after closing stdin (when
	// ExitsOnEOF), and again after SIGTERM, before it escalates.
	CloseGrace time.Duration
	// ExitsOnEOF is true when the process exits once its stdin is closed;
	// Close otherwise signals it at once.
	ExitsOnEOF bool
	// OnExit, when set, runs once the process is reaped and its output
	// read, before Exited is closed (pending requests end, files go).
	OnExit func()
}

// Runtime is one running agent process.
type Runtime struct {
	cfg  Config
	proc *agent.Proc

	wmu     sync.Mutex // serialises writes to stdin
	stdin   *os.File
	stdout  *os.File
	stderrR *os.File
	stderr  *agent.TailBuffer

	// ctx ends when the process is gone.
	ctx    context.Context
	cancel context.CancelFunc

	stderrDone chan struct{}
	readerDone chan struct{}
	turnMu     sync.Mutex // held while a turn runs
	closing    atomic.Bool

	mu     sync.Mutex
	exit   agent.ProcExit
	exited chan struct{} // the process exited and its output was read
	done   chan struct{} // exited, and OnExit has run
}

var _ agent.Exiter = (*Runtime)(nil)

// Start starts proc with new pipes and the copy of its stderr. The caller
// then calls Serve or ServeLines once. The process's lifetime is the
// session's, never a request's: the Runtime's context ends only once the
// process is gone.
func Start(proc *agent.Proc, cfg Config) (*Runtime, error) {
	inW, outR, errR, err := proc.StartPiped()
	if err != nil {
		return nil, fmt.Errorf("%s: start %s: %w", cfg.Name, proc.Path, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Runtime{
		cfg: cfg, proc: proc, stdin: inW, stdout: outR, stderrR: errR, stderr: agent.NewTailBuffer(stderrTail),
		ctx: ctx, cancel: cancel, stderrDone: make(chan struct{}), readerDone: make(chan struct{}),
		exited: make(chan struct{}), done: make(chan struct{}),
	}
	go func() {
		defer close(r.stderrDone)
		_, _ = io.Copy(r.stderr, errR)
	}()
	return r, nil
}

// Stdin and Stdout are the process's pipes, for a protocol that reads
// and writes them itself (Serve).
func (r *Runtime) Stdin() *os.File  { return r.stdin }
func (r *Runtime) Stdout() *os.File { return r.stdout }

// Context ends when the process is gone.
func (r *Runtime) Context() context.Context { return r.ctx }

// Stderr is the tail of the process's stderr.
func (r *Runtime) Stderr() *agent.TailBuffer { return r.stderr }

// Serve runs read, which reads stdout until it ends, and reaps the process.
// Once the process has exited, read gets drainWait to finish before stdout
// is closed under it.
func (r *Runtime) Serve(read func(stdout io.Reader)) {
	go func() {
		defer close(r.readerDone)
		defer r.stdout.Close()
		read(r.stdout)
	}()
	go r.wait()
}

// ServeLines serves stdout as lines of at most maxLine bytes (LF framing,
// a trailing CR dropped), handing each non-blank one to handle in one
// goroutine (blank ones are skipped). A longer line is skipped and reported as an output_too_long
// error event.
func (r *Runtime) ServeLines(maxLine int, handle func(line []byte)) {
	r.Serve(func(stdout io.Reader) {
		lr := NewLineReader(stdout, maxLine)
		for {
			line, skipped, err := lr.Next()
			if err != nil {
				return
			}
			if skipped > 0 {
				_ = r.cfg.Host.Emit(r.ctx, event.New(event.SourceAgent, &event.Error{
					Code:    "output_too_long",
					Message: fmt.Sprintf("skipped a line of %d bytes from %s (the limit is %d)", skipped, r.cfg.Short, maxLine),
				}))
				continue
			}
			if len(bytes.TrimSpace(line)) > 0 {
				handle(line)
			}
		}
	})
}

// wait reaps the process and closes done once its output is read.
func (r *Runtime) wait() {
	ex := r.proc.Wait()
	select {
	case <-r.readerDone:
	case <-time.After(drainWait):
		r.stdout.Close() // a grandchild holds the pipe: stop reading
		<-r.readerDone
	}
	select {
	case <-r.stderrDone:
	case <-time.After(drainWait):
	}
	r.stderrR.Close() // ends the copy if a grandchild still holds the pipe
	r.mu.Lock()
	r.exit = ex
	r.mu.Unlock()
	if r.cfg.OnExit != nil {
		r.cfg.OnExit()
	}
	r.wmu.Lock()
	r.stdin.Close()
	r.wmu.Unlock()
	r.cancel()
	close(r.exited) // a turn in flight fails with the exit (it watches Exited)
	close(r.done)   // the engine records how the turn and the session ended
}

// WriteJSON writes v as one line to the process's stdin, within ctx and
// writeTimeout.
func (r *Runtime) WriteJSON(ctx context.Context, v any) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if err := agent.WriteJSONLine(ctx, r.stdin, v, writeTimeout); err != nil {
		return fmt.Errorf("%s: write to %s: %w", r.cfg.Name, r.cfg.Short, err)
	}
	return nil
}

// BeginTurn takes the session's one turn: it fails when a turn runs, when
// the process is gone (with ExitError) and after Close. end gives it back.
func (r *Runtime) BeginTurn() (end func(), err error) {
	if !r.turnMu.TryLock() {
		return nil, fmt.Errorf("%s: %w", r.cfg.Name, ErrBusy)
	}
	select {
	case <-r.exited:
		r.turnMu.Unlock()
		return nil, r.ExitError()
	default:
	}
	if r.closing.Load() {
		r.turnMu.Unlock()
		return nil, fmt.Errorf("%s: %w", r.cfg.Name, ErrClosed)
	}
	return r.turnMu.Unlock, nil
}

// Await waits for a turn's result: from result, the exit error when the
// process dies first, and an Interrupt (with send) when ctx ends first.
func (r *Runtime) Await(ctx context.Context, result <-chan agent.Result, send func(context.Context) error) (agent.Result, error) {
	select {
	case res := <-result:
		return res, nil
	case <-r.exited:
		select {
		case res := <-result: // it ended the turn just before it exited
			return res, nil
		default:
		}
		return agent.Result{}, r.ExitError()
	case <-ctx.Done():
		return r.Interrupt(result, send)
	}
}

// Interrupt ends a turn early: send writes the protocol's interrupt, and
// the turn's result then ends it as interrupted; a process that does not
// end the turn within InterruptTimeout is killed.
func (r *Runtime) Interrupt(result <-chan agent.Result, send func(context.Context) error) (agent.Result, error) {
	select {
	case res := <-result: // it had just finished
		return res, nil
	default:
	}
	wctx, cancel := context.WithTimeout(context.Background(), r.cfg.InterruptTimeout)
	defer cancel()
	if err := send(wctx); err == nil {
		select {
		case res := <-result:
			res.StopReason = event.StopInterrupted
			return res, nil
		case <-r.exited:
			return agent.Result{StopReason: event.StopInterrupted, Message: r.cfg.Short + " exited while it was interrupted"}, nil
		case <-wctx.Done():
		}
	}
	r.Kill()
	select {
	case <-r.exited:
	case <-time.After(2 * drainWait):
	}
	return agent.Result{StopReason: event.StopInterrupted,
		Message: fmt.Sprintf("%s did not stop within %s of the interrupt and was killed", r.cfg.Short, r.cfg.InterruptTimeout)}, nil
}

// Failed is the one place a turn's failed write or request is told from
// the agent's end. When the process is ending — it has exited, its stdin
// is broken (EPIPE, or closed once it was reaped), or its output has ended
// (Serve's read returned, or ended is closed: the end of a protocol
// connection that reads stdout itself; nil for none) — it waits for the
// exit to be recorded (Exited) and returns true and ExitError, so the turn
// fails with how the agent ended; otherwise it returns false and nil at
// once, and the caller reports err. The wait is on the event, bounded: a
// process that broke its pipes and lives on is killed after 2*drainWait.
func (r *Runtime) Failed(err error, ended <-chan struct{}) (bool, error) {
	if !r.ending(err, ended) {
		return false, nil
	}
	select {
	case <-r.exited:
	case <-time.After(2 * drainWait):
		r.Kill()
		select {
		case <-r.exited:
		case <-time.After(2 * drainWait):
		}
	}
	return true, r.ExitError()
}

// ending says whether the process is ending (see Failed).
func (r *Runtime) ending(err error, ended <-chan struct{}) bool {
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrClosed) {
		return true
	}
	select {
	case <-r.exited:
		return true
	case <-r.readerDone:
		return true
	case <-ended:
		return true
	default:
		return false
	}
}

// Kill kills the process tree.
func (r *Runtime) Kill() { _ = r.proc.Kill() }

// Close ends the process: close stdin (an agent that exits on EOF gets
// CloseGrace to do so), then SIGTERM, then SIGKILL, each after
// CloseGrace, never past ctx.
func (r *Runtime) Close(ctx context.Context) error {
	r.closing.Store(true)
	r.wmu.Lock()
	r.stdin.Close()
	r.wmu.Unlock()
	return r.proc.Stop(ctx, r.done, r.cfg.CloseGrace, r.cfg.ExitsOnEOF)
}

// Closing says whether Close was called.
func (r *Runtime) Closing() bool { return r.closing.Load() }

// Exited is closed once the process has exited and its output was read.
func (r *Runtime) Exited() <-chan struct{} { return r.exited }

// Done implements agent.Exiter.
func (r *Runtime) Done() <-chan struct{} { return r.done }

// Exit implements agent.Exiter.
func (r *Runtime) Exit() event.SessionEnded {
	return r.exitState().Ended(r.cfg.Who, r.closing.Load(), r.stderr.String())
}

func (r *Runtime) exitState() agent.ProcExit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exit
}

// ExitDesc says how the process ended ("exited with code 2").
func (r *Runtime) ExitDesc() string {
	if d := r.exitState().Desc; d != "" {
		return d
	}
	return "exited"
}

// ExitError is a turn's error once the process is gone, with the end of
// its stderr.
func (r *Runtime) ExitError() error {
	if tail := r.stderr.Summary(); tail != "" {
		return fmt.Errorf("%s %s: %s", r.cfg.ErrPrefix, r.ExitDesc(), tail)
	}
	return fmt.Errorf("%s %s", r.cfg.ErrPrefix, r.ExitDesc())
}

// Gone reports whether the process is gone.
func (r *Runtime) Gone() bool {
	select {
	case <-r.exited:
		return true
	default:
		return false
	}
}

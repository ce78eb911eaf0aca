package execution

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// A zygote is a Python interpreter started in a warm-pool sandbox ahead of
// its task, its start-up done, blocked reading the code of the one task it
// will run. The task's code then runs in that interpreter as `python3 -c`
// would run it, and the sandbox is discarded with it like any other: one
// sandbox, one interpreter, one task.
//
// The protocol, on the interpreter's standard streams:
//   - it writes zygoteReady to stdout once started, then nothing until it
//     has the code;
//   - the daemon writes the code's length (4 bytes, big endian) and the
//     code to its stdin, then the task's stdin, then closes it.
//
// The only thing the daemon reads from the sandbox is the ready line
// (readyWriter): a byte other than the line's, on either stream, before
// the task is handed over makes the zygote unusable, and the task runs
// the normal way in another sandbox.

// zygoteReady is what the interpreter writes once it waits for its code.
const zygoteReady = "\x00agentbox-zygote-ready\n"

// zygoteMaxIdle bounds how long a zygote waits in the pool for a task; one
// that waited longer is killed, found dead when taken, and the task runs
// the normal way. Its task's own timeout replaces this one.
const zygoteMaxIdle = time.Hour

// zygoteStartTimeout bounds the wait for a zygote's ready line.
const zygoteStartTimeout = 20 * time.Second

// zygoteWriteTimeout bounds the hand-over of the code to the interpreter.
const zygoteWriteTimeout = 10 * time.Second

// zygoteRetry is how long a policy's pool holds plain sandboxes after a
// zygote could not start under it, before trying again.
const zygoteRetry = time.Minute

// pythonZygote runs in `python3 -c`. It runs the code as that would: in
// __main__'s namespace (which it leaves as it found it), compiled as
// "<string>", with the same traceback, exit status and SystemExit and
// KeyboardInterrupt handling. It imports nothing beyond what the
// interpreter's start already did (os, sys), so sys.modules is the same.
const pythonZygote = `def _agentbox_zygote():
    import os, sys
    os.write(1, b"\x00agentbox-zygote-ready\n")
    def read(n):
        b = b""
        while len(b) < n:
            c = os.read(0, n - len(b))
            if not c:
                os._exit(70)
            b += c
        return b
    src = read(int.from_bytes(read(4), "big")).decode("utf-8", "surrogateescape")
    g = sys.modules["__main__"].__dict__
    del g["_agentbox_zygote"], read
    code = None
    try:
        code = compile(src, "<string>", "exec")
        del src
        exec(code, g)
    except SystemExit:
        raise
    except BaseException as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code is not code:
            tb = tb.tb_next
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        if isinstance(e, KeyboardInterrupt):
            import signal
            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        del e, tb
        raise SystemExit(1)
_agentbox_zygote()
`

// zygoteScripts holds the interpreter command of each language that has a
// zygote. A variable so that tests can break it.
var zygoteScripts = map[string][]string{
	LangPython: {"python3", "-c", pythonZygote},
}

// zygoteLang returns the language whose zygote can run req (whose argv
// is argv), or "" when the task must start the normal way: only code
// passed inline, with no files, in a language that has a zygote.
func zygoteLang(req Request, argv []string) string {
	if _, ok := zygoteScripts[req.Language]; !ok || len(req.Files) > 0 || len(argv) != 3 || !utf8.ValidString(req.Code) {
		return ""
	}
	return req.Language
}

// zygote is an interpreter waiting in a pooled sandbox.
type zygote struct {
	p      sandbox.Process
	reset  sandbox.TimeoutResetter
	stdin  *os.File // write end
	stdout *readyWriter
	stderr *readyWriter

	done chan struct{} // closed when Wait has returned
	exit sandbox.Exit
	err  error

	closeOnce sync.Once
}

// startZygote starts lang's interpreter in b and waits until it is ready.
// On error the caller releases b, which kills whatever was started.
func startZygote(ctx context.Context, b *box, lang string) (*zygote, error) {
	args, ok := zygoteScripts[lang]
	if !ok {
		return nil, fmt.Errorf("no zygote for %q", lang)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("zygote stdin: %w", err)
	}
	z := &zygote{stdin: w, stdout: newReadyWriter(zygoteReady), stderr: newReadyWriter(""), done: make(chan struct{})}
	p, err := b.sb.Start(ctx, sandbox.Cmd{Args: args, Stdin: r, Stdout: z.stdout, Stderr: z.stderr, Timeout: zygoteMaxIdle})
	_ = r.Close() // the sandbox has its own copy (or it failed)
	if err != nil {
		z.close()
		return nil, fmt.Errorf("start the %s zygote: %w", lang, err)
	}
	z.p = p
	go func() {
		z.exit, z.err = p.Wait()
		close(z.done)
	}()
	fail := func(err error) (*zygote, error) {
		_ = p.Signal(syscall.SIGKILL) // best effort: the caller closes the sandbox anyway
		z.close()
		return nil, err
	}
	if z.reset, ok = p.(sandbox.TimeoutResetter); !ok {
		return fail(fmt.Errorf("the %s runtime cannot restart a process's timeout", b.sb.Info().Runtime))
	}
	t := time.NewTimer(zygoteStartTimeout)
	defer t.Stop()
	select {
	case <-t.C:
		return fail(fmt.Errorf("the %s zygote was not ready within %s", lang, zygoteStartTimeout))
	case <-z.stdout.ready:
	case <-z.stdout.unfit:
	case <-z.stderr.unfit:
	case <-z.done:
		return fail(fmt.Errorf("the %s zygote ended before it was ready: exit %d %s %s", lang, z.exit.Code, z.exit.Signal, z.exit.Message))
	case <-ctx.Done():
		return fail(fmt.Errorf("the %s zygote: %w", lang, ctx.Err()))
	}
	if !z.usable() {
		return fail(fmt.Errorf("the %s zygote wrote something other than its ready line", lang))
	}
	return z, nil
}

// usable reports whether the zygote still waits for its task: alive, and
// having written nothing but its ready line.
func (z *zygote) usable() bool {
	select {
	case <-z.done:
		return false
	default:
	}
	return z.stdout.fine() && z.stderr.fine()
}

// run hands the task to the zygote: its output goes to stdout and stderr,
// its timeout starts now, then the code and stdin are written. The
// returned process is the interpreter running the task.
func (z *zygote) run(code string, stdin []byte, timeout time.Duration, stdout, stderr io.Writer) (sandbox.Process, error) {
	if !z.stdout.attach(stdout) || !z.stderr.attach(stderr) {
		return nil, errors.New("the zygote wrote something other than its ready line")
	}
	z.reset.ResetTimeout(timeout)
	msg := make([]byte, 4, 4+len(code))
	binary.BigEndian.PutUint32(msg, uint32(len(code))) // len(code) <= maxInlineCode
	msg = append(msg, code...)
	if err := z.stdin.SetWriteDeadline(time.Now().Add(zygoteWriteTimeout)); err != nil {
		return nil, fmt.Errorf("zygote stdin: %w", err)
	}
	if _, err := z.stdin.Write(msg); err != nil {
		return nil, fmt.Errorf("hand the code to the zygote: %w", err)
	}
	_ = z.stdin.SetWriteDeadline(time.Time{})
	go func() {
		// EPIPE once the code stops reading is expected, as with a
		// process's stdin.
		_, _ = z.stdin.Write(stdin)
		z.close()
	}()
	return zygoteProc{z}, nil
}

// close closes the daemon's end of the zygote's stdin.
func (z *zygote) close() {
	z.closeOnce.Do(func() { _ = z.stdin.Close() })
}

// zygoteProc is the zygote's process once it runs its task: its Wait is
// the one the zygote's watcher already made.
type zygoteProc struct{ z *zygote }

func (p zygoteProc) Pid() int                   { return p.z.p.Pid() }
func (p zygoteProc) Signal(sig os.Signal) error { return p.z.p.Signal(sig) }
func (p zygoteProc) Wait() (sandbox.Exit, error) {
	<-p.z.done
	return p.z.exit, p.z.err
}

// readyWriter is what a zygote's stream is copied into: until a task's
// writer is attached it accepts exactly want (closing ready once it came)
// and nothing more; any other byte makes it unfit for good. Once attached,
// everything goes to the task's writer. It never returns an error, so the
// runtime's copy never stops.
type readyWriter struct {
	want  string
	ready chan struct{} // closed once want came
	unfit chan struct{} // closed once anything else came

	mu   sync.Mutex
	got  int // bytes of want seen
	bad  bool
	task io.Writer
}

func newReadyWriter(want string) *readyWriter {
	w := &readyWriter{want: want, ready: make(chan struct{}), unfit: make(chan struct{})}
	if want == "" {
		close(w.ready)
	}
	return w
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.task != nil {
		// Under the lock: attach orders the task's first byte after it.
		_, _ = w.task.Write(p) // the task's writers never fail
		return len(p), nil
	}
	if w.bad {
		return len(p), nil
	}
	rest := w.want[w.got:]
	n := min(len(p), len(rest))
	if string(p[:n]) != rest[:n] {
		w.spoil()
		return len(p), nil
	}
	w.got += n
	if n > 0 && w.got == len(w.want) {
		close(w.ready)
	}
	if len(p) > n {
		w.spoil()
	}
	return len(p), nil
}

// spoil makes the stream unfit; w.mu is held.
func (w *readyWriter) spoil() {
	if !w.bad {
		w.bad = true
		close(w.unfit)
	}
}

// fine reports whether nothing but (a prefix of) want was written.
func (w *readyWriter) fine() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.bad
}

// attach sends what comes next to task, unless the stream is unfit.
func (w *readyWriter) attach(task io.Writer) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.bad || w.got != len(w.want) {
		return false
	}
	w.task = task
	return true
}

// createZygote is the pool's create for a language's zygotes: a sandbox
// for pol with lang's interpreter ready in it. When the interpreter cannot
// start, it says so in the log and the metrics, discards that sandbox and
// returns a plain one, and the pool of key keeps getting plain ones for
// zygoteRetry: the tasks then start the normal way.
func (s *Service) createZygote(ctx context.Context, pol Policy, key, lang string) (*box, error) {
	b, err := s.create(ctx, pol, nil, false)
	if err != nil || !s.zygoteAllowed(key) {
		return b, err
	}
	z, err := startZygote(ctx, b, lang)
	if err == nil {
		b.zyg = z
		s.metrics.zygote.WithLabelValues("started").Inc()
		return b, nil
	}
	s.metrics.zygote.WithLabelValues("failed").Inc()
	s.zygoteFailed(key)
	s.opts.Log.Warn("warm pool: cannot start a zygote; tasks under this policy start their interpreter for a while",
		"language", lang, "retry_in", zygoteRetry, "err", err)
	s.report("zygote:"+b.sb.ID(), b.release(s.opts.Log))
	return s.create(ctx, pol, nil, false)
}

// zygoteAllowed reports whether key's pool should try zygotes.
func (s *Service) zygoteAllowed(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, failed := s.zygoteFailures[key]
	if failed && time.Since(t) >= zygoteRetry {
		delete(s.zygoteFailures, key)
		failed = false
	}
	return !failed
}

func (s *Service) zygoteFailed(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.zygoteFailures == nil {
		s.zygoteFailures = map[string]time.Time{}
	}
	s.zygoteFailures[key] = time.Now()
}

// forgetZygoteFailures drops the failures older than zygoteRetry, so the
// map holds only the policies still waiting to try again.
func (s *Service) forgetZygoteFailures(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, t := range s.zygoteFailures {
		if now.Sub(t) >= zygoteRetry {
			delete(s.zygoteFailures, key)
		}
	}
}

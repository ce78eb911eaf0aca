package execution

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
)

// Languages Exec runs code in.
const (
	LangPython = "python"
	LangNode   = "node"
	LangBash   = "bash"
)

// Languages lists the languages in the order the API documents them.
var Languages = []string{LangPython, LangNode, LangBash}

// maxInlineCode is the longest code passed as an argument (-c/-e); the
// kernel limits one argument to 128 KiB. Longer code is written to a file
// in the workspace, which costs the warm pool (files must exist before the
// sandbox is created).
const maxInlineCode = 96 << 10

// Request is one execution.
type Request struct {
	// Language and Code, or Argv.
	Language string
	Code     string
	Argv     []string
	// Stdin is the process's standard input (empty: /dev/null).
	Stdin []byte
	// Files are placed in the fresh workspace before the start, by
	// slash-separated relative path.
	Files map[string][]byte
	// Policy names the policy; zero means the default preset.
	Policy PolicyRef
	// Timeout bounds the run when shorter than the policy's limit.
	Timeout time.Duration
	// Provider, when set, runs the exec in a fresh sandbox of that
	// provider (Options.Remote) instead of on this host.
	Provider string
}

// Output is one chunk of output of a running task. Data never ends inside
// a UTF-8 sequence that the next chunk completes.
type Output struct {
	// Seq numbers the chunks of a task across both streams, from 1.
	Seq    int64
	Stream string // "stdout" or "stderr"
	Data   []byte
}

// Stream names.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// ErrorInfo is why a task ended abnormally; Code is a sandbox.Reason*.
type ErrorInfo struct {
	Code    string
	Message string
}

// SandboxInfo describes the sandbox a task ran in.
type SandboxInfo struct {
	ID         string
	Runtime    string
	Mechanisms []string
	Degraded   []string
	// Warm is true when the sandbox came from the warm pool.
	Warm bool
	// Provider is the provider the sandbox was on ("" for this host);
	// ID is then the provider's sandbox, Runtime and the rest the inner
	// daemon's.
	Provider string
}

// Result is how an execution ended.
type Result struct {
	// ExitCode is the exit status, -1 when a signal ended the process.
	ExitCode int
	Signal   string
	Stdout   []byte
	Stderr   []byte
	// Truncated: a stream reached the output limit; the process was then
	// killed (Error.Code output_limit_exceeded).
	Truncated  bool
	Duration   time.Duration
	Usage      sandbox.Usage
	Violations []sandbox.Violation
	// Error is nil when the process ended on its own within its limits
	// (whatever its exit status).
	Error   *ErrorInfo
	Sandbox SandboxInfo
	// Adjusted are the limits asked for (by the request's policy or its
	// timeout) that were lowered: what was asked and what applied.
	Adjusted []policy.Adjustment
}

// argv returns the command line of a request.
func (r *Request) argv() ([]string, map[string][]byte, error) {
	if (r.Language == "") == (len(r.Argv) == 0) {
		return nil, nil, fmt.Errorf("%w: exactly one of language (with code) and argv must be set", ErrInvalid)
	}
	if len(r.Argv) > 0 {
		if r.Code != "" {
			return nil, nil, fmt.Errorf("%w: code goes with language, not argv", ErrInvalid)
		}
		if r.Argv[0] == "" {
			return nil, nil, fmt.Errorf("%w: argv[0] is empty", ErrInvalid)
		}
		return r.Argv, r.Files, nil
	}
	var interp, flag, file string
	switch r.Language {
	case LangPython:
		interp, flag, file = "python3", "-c", ".agentbox-exec.py"
	case LangNode:
		interp, flag, file = "node", "-e", ".agentbox-exec.js"
	case LangBash:
		interp, flag, file = "bash", "-c", ".agentbox-exec.sh"
	default:
		return nil, nil, fmt.Errorf("%w: unknown language %q (want python, node or bash)", ErrInvalid, r.Language)
	}
	if len(r.Code) <= maxInlineCode && !bytes.ContainsRune([]byte(r.Code), 0) {
		return []string{interp, flag, r.Code}, r.Files, nil
	}
	if _, dup := r.Files[file]; dup {
		return nil, nil, fmt.Errorf("%w: file %q is reserved for long code", ErrInvalid, file)
	}
	files := make(map[string][]byte, len(r.Files)+1)
	for k, v := range r.Files {
		files[k] = v
	}
	files[file] = []byte(r.Code)
	return []string{interp, file}, files, nil
}

// Exec runs a request to its end and returns its result. Policy problems
// are errors (ErrPolicyInvalid, ErrPolicyDenied, sandbox.ErrUnenforceable);
// limits the process hits are in Result.Error.
//
// Unlike processes, an exec is bound to ctx: when the caller goes away the
// result has nobody to go to, so the process tree is killed.
func (s *Service) Exec(ctx context.Context, req Request) (Result, error) {
	return s.exec(ctx, req, Hooks{})
}

// Hooks receive the progress of a streamed exec. Their calls never overlap
// and none comes after ExecStream returns.
type Hooks struct {
	// Started is called once the process runs (not when ExecStream fails
	// before that).
	Started func(SandboxInfo)
	// Output is called with each chunk of output as it arrives.
	Output func(Output)
}

// ExecStream is Exec reporting its progress to hooks.
func (s *Service) ExecStream(ctx context.Context, req Request, hooks Hooks) (Result, error) {
	return s.exec(ctx, req, hooks)
}

func (s *Service) exec(ctx context.Context, req Request, hooks Hooks) (res Result, err error) {
	argv, files, err := req.argv()
	if err != nil {
		return Result{}, err
	}
	if req.Timeout < 0 {
		return Result{}, fmt.Errorf("%w: negative timeout", ErrInvalid)
	}
	for name := range files {
		if err := checkFilePath(name); err != nil {
			return Result{}, err
		}
	}
	release, err := s.acquire()
	if err != nil {
		return Result{}, err
	}
	// The slot goes back when the task's sandbox is torn down, which is
	// after the answer once there is a sandbox (see teardown).
	var (
		b        *box
		task     string
		answered bool
	)
	defer func() {
		if b == nil {
			release()
			return
		}
		s.teardown(task, b, release, answered)
	}()
	lang := req.Language
	if lang == "" {
		lang = "argv"
	}
	defer func() { s.metrics.countExec(lang, res, err) }()
	if req.Provider != "" {
		return s.execRemote(ctx, req, hooks)
	}

	pol, err := s.resolve(req.Policy)
	if err != nil {
		return Result{}, err
	}
	b, err = s.sandboxFor(ctx, pol, files, zygoteLang(req, argv), false)
	if err != nil {
		return Result{}, err
	}
	task = "exec:" + b.sb.ID()
	if err := s.attachNetwork(b, "exec", task); err != nil {
		return Result{}, err
	}

	adjusted := slices.Clone(adjustments(pol))
	limit := s.opts.MaxOutputBytes
	if l := b.spec.Limits.OutputBytes; l > 0 && l < limit {
		limit = l
	} else if l > limit {
		adjusted = append(adjusted, policy.Adjustment{Field: "resources.output", Requested: policy.ByteSize(l).String(),
			Applied: policy.ByteSize(limit).String(), By: "daemon (the output cap of one exec)"})
	}
	var k killer
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Result{}, ErrClosed
	}
	s.execs[&k] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.execs, &k)
		s.mu.Unlock()
	}()
	out := newCapture(limit, hooks.Output, k.killForOutput)
	cmd := sandbox.Cmd{
		Args:    argv,
		Stdout:  out.writer(Stdout),
		Stderr:  out.writer(Stderr),
		Timeout: effectiveTimeout(req.Timeout, b.spec.Limits.Timeout),
	}
	adjusted = append(adjusted, timeoutAdjusted(req.Timeout, cmd.Timeout)...)
	if len(req.Stdin) > 0 {
		cmd.Stdin = bytes.NewReader(req.Stdin)
	}
	start := time.Now()
	var p sandbox.Process
	if b.zyg != nil {
		// The interpreter is running: the task is its code and stdin, its
		// output, limits and timeout are the same as for a fresh one.
		p, err = b.zyg.run(req.Code, req.Stdin, cmd.Timeout, cmd.Stdout, cmd.Stderr)
		if err == nil {
			s.metrics.zygote.WithLabelValues("used").Inc()
		}
	} else {
		p, err = b.sb.Start(ctx, cmd)
	}
	if err != nil {
		return Result{}, fmt.Errorf("start %q in sandbox: %w", argv[0], err)
	}
	k.set(p)
	info := b.info()
	out.start(hooks.Started, info)
	stop := context.AfterFunc(ctx, k.kill)
	defer stop()
	backstop := backstopKill(cmd.Timeout, &k)
	defer backstop()

	exit, werr := p.Wait()
	dur := time.Since(start)
	out.flush()
	// The violations of the run are read now, before the answer; the
	// sandbox is torn down after it (teardown), and what it reports then
	// goes to the audit log and the metrics.
	viol := b.seen(s.opts.Log)
	if werr != nil {
		s.report(task, viol)
		return Result{}, fmt.Errorf("wait for %q: %w", argv[0], werr)
	}
	if ctx.Err() != nil && !k.byOutput() {
		s.report(task, viol)
		return Result{}, fmt.Errorf("exec: %w", context.Cause(ctx))
	}
	res = Result{
		ExitCode: exit.Code,
		Signal:   exit.Signal,
		Duration: dur,
		Usage:    exit.Usage,
		Sandbox:  info,
		Adjusted: adjusted,
	}
	res.Stdout, res.Stderr, res.Truncated = out.result()
	reason, msg := exit.Reason, exit.Message
	if res.Truncated {
		// The kill was ours; the runtime may call it anything.
		reason, msg = sandbox.ReasonOutput, fmt.Sprintf("output exceeded %d bytes on a stream; the process was killed", limit)
	}
	if reason != "" {
		res.Error = &ErrorInfo{Code: reason, Message: msg}
	}
	res.Violations = withLimitViolation(viol, reason, msg)
	s.report(task, res.Violations)
	answered = true
	return res, nil
}

// teardown closes an exec's sandbox and then gives its concurrency slot
// back (release). It runs after the exec has returned, so the answer does
// not wait for the sandbox's kill, reap, unmounts and cgroup removal
// (about a third of a warm exec's time).
//
// The teardown is detached from the request on purpose: it must run to its
// end whatever becomes of the caller. It holds the task's concurrency slot
// until the sandbox is gone, so MaxConcurrent bounds the sandboxes being
// torn down too (beyond it callers get ErrTooMany, as before), and the
// service's task count, which Close waits for, so a shutdown never leaves a
// sandbox behind. A crash leaves nothing either: the workspace's and the
// sandbox's owner records are released only once they are removed.
//
// Violations the sandbox reports during the teardown (answered: after the
// result was sent, whose list they can no longer join) are never dropped:
// they go to the audit log (OnViolation) and agentbox_policy_violations_total
// under the exec's task, and are logged as late. With the runtimes we have
// there are none in practice: an exec's workspace is Throwaway, so Close
// commits nothing, and seen has read the sandbox and the coalescer when the
// process ended; only a process the exec left running, refused by the
// egress proxy in the instant before the teardown kills it, can come late.
func (s *Service) teardown(task string, b *box, release func(), answered bool) {
	if b.refill != nil {
		b.refill() // the pools it was taken from: the exec has answered
	}
	go func() {
		defer release()
		late := b.release(s.opts.Log)
		if len(late) == 0 {
			return
		}
		if answered {
			n := 0
			for _, v := range late {
				n += v.N()
			}
			s.opts.Log.Warn("violations reported after the exec's result was sent: in the audit log and metrics only",
				"task", task, "violations", n)
		}
		s.report(task, late)
	}()
}

// timeoutAdjusted says, when a request's timeout (asked) is longer than
// the one that applies (the policy's), that it was lowered.
func timeoutAdjusted(asked, applied time.Duration) []policy.Adjustment {
	if asked <= applied || applied <= 0 {
		return nil
	}
	return []policy.Adjustment{{Field: "timeout_ms", Requested: strconv.FormatInt(asked.Milliseconds(), 10),
		Applied: strconv.FormatInt(applied.Milliseconds(), 10), By: "policy (resources.timeout)"}}
}

// effectiveTimeout is the request's timeout when it is shorter than the
// policy's (or the policy sets none).
func effectiveTimeout(req, policy time.Duration) time.Duration {
	if req > 0 && (policy <= 0 || req < policy) {
		return req
	}
	return policy
}

// backstopGrace is how long after its timeout a process may take to be
// reported ended by the runtime before it is killed from here.
const backstopGrace = 10 * time.Second

// backstopKill kills the process if it outlives its timeout by far: the
// runtime enforces the timeout; this only guards against a runtime bug
// leaving a task (and its concurrency slot) behind forever.
func backstopKill(timeout time.Duration, k *killer) (stop func()) {
	if timeout <= 0 {
		return func() {}
	}
	t := time.AfterFunc(timeout+backstopGrace, k.kill)
	return func() { t.Stop() }
}

// withLimitViolation adds a resource violation for a limit the process hit
// when the runtime did not report one itself.
func withLimitViolation(viol []sandbox.Violation, reason, msg string) []sandbox.Violation {
	rule := map[string]string{
		sandbox.ReasonTimeout: "limits.timeout",
		sandbox.ReasonMemory:  "limits.memory",
		sandbox.ReasonPids:    "limits.pids",
		sandbox.ReasonDisk:    "limits.disk",
		sandbox.ReasonFiles:   "limits.files",
		sandbox.ReasonOutput:  "limits.output",
	}[reason]
	if rule == "" || slices.ContainsFunc(viol, func(v sandbox.Violation) bool { return v.Kind == sandbox.ViolationResource }) {
		return viol
	}
	return append(viol, sandbox.Violation{Kind: sandbox.ViolationResource, Detail: msg, Rule: rule, Action: "blocked"})
}

// killer kills a process tree once it is known, even when asked before.
type killer struct {
	mu      sync.Mutex
	p       sandbox.Process
	pending bool
	output  bool // the kill came from the output limit
}

func (k *killer) set(p sandbox.Process) {
	k.mu.Lock()
	k.p = p
	pending := k.pending
	k.mu.Unlock()
	if pending {
		_ = p.Signal(syscall.SIGKILL) // best effort: it may have ended already
	}
}

func (k *killer) kill() {
	k.mu.Lock()
	p := k.p
	if p == nil {
		k.pending = true
	}
	k.mu.Unlock()
	if p != nil {
		_ = p.Signal(syscall.SIGKILL) // best effort: it may have ended already
	}
}

// killForOutput is kill, remembering why.
func (k *killer) killForOutput() {
	k.mu.Lock()
	k.output = true
	k.mu.Unlock()
	k.kill()
}

func (k *killer) byOutput() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.output
}

// capture collects an exec's two output streams, each capped with a
// sandbox.LimitedWriter; the first byte over a cap kills the process,
// since output past the limit is lost anyway and a runaway writer should
// not keep a CPU busy. With emit, chunks are also passed on as they come.
type capture struct {
	mu       sync.Mutex // orders emit calls and seq across both streams
	emit     func(Output)
	seq      int64
	started  bool     // Started was called: chunks go out at once
	early    []Output // chunks that came before the start was reported
	overflow func()
	once     sync.Once
	streams  map[string]*captured
}

type captured struct {
	c     *capture
	name  string
	buf   bytes.Buffer
	lw    *sandbox.LimitedWriter
	carry []byte // an incomplete UTF-8 sequence held back from emit
}

func newCapture(limit int64, emit func(Output), kill func()) *capture {
	c := &capture{emit: emit, streams: map[string]*captured{}}
	for _, name := range []string{Stdout, Stderr} {
		cs := &captured{c: c, name: name}
		cs.lw = &sandbox.LimitedWriter{W: (*emitWriter)(cs), N: limit}
		c.streams[name] = cs
	}
	c.overflow = kill
	return c
}

// writer returns the writer of one stream.
func (c *capture) writer(name string) *limitedStream { return &limitedStream{c.streams[name]} }

// limitedStream is what the runtime writes a stream to.
type limitedStream struct{ cs *captured }

func (w *limitedStream) Write(p []byte) (int, error) {
	n, err := w.cs.lw.Write(p)
	if w.cs.lw.Truncated() {
		w.cs.c.once.Do(w.cs.c.overflow)
	}
	return n, err
}

// emitWriter receives the bytes under the limit.
type emitWriter captured

func (w *emitWriter) Write(p []byte) (int, error) {
	cs := (*captured)(w)
	cs.buf.Write(p)
	if cs.c.emit == nil {
		return len(p), nil
	}
	data := append(cs.carry, p...)
	cut := completeUTF8(data)
	cs.carry = slices.Clone(data[cut:])
	cs.c.send(cs.name, data[:cut])
	return len(p), nil
}

func (c *capture) send(stream string, data []byte) {
	if len(data) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	o := Output{Seq: c.seq, Stream: stream, Data: slices.Clone(data)}
	if !c.started {
		c.early = append(c.early, o)
		return
	}
	c.emit(o)
}

// start reports the start (when started is not nil), then the output that
// came before it, so that a stream always opens with the start.
func (c *capture) start(started func(SandboxInfo), info SandboxInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if started != nil {
		started(info)
	}
	c.started = true
	for _, o := range c.early {
		c.emit(o)
	}
	c.early = nil
}

// flush emits what is held back at the end.
func (c *capture) flush() {
	for _, name := range []string{Stdout, Stderr} {
		cs := c.streams[name]
		if c.emit != nil && len(cs.carry) > 0 {
			c.send(name, cs.carry)
			cs.carry = nil
		}
	}
}

func (c *capture) result() (stdout, stderr []byte, truncated bool) {
	o, e := c.streams[Stdout], c.streams[Stderr]
	return o.buf.Bytes(), e.buf.Bytes(), o.lw.Truncated() || e.lw.Truncated()
}

// completeUTF8 returns how much of b can be passed on without splitting a
// UTF-8 sequence that more bytes could complete. Invalid bytes are not held
// back.
func completeUTF8(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

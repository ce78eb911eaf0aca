package execution

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/files"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
)

// StartRequest starts a process.
type StartRequest struct {
	Argv []string
	// Env is added to the policy's environment.
	Env map[string]string
	// Cwd is absolute (as seen inside) or relative to the workspace;
	// empty means the workspace.
	Cwd string
	// Stdin opens the process's standard input for SendStdin; otherwise
	// it reads /dev/null.
	Stdin bool
	// TTY runs the process on a pseudo-terminal of Rows by Cols (0: 24
	// by 80): the terminal is its standard input, output and error and
	// its controlling terminal, its output is one stdout stream, its
	// input is always open for SendStdin, and Resize changes its size.
	TTY        bool
	Rows, Cols int
	// Tag is an optional caller-chosen name, unique among running
	// processes, to find the process again without its id.
	Tag     string
	Files   map[string][]byte
	Policy  PolicyRef
	Timeout time.Duration
	// Sandbox, when set, runs the process in this existing sandbox (a
	// session's) instead of a new one; it is then not closed when the
	// process ends, and Policy and Files must be empty.
	Sandbox sandbox.Sandbox
	// Limits are Sandbox's limits (its timeout applies). Closing, closed
	// when Sandbox's owner begins to close it, kills the process, whose
	// exit then says sandbox_closed. Scope names the owner (a session
	// id): Resolve and ListScope find the process only through it.
	Limits  sandbox.Limits
	Closing <-chan struct{}
	Scope   string
	// Provider, when set, runs the process in a fresh sandbox of that
	// provider (Options.Remote, a RemoteProcesses), destroyed when it
	// ends; Sandbox must then be nil.
	Provider string
}

// ProcessInfo describes a started process.
type ProcessInfo struct {
	ID      string
	Tag     string
	Scope   string // StartRequest.Scope
	Argv    []string
	Pid     int
	Running bool
	// StdinOpen: SendStdin is possible.
	StdinOpen bool
	// TTY: the process runs on a pseudo-terminal of Rows by Cols (the
	// latest size set).
	TTY        bool
	Rows, Cols int
	StartedAt  time.Time
	EndedAt    time.Time // zero while running
	// Set when ended, as in Result.
	ExitCode   int
	Signal     string
	Error      *ErrorInfo
	Usage      sandbox.Usage
	Violations []sandbox.Violation
	// LastSeq is the seq of the last event so far.
	LastSeq int64
	Sandbox SandboxInfo
	// Adjusted are the limits asked for that were lowered, as in Result.
	Adjusted []policy.Adjustment
}

// maxTag bounds a tag's length.
const maxTag = 128

// Terminal sizes: the default of a TTY process, and the largest accepted
// (in each dimension; a bound on what a program sized by it may
// allocate, far beyond any screen).
const (
	DefaultRows = 24
	DefaultCols = 80
	MaxTermSize = 1000
)

// proc is one started process.
type proc struct {
	id, tag string
	scope   string
	closing <-chan struct{} // StartRequest.Closing
	argv    []string
	box     *box
	p       sandbox.Process
	out     *ring
	outs    [2]*procWriter
	started time.Time
	k       killer
	done    chan struct{}

	// term: the process runs on a pseudo-terminal whose master is also
	// stdin (input is written to it, output read from it by
	// pumpTerminal); pumped is closed when that reader has stopped.
	term   bool
	master *os.File
	pumped chan struct{}
	// resize resizes a provider process's terminal (which is in its
	// sandbox, not here: master is nil).
	resize func(ctx context.Context, rows, cols int) error

	stdinMu sync.Mutex
	stdin   *os.File // write end (a terminal's master); nil when closed or never opened
	// stdinEnded: the process ended while its stdin was open, and the
	// daemon closed it. A client's close that arrives after that (the
	// last line and the close sent together to a process that exits on
	// reading it) succeeds: there is nothing left to close, and nothing
	// was lost.
	stdinEnded bool

	mu   sync.Mutex
	info ProcessInfo // final once done is closed

	// kept: the process has ended and its workspace is on the host,
	// kept until discarded (Service.mu guards it).
	kept bool
}

// Start starts a process and returns at once. The process's lifetime is
// detached from ctx on purpose: it runs until it exits, hits its timeout,
// or is killed through Signal, Remove or Close; ctx bounds only the start.
func (s *Service) Start(ctx context.Context, req StartRequest) (ProcessInfo, error) {
	if err := checkStart(req); err != nil {
		return ProcessInfo{}, err
	}
	release, err := s.acquire()
	if err != nil {
		return ProcessInfo{}, err
	}
	ok := false
	defer func() {
		if !ok {
			release()
		}
	}()
	if req.Tag != "" {
		if err := s.reserveTag(req.Tag); err != nil {
			return ProcessInfo{}, err
		}
		defer s.unreserveTag(req.Tag)
	}
	if req.Provider != "" {
		info, err := s.startRemote(ctx, req, release)
		ok = err == nil
		return info, err
	}

	var b *box
	var adjusted []policy.Adjustment
	if req.Sandbox != nil {
		b = &box{sb: req.Sandbox}
	} else {
		pol, err := s.resolve(req.Policy)
		if err != nil {
			return ProcessInfo{}, err
		}
		adjusted = slices.Clone(adjustments(pol))
		if b, err = s.sandboxFor(ctx, pol, req.Files, "", true); err != nil {
			return ProcessInfo{}, err
		}
	}
	pr := &proc{id: newID("prc_"), tag: req.Tag, scope: req.Scope, closing: req.Closing, argv: slices.Clone(req.Argv), box: b, out: newRing(s.opts.OutputBuffer), done: make(chan struct{})}
	if req.Sandbox == nil {
		if err := s.attachNetwork(b, "process", "process:"+pr.id); err != nil {
			s.report("process:"+pr.id, b.release(s.opts.Log))
			return ProcessInfo{}, err
		}
	}
	pr.outs = [2]*procWriter{{r: pr.out, stream: Stdout}, {r: pr.out, stream: Stderr}}
	rows, cols := termSize(req)
	cmd := sandbox.Cmd{
		Args:    req.Argv,
		Env:     req.Env,
		Dir:     cwdInside(req.Cwd, b.spec),
		Stdout:  pr.outs[0],
		Stderr:  pr.outs[1],
		Timeout: effectiveTimeout(req.Timeout, b.spec.Limits.Timeout),
	}
	var lentTimeout time.Duration
	if req.Sandbox != nil {
		cmd, lentTimeout = lendCmd(cmd, req.Cwd, req.Limits, req.Timeout, req.TTY)
	}
	var stdinR *os.File
	if req.TTY {
		master, slave, err := openPTY(uint16(rows), uint16(cols))
		if err != nil {
			s.report("process:"+pr.id, b.release(s.opts.Log))
			return ProcessInfo{}, err
		}
		// The slave is the process's stdin, stdout and stderr; closing
		// our copy after the start (stdinR) leaves the process the only
		// holder, so the master reads EIO once it and its children are
		// gone.
		pr.term, pr.master, pr.pumped, pr.stdin = true, master, make(chan struct{}), master
		stdinR, cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.TTY = slave, slave, slave, slave, true
	} else if req.Stdin {
		r, w, err := os.Pipe()
		if err != nil {
			s.report("process:"+pr.id, b.release(s.opts.Log))
			return ProcessInfo{}, fmt.Errorf("stdin pipe: %w", err)
		}
		stdinR, pr.stdin, cmd.Stdin = r, w, r
	}
	pr.started = time.Now()
	p, err := b.sb.Start(ctx, cmd)
	if stdinR != nil {
		_ = stdinR.Close() // the sandbox has its own copy (or it failed)
	}
	if err != nil {
		if pr.stdin != nil {
			_ = pr.stdin.Close()
		}
		s.report("process:"+pr.id, b.release(s.opts.Log))
		return ProcessInfo{}, fmt.Errorf("start %q in sandbox: %w", req.Argv[0], err)
	}
	if req.Sandbox != nil {
		p = lend(p, lentTimeout, req.Closing, pr.master)
	}
	pr.p = p
	pr.k.set(p)
	pr.info = ProcessInfo{ID: pr.id, Tag: pr.tag, Scope: pr.scope, Argv: pr.argv, Pid: p.Pid(), Running: true, StartedAt: pr.started, Sandbox: b.info(),
		Adjusted: append(adjusted, timeoutAdjusted(req.Timeout, cmd.Timeout)...)}
	if req.Sandbox != nil {
		pr.info.Adjusted = timeoutAdjusted(req.Timeout, lentTimeout)
	}
	if pr.term {
		pr.info.TTY, pr.info.Rows, pr.info.Cols = true, rows, cols
		go pr.pumpTerminal()
	}

	s.mu.Lock()
	s.procs[pr.id] = pr
	s.mu.Unlock()
	s.metrics.processes.Inc()
	s.metrics.running.Inc()
	ok = true
	go s.wait(pr, cmd.Timeout, release)
	return pr.snapshot(), nil
}

// checkStart validates what does not need the sandbox.
func checkStart(req StartRequest) error {
	switch {
	case len(req.Argv) == 0 || req.Argv[0] == "":
		return fmt.Errorf("%w: argv is empty", ErrInvalid)
	case len(req.Tag) > maxTag || strings.ContainsFunc(req.Tag, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%w: tag must be at most %d printable characters", ErrInvalid, maxTag)
	case strings.HasPrefix(req.Tag, "prc_"):
		return fmt.Errorf("%w: tag %q would be taken for a process id", ErrInvalid, req.Tag)
	case req.Timeout < 0:
		return fmt.Errorf("%w: negative timeout", ErrInvalid)
	case req.Cwd != "" && !path.IsAbs(req.Cwd) && !filepath.IsLocal(req.Cwd):
		return fmt.Errorf("%w: cwd %q must be absolute or stay inside the workspace", ErrInvalid, req.Cwd)
	case req.Sandbox != nil && req.Provider != "":
		return fmt.Errorf("%w: a process in an existing sandbox takes no provider", ErrInvalid)
	case req.Sandbox != nil && (!req.Policy.IsZero() || len(req.Files) > 0):
		return fmt.Errorf("%w: a process in an existing sandbox takes no policy or files", ErrInvalid)
	case !req.TTY && (req.Rows != 0 || req.Cols != 0):
		return fmt.Errorf("%w: rows and cols go with tty", ErrInvalid)
	case req.TTY && (req.Rows != 0 || req.Cols != 0):
		if err := checkTermSize(req.Rows, req.Cols); err != nil {
			return err
		}
	}
	for name := range req.Files {
		if err := checkFilePath(name); err != nil {
			return err
		}
	}
	return nil
}

// checkTermSize bounds a terminal's size.
func checkTermSize(rows, cols int) error {
	if rows < 1 || rows > MaxTermSize || cols < 1 || cols > MaxTermSize {
		return fmt.Errorf("%w: a terminal is 1 to %d rows by 1 to %d columns, not %d by %d", ErrInvalid, MaxTermSize, MaxTermSize, rows, cols)
	}
	return nil
}

// termSize is the size a TTY process starts with.
func termSize(req StartRequest) (rows, cols int) {
	rows, cols = req.Rows, req.Cols
	if rows == 0 {
		rows = DefaultRows
	}
	if cols == 0 {
		cols = DefaultCols
	}
	return rows, cols
}

// cwdInside resolves a relative cwd against the workspace as seen inside.
func cwdInside(cwd string, spec sandbox.Spec) string {
	if cwd == "" || path.IsAbs(cwd) {
		return cwd
	}
	ws := spec.WorkspaceDir
	if ws == "" {
		ws = spec.Workspace
	}
	if ws == "" {
		return cwd
	}
	return path.Join(ws, cwd)
}

// reserveTag claims a tag for a starting process; a running process (or
// another start) holding it is a conflict.
func (s *Service) reserveTag(tag string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reserved == nil {
		s.reserved = map[string]bool{}
	}
	if s.reserved[tag] {
		return fmt.Errorf("%w: tag %q is being used by a starting process", ErrConflict, tag)
	}
	for _, p := range s.procs {
		if p.tag == tag && p.running() {
			return fmt.Errorf("%w: tag %q is used by running process %s", ErrConflict, tag, p.id)
		}
	}
	s.reserved[tag] = true
	return nil
}

func (s *Service) unreserveTag(tag string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.reserved, tag)
}

// wait waits for the process to end, then closes its sandbox and records
// how it ended.
func (s *Service) wait(pr *proc, timeout time.Duration, release func()) {
	stop := backstopKill(timeout, &pr.k)
	exit, err := pr.p.Wait()
	stop()
	if pr.master != nil {
		// The output the terminal still holds comes next; a child left
		// holding the terminal (a background job in a session's
		// sandbox) may keep it open, so the reading stops after a grace.
		_ = pr.master.SetReadDeadline(time.Now().Add(terminalDrainGrace))
		<-pr.pumped
	}
	for _, w := range pr.outs {
		w.flush()
	}
	pr.endStdin()
	viol := pr.box.releaseKeeping(s.opts.Log)
	info := pr.snapshot()
	info.Running, info.StdinOpen, info.EndedAt = false, false, time.Now()
	info.ExitCode, info.Signal, info.Usage = exit.Code, exit.Signal, exit.Usage
	reason, msg := exit.Reason, exit.Message
	if err != nil {
		info.ExitCode = -1
		reason, msg = sandbox.ReasonSandboxFailed, err.Error()
		s.opts.Log.Warn("waiting for a sandboxed process", "process", pr.id, "err", err)
	}
	if l, ok := pr.p.(*lent); ok {
		reason, msg = l.verdict(&info, reason, msg, pr.closing)
	}
	if reason != "" {
		info.Error = &ErrorInfo{Code: reason, Message: msg}
	}
	info.Violations = withLimitViolation(viol, reason, msg)
	s.report("process:"+pr.id, info.Violations)
	// The output is complete (Wait returned, the writers are flushed): the
	// exit event comes next.
	info.LastSeq = pr.out.lastSeq() + 1

	// Record the end, then free the slot, then tell readers and waiters:
	// whoever sees the exit may look the process up or start the next one
	// at once.
	pr.mu.Lock()
	pr.info = info
	pr.mu.Unlock()
	s.keep(pr)
	s.metrics.running.Dec()
	release()
	pr.out.end(info)
	close(pr.done)
}

func (pr *proc) running() bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.info.Running
}

func (pr *proc) snapshot() ProcessInfo {
	pr.mu.Lock()
	info := pr.info
	pr.mu.Unlock()
	if info.Running {
		info.LastSeq = pr.out.lastSeq()
		pr.stdinMu.Lock()
		info.StdinOpen = pr.stdin != nil
		pr.stdinMu.Unlock()
	}
	info.Argv = slices.Clone(info.Argv)
	info.Violations = slices.Clone(info.Violations)
	return info
}

func (pr *proc) kill() { pr.k.kill() }

// endStdin closes the stdin of a process that has ended.
func (pr *proc) endStdin() {
	pr.stdinMu.Lock()
	defer pr.stdinMu.Unlock()
	if pr.stdin != nil {
		_ = pr.stdin.Close()
		pr.stdin, pr.stdinEnded = nil, true
	}
}

// terminalDrainGrace bounds how long a terminal's output is read after
// its process has ended.
const terminalDrainGrace = 2 * time.Second

// terminalChunk is the most read from a terminal at once.
const terminalChunk = 32 << 10

// pumpTerminal copies what the process writes on its terminal into the
// output ring, as stdout, until the terminal hangs up (every holder of
// the slave is gone) or wait's deadline. It always reads, whatever the
// clients do: the ring is bounded and drops the oldest output, so a
// program that writes without end costs the daemon no more memory, and
// is never blocked by a client that does not read. The bytes are kept
// as they are: escape sequences are the client's to interpret.
func (pr *proc) pumpTerminal() {
	defer close(pr.pumped)
	buf := make([]byte, terminalChunk)
	for {
		n, err := pr.master.Read(buf)
		if n > 0 {
			_, _ = pr.outs[0].Write(buf[:n])
		}
		if err != nil {
			return // EIO: hung up; a deadline; or closed
		}
	}
}

// closeStdinOnce closes stdin for a client: false when it was never open
// or the client closed it already.
func (pr *proc) closeStdinOnce() bool {
	pr.stdinMu.Lock()
	defer pr.stdinMu.Unlock()
	if pr.stdinEnded {
		pr.stdinEnded = false // a second close is the client's own mistake
		return true
	}
	if pr.stdin == nil {
		return false
	}
	_ = pr.stdin.Close()
	pr.stdin = nil
	return true
}

// lookup finds a process by id, or else the latest one with that tag.
func (s *Service) lookup(idOrTag string) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.procs[idOrTag]; ok {
		return p, nil
	}
	var best *proc
	for _, p := range s.procs {
		if p.tag == idOrTag && (best == nil || p.started.After(best.started)) {
			best = p
		}
	}
	if best == nil {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, idOrTag)
	}
	return best, nil
}

// Get describes a process found by id or tag.
func (s *Service) Get(idOrTag string) (ProcessInfo, error) {
	pr, err := s.lookup(idOrTag)
	if err != nil {
		return ProcessInfo{}, err
	}
	return pr.snapshot(), nil
}

// List describes every known process, oldest first. Finished processes
// stay listed for Options.Retain unless removed.
func (s *Service) List() []ProcessInfo {
	s.mu.Lock()
	procs := make([]*proc, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	slices.SortFunc(procs, func(a, b *proc) int { return a.started.Compare(b.started) })
	out := make([]ProcessInfo, len(procs))
	for i, p := range procs {
		out[i] = p.snapshot()
	}
	return out
}

// Subscribe returns the process's events with seq greater than after:
// what the buffer still holds (with a dropped event for what it lost),
// then new ones as they come, ending with the exit event, after which the
// channel closes. It also closes when ctx ends.
func (s *Service) Subscribe(ctx context.Context, idOrTag string, after int64) (<-chan Event, error) {
	pr, err := s.lookup(idOrTag)
	if err != nil {
		return nil, err
	}
	if after < 0 {
		return nil, fmt.Errorf("%w: negative seq", ErrInvalid)
	}
	ch := make(chan Event, 16)
	go func() {
		defer close(ch)
		last := after
		for {
			evs, done, wake := pr.out.since(last)
			for _, ev := range evs {
				select {
				case ch <- ev:
					last = ev.Seq
				case <-ctx.Done():
					return
				}
			}
			if done {
				return
			}
			select {
			case <-wake:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// stdinTimeout bounds one SendStdin when ctx has no deadline: a process
// that does not read must not hold the caller forever.
const stdinTimeout = 30 * time.Second

// SendStdin writes data to the process's standard input.
func (s *Service) SendStdin(ctx context.Context, idOrTag string, data []byte) error {
	pr, err := s.lookup(idOrTag)
	if err != nil {
		return err
	}
	pr.stdinMu.Lock()
	defer pr.stdinMu.Unlock()
	if pr.stdin == nil {
		return fmt.Errorf("%w: process %s has no open stdin", ErrConflict, pr.id)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(stdinTimeout)
	}
	if err := pr.stdin.SetWriteDeadline(deadline); err != nil {
		return fmt.Errorf("stdin of %s: %w", pr.id, err)
	}
	// Stop the write early when the caller goes away.
	stop := context.AfterFunc(ctx, func() { _ = pr.stdin.SetWriteDeadline(time.Now()) })
	defer stop()
	if _, err := pr.stdin.Write(data); err != nil {
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil:
			return fmt.Errorf("stdin of %s: %w", pr.id, context.Cause(ctx))
		case errors.Is(err, os.ErrDeadlineExceeded):
			return fmt.Errorf("%w: process %s is not reading its stdin", ErrConflict, pr.id)
		case errors.Is(err, syscall.EPIPE), errors.Is(err, os.ErrClosed):
			return fmt.Errorf("%w: process %s closed its stdin", ErrConflict, pr.id)
		}
		return fmt.Errorf("stdin of %s: %w", pr.id, err)
	}
	return nil
}

// CloseStdin closes the process's standard input (it then reads EOF).
func (s *Service) CloseStdin(idOrTag string) error {
	pr, err := s.lookup(idOrTag)
	if err != nil {
		return err
	}
	if pr.term {
		return fmt.Errorf("%w: process %s reads a terminal, whose input is not closed: send ^D (\\u0004) for end of input", ErrConflict, pr.id)
	}
	if !pr.closeStdinOnce() {
		return fmt.Errorf("%w: process %s has no open stdin", ErrConflict, pr.id)
	}
	return nil
}

// Resize sets the size of a TTY process's terminal; the process gets
// SIGWINCH.
func (s *Service) Resize(idOrTag string, rows, cols int) error {
	if err := checkTermSize(rows, cols); err != nil {
		return err
	}
	pr, err := s.lookup(idOrTag)
	if err != nil {
		return err
	}
	if !pr.term {
		return fmt.Errorf("%w: process %s has no terminal (start it with tty)", ErrConflict, pr.id)
	}
	pr.stdinMu.Lock()
	defer pr.stdinMu.Unlock()
	if pr.stdin == nil {
		return fmt.Errorf("%w: process %s has ended", ErrConflict, pr.id)
	}
	if pr.resize != nil {
		// Bounded like a stdin write: the provider's daemon answers.
		ctx, cancel := context.WithTimeout(context.Background(), stdinTimeout)
		defer cancel()
		if err := pr.resize(ctx, rows, cols); err != nil {
			return fmt.Errorf("resize the terminal of %s: %w", pr.id, err)
		}
	} else if err := resizePTY(pr.stdin, uint16(rows), uint16(cols)); err != nil {
		return fmt.Errorf("resize the terminal of %s: %w", pr.id, err)
	}
	pr.mu.Lock()
	pr.info.Rows, pr.info.Cols = rows, cols
	pr.mu.Unlock()
	return nil
}

// Signal sends sig to a running process; SIGKILL kills its whole tree.
func (s *Service) Signal(idOrTag string, sig os.Signal) error {
	pr, err := s.lookup(idOrTag)
	if err != nil {
		return err
	}
	if !pr.running() {
		return fmt.Errorf("%w: process %s has ended", ErrConflict, pr.id)
	}
	if err := pr.p.Signal(sig); err != nil {
		return fmt.Errorf("signal %s: %w", pr.id, err)
	}
	return nil
}

// Wait waits until the process ends or ctx does, and describes it. When
// ctx ends first it returns the description so far with ctx's error.
func (s *Service) Wait(ctx context.Context, idOrTag string) (ProcessInfo, error) {
	pr, err := s.lookup(idOrTag)
	if err != nil {
		return ProcessInfo{}, err
	}
	select {
	case <-pr.done:
		return pr.snapshot(), nil
	case <-ctx.Done():
		return pr.snapshot(), ctx.Err()
	}
}

// Workspace is an ended or running process's workspace, for the files
// API.
type Workspace struct {
	// Dir is the host directory: while the process runs, only what its
	// sandbox started with (its view is Live's); once it has ended,
	// what it left there, committed by the sandbox's rules.
	Dir string
	// Spec is the sandbox's: its commit rules judge changes.
	Spec sandbox.Spec
	// Live is the process's sandbox while it runs; nil once it has
	// ended (Dir is then the workspace, with no sandbox over it).
	Live sandbox.Sandbox
	// Ended is closed when the process has ended and Dir holds its
	// workspace.
	Ended <-chan struct{}
}

// Workspace returns the workspace of a process started with its own
// sandbox: kept after the process ends until it is removed, forgotten
// (Options.Retain) or pushed out by later ones (Options.MaxKept). A
// process in a session's sandbox has none of its own (ErrNotFound).
func (s *Service) Workspace(idOrTag string) (Workspace, error) {
	pr, err := s.lookup(idOrTag)
	if err != nil {
		return Workspace{}, err
	}
	if pr.scope != "" || !pr.box.own {
		return Workspace{}, fmt.Errorf("%w: process %s runs in its session's sandbox: its files are the session's", ErrNotFound, pr.id)
	}
	ended := false
	select {
	case <-pr.done:
		ended = true
	default:
	}
	if !ended && pr.box.provider != "" {
		return Workspace{}, fmt.Errorf("%w: process %s runs in a sandbox on %s: its workspace is served once it has ended and been copied back", files.ErrSandboxLive, pr.id, pr.box.provider)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := Workspace{Dir: pr.box.workspace, Spec: pr.box.spec, Ended: pr.done}
	switch {
	case !ended:
		w.Live = pr.box.sb
	case !pr.kept:
		return Workspace{}, fmt.Errorf("%w: the workspace of process %s is no longer kept", ErrNotFound, pr.id)
	}
	if w.Dir == "" {
		return Workspace{}, fmt.Errorf("%w: process %s has no workspace", ErrNotFound, pr.id)
	}
	return w, nil
}

// keep records that the ended process pr's workspace is kept (when its
// sandbox committed into it), and removes the oldest kept ones past
// Options.MaxKept.
func (s *Service) keep(pr *proc) {
	s.mu.Lock()
	pr.kept = pr.box.kept && pr.box.workspace != ""
	var kept []*proc
	for _, p := range s.procs {
		if p.kept {
			kept = append(kept, p)
		}
	}
	var out []*proc
	if n := len(kept) - s.opts.MaxKept; n > 0 {
		slices.SortFunc(kept, func(a, b *proc) int { return a.endedAt().Compare(b.endedAt()) })
		for _, p := range kept[:n] {
			p.kept = false
			out = append(out, p)
		}
	}
	s.mu.Unlock()
	for _, p := range out {
		p.box.discard(s.opts.Log)
	}
}

func (pr *proc) endedAt() time.Time {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.info.EndedAt
}

// forget drops pr, and its kept workspace.
func (s *Service) forget(pr *proc) {
	s.mu.Lock()
	if s.procs[pr.id] == pr {
		delete(s.procs, pr.id)
	}
	kept := pr.kept
	pr.kept = false
	s.mu.Unlock()
	if kept {
		pr.box.discard(s.opts.Log)
	}
}

// Remove kills the process if it runs, waits for it to end (bounded by
// ctx) and forgets it, and its workspace.
func (s *Service) Remove(ctx context.Context, idOrTag string) error {
	pr, err := s.lookup(idOrTag)
	if err != nil {
		return err
	}
	pr.kill()
	select {
	case <-pr.done:
	case <-ctx.Done():
		return fmt.Errorf("remove %s: %w", pr.id, ctx.Err())
	}
	s.forget(pr)
	return nil
}

// forgetFinished drops processes that ended more than Retain ago, and
// their workspaces.
func (s *Service) forgetFinished(now time.Time) {
	s.mu.Lock()
	var old []*proc
	for _, p := range s.procs {
		if p.running() {
			continue
		}
		if now.Sub(p.endedAt()) > s.opts.Retain {
			old = append(old, p)
		}
	}
	s.mu.Unlock()
	for _, p := range old {
		s.forget(p)
	}
}

// procWriter feeds one output stream into the ring, holding back an
// incomplete trailing UTF-8 sequence until the next write completes it.
type procWriter struct {
	r      *ring
	stream string
	mu     sync.Mutex
	carry  []byte
}

func (w *procWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	data := p
	if len(w.carry) > 0 {
		data = append(w.carry, p...)
	}
	cut := completeUTF8(data)
	w.r.add(w.stream, data[:cut])
	w.carry = slices.Clone(data[cut:])
	return len(p), nil
}

func (w *procWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.r.add(w.stream, w.carry)
	w.carry = nil
}

// signals are the signals the API accepts, by name.
var signals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"TERM": syscall.SIGTERM, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2,
	"STOP": syscall.SIGSTOP, "CONT": syscall.SIGCONT, "WINCH": syscall.SIGWINCH,
}

// SignalNames lists the accepted signal names.
var SignalNames = []string{"SIGHUP", "SIGINT", "SIGQUIT", "SIGKILL", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGSTOP", "SIGCONT", "SIGWINCH"}

// ParseSignal accepts "SIGTERM", "TERM" or "term".
func ParseSignal(name string) (syscall.Signal, error) {
	n := strings.TrimPrefix(strings.ToUpper(name), "SIG")
	if sig, ok := signals[n]; ok {
		return sig, nil
	}
	return 0, fmt.Errorf("%w: unknown signal %q (want one of %s)", ErrInvalid, name, strings.Join(SignalNames, ", "))
}

package claude

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

var (
	errBusy   = errors.New("claude: a turn is already running")
	errClosed = errors.New("claude: session closed")
)

// writeTimeout bounds one write to the CLI's stdin (the CLI reads it
// continuously; a stuck CLI must not hang a turn).
const writeTimeout = 30 * time.Second

// drainWait is how long the end of the process waits for its stdout to
// reach EOF (a grandchild may hold the pipe) before giving up on it.
const drainWait = 2 * time.Second

// session is one running CLI process.
type session struct {
	opts Options
	host agent.Host
	cwd  string
	proc *agent.Proc

	wmu    sync.Mutex // serialises writes to stdin
	stdin  *os.File
	stdout *os.File
	stderr *agent.TailBuffer

	// mapper is used by the reader goroutine only.
	mapper *Mapper

	// ctx ends when the process is gone.
	ctx    context.Context
	cancel context.CancelFunc

	turnMu sync.Mutex // held while a turn runs

	mu       sync.Mutex
	turn     *turn
	native   string
	closing  bool
	requests map[string]context.CancelFunc // pending control requests from the CLI
	nextID   atomic.Int64

	readerDone chan struct{}
	exited     chan struct{} // the process exited and its output was read
	done       chan struct{} // exited, and the turn it failed has returned
	exit       agent.ProcExit
}

// turn is the running turn.
type turn struct {
	ctx          context.Context
	result       chan agent.Result
	interrupting atomic.Bool
}

var (
	_ agent.Session = (*session)(nil)
	_ agent.Exiter  = (*session)(nil)
)

// startSession starts the process and its reader goroutines.
func startSession(opts Options, c command, cfg agent.Config, host agent.Host, nativeID string) (*session, error) {
	cmd := &agent.Proc{Path: c.path, Args: c.args, Env: c.env, Dir: c.dir, Sandbox: cfg.Sandbox}
	inW, outR, errR, err := cmd.StartPiped()
	if err != nil {
		return nil, fmt.Errorf("claude: start %s: %w", c.path, err)
	}
	// The process's lifetime is the session's, not any request's: ctx
	// ends only once the process is gone (see wait).
	ctx, cancel := context.WithCancel(context.Background())

	m := NewMapper(cfg.Cwd)
	m.Raw = opts.Raw
	m.SetNativeSessionID(nativeID)
	s := &session{
		opts: opts, host: host, cwd: cfg.Cwd, proc: cmd,
		stdin: inW, stdout: outR, stderr: agent.NewTailBuffer(stderrTail),
		mapper: m, ctx: ctx, cancel: cancel, native: nativeID,
		requests:   map[string]context.CancelFunc{},
		readerDone: make(chan struct{}), exited: make(chan struct{}), done: make(chan struct{}),
	}
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		_, _ = io.Copy(s.stderr, errR)
	}()
	go s.read()
	go s.wait(errR, stderrDone)
	return s, nil
}

// wait reaps the process and closes done once its output is read.
func (s *session) wait(stderrR *os.File, stderrDone chan struct{}) {
	ex := s.proc.Wait()
	select {
	case <-s.readerDone:
	case <-time.After(drainWait):
		s.stdout.Close() // unblocks the reader
		<-s.readerDone
	}
	select {
	case <-stderrDone:
	case <-time.After(drainWait):
	}
	stderrR.Close() // ends the copy if a grandchild still holds the pipe
	s.mu.Lock()
	s.exit = ex
	for _, cancel := range s.requests {
		cancel()
	}
	s.mu.Unlock()
	s.wmu.Lock()
	s.stdin.Close()
	s.wmu.Unlock()
	close(s.exited) // a turn in flight fails with the exit (Prompt watches exited)
	s.cancel()
	close(s.done) // the engine records how the turn and the session ended
}

// read translates the CLI's stdout until it ends.
func (s *session) read() {
	defer close(s.readerDone)
	defer s.stdout.Close()
	lr := newLineReader(s.stdout, s.opts.MaxLine)
	for {
		line, skipped, err := lr.next()
		if err != nil {
			return
		}
		if skipped > 0 {
			_ = s.host.Emit(s.ctx, event.New(event.SourceAgent, &event.Error{
				Code:    "output_too_long",
				Message: fmt.Sprintf("skipped a line of %d bytes from the CLI (the limit is %d)", skipped, s.opts.MaxLine),
			}))
			continue
		}
		s.handle(line)
	}
}

func (s *session) currentTurn() *turn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.turn
}

// handle maps one line and acts on it.
func (s *session) handle(line []byte) {
	t := s.currentTurn()
	s.mapper.Interrupting = t != nil && t.interrupting.Load()
	out := s.mapper.Map(line)
	if len(out.Events) > 0 {
		_ = s.host.Emit(s.ctx, out.Events...)
	}
	if id := out.NativeSessionID; id != "" {
		s.mu.Lock()
		s.native = id
		s.mu.Unlock()
		_ = s.host.SetNativeSessionID(s.ctx, id)
	}
	if out.Control != nil {
		s.control(out.Control, t)
	}
	if out.Result != nil && t != nil {
		select {
		case t.result <- *out.Result:
		default:
		}
	}
}

// control handles the CLI's control messages.
func (s *session) control(env *envelope, t *turn) {
	switch env.Type {
	case "control_response":
		// Acknowledgements of our interrupts; the turn's result is what
		// counts.
	case "control_cancel_request":
		s.mu.Lock()
		if cancel := s.requests[env.RequestID]; cancel != nil {
			cancel()
		}
		s.mu.Unlock()
	case "control_request":
		var sub struct {
			Subtype string `json:"subtype"`
		}
		_ = json.Unmarshal(env.Request, &sub)
		if sub.Subtype != "can_use_tool" {
			s.respondError(env.RequestID, "agentbox does not handle control requests of subtype "+strconv.Quote(sub.Subtype))
			return
		}
		var req canUseTool
		if err := json.Unmarshal(env.Request, &req); err != nil {
			s.respondError(env.RequestID, "unreadable can_use_tool request: "+err.Error())
			return
		}
		itemID := s.mapper.ToolItemID(req.ToolUseID)
		base := s.ctx
		if t != nil {
			base = t.ctx
		}
		ctx, cancel := context.WithCancel(base)
		stop := context.AfterFunc(s.ctx, cancel)
		s.mu.Lock()
		s.requests[env.RequestID] = cancel
		s.mu.Unlock()
		go func() {
			defer func() {
				stop()
				cancel()
				s.mu.Lock()
				delete(s.requests, env.RequestID)
				s.mu.Unlock()
			}()
			var res permissionResult
			if req.ToolName == "AskUserQuestion" {
				res = s.ask(ctx, &req, itemID)
			} else {
				pr := permissionRequest(&req, itemID, s.cwd, s.readInCwd)
				ans, err := s.host.RequestPermission(ctx, pr)
				if err != nil {
					ans = agent.PermissionAnswer{Decision: event.DecisionDeny, By: event.ByDaemon, Message: "agentbox could not ask for permission: " + err.Error()}
				}
				res = permissionAnswer(&req, ans)
			}
			s.respond(env.RequestID, res)
		}()
	}
}

// ask puts an AskUserQuestion call to the user, one question at a time.
func (s *session) ask(ctx context.Context, req *canUseTool, itemID string) permissionResult {
	qs, err := questions(req.Input, itemID)
	if err != nil {
		return permissionResult{Behavior: "deny", Message: err.Error()}
	}
	var answers []agent.Answer
	for _, q := range qs {
		a, err := s.host.AskQuestion(ctx, q)
		if err != nil || a.Cancelled {
			answers = append(answers, agent.Answer{Cancelled: true})
			break
		}
		answers = append(answers, a)
	}
	return questionAnswer(req.Input, answers)
}

// readInCwd reads a file inside the session's directory (at most 1 MiB),
// for the diff of a permission request.
func (s *session) readInCwd(path string) (string, bool) { return agent.ReadFileIn(s.cwd, path, 1<<20) }

func (s *session) respond(id string, res permissionResult) {
	_ = s.writeJSON(context.Background(), controlResponseLine{Type: "control_response",
		Response: controlResponse{Subtype: "success", RequestID: id, Response: res}})
}

func (s *session) respondError(id, msg string) {
	_ = s.writeJSON(context.Background(), controlResponseLine{Type: "control_response",
		Response: controlResponse{Subtype: "error", RequestID: id, Error: msg}})
}

// writeJSON writes one line to the CLI's stdin, within ctx and
// writeTimeout.
func (s *session) writeJSON(ctx context.Context, v any) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := agent.WriteJSONLine(ctx, s.stdin, v, writeTimeout); err != nil {
		return fmt.Errorf("claude: write to the CLI: %w", err)
	}
	return nil
}

// Prompt implements agent.Session.
func (s *session) Prompt(ctx context.Context, in agent.Input) (agent.Result, error) {
	if !s.turnMu.TryLock() {
		return agent.Result{}, errBusy
	}
	defer s.turnMu.Unlock()
	select {
	case <-s.exited:
		return agent.Result{}, s.exitError()
	default:
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return agent.Result{}, errClosed
	}
	native := s.native
	t := &turn{ctx: ctx, result: make(chan agent.Result, 1)}
	s.turn = t
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.turn = nil
		s.mu.Unlock()
	}()

	msg, err := userMessageLine(in, native)
	if err != nil {
		return agent.Result{}, err
	}
	if err := s.writeJSON(ctx, msg); err != nil {
		select {
		case <-s.exited:
			return agent.Result{}, s.exitError()
		case <-time.After(100 * time.Millisecond):
		}
		if ctx.Err() != nil {
			return agent.Result{StopReason: event.StopInterrupted}, nil
		}
		return agent.Result{}, err
	}
	select {
	case r := <-t.result:
		return r, nil
	case <-s.exited:
		select {
		case r := <-t.result: // it ended the turn just before it exited
			return r, nil
		default:
		}
		return agent.Result{}, s.exitError()
	case <-ctx.Done():
		return s.interrupt(t)
	}
}

// interrupt asks the CLI to stop the turn and waits for its result; a CLI
// that does not stop in time is killed.
func (s *session) interrupt(t *turn) (agent.Result, error) {
	select {
	case r := <-t.result: // it had just finished
		return r, nil
	default:
	}
	t.interrupting.Store(true)
	id := fmt.Sprintf("agentbox-interrupt-%d", s.nextID.Add(1))
	wctx, cancel := context.WithTimeout(context.Background(), s.opts.InterruptTimeout)
	err := s.writeJSON(wctx, controlRequestLine{Type: "control_request", RequestID: id, Request: map[string]string{"subtype": "interrupt"}})
	cancel()
	timer := time.NewTimer(s.opts.InterruptTimeout)
	defer timer.Stop()
	if err == nil {
		select {
		case r := <-t.result:
			r.StopReason = event.StopInterrupted
			return r, nil
		case <-s.exited:
			return agent.Result{StopReason: event.StopInterrupted, Message: "the CLI exited while it was interrupted"}, nil
		case <-timer.C:
		}
	}
	s.kill()
	select {
	case <-s.exited:
	case <-time.After(2 * drainWait):
	}
	return agent.Result{StopReason: event.StopInterrupted,
		Message: fmt.Sprintf("the CLI did not stop within %s of the interrupt and was killed", s.opts.InterruptTimeout)}, nil
}

// kill sends SIGKILL to the process group.
func (s *session) kill() { _ = s.proc.Kill() }

// Close implements agent.Session: close stdin (the CLI exits on EOF when
// idle), then SIGTERM the process group, then SIGKILL it, each after
// CloseGrace, never past ctx.
func (s *session) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.wmu.Lock()
	s.stdin.Close()
	s.wmu.Unlock()
	return s.proc.Stop(ctx, s.done, s.opts.CloseGrace, true)
}

// Done implements agent.Exiter.
func (s *session) Done() <-chan struct{} { return s.done }

// Exit implements agent.Exiter.
func (s *session) Exit() event.SessionEnded {
	s.mu.Lock()
	ex, closing := s.exit, s.closing
	s.mu.Unlock()
	return ex.Ended("the claude CLI", closing, s.stderr.String())
}

// exitError is a turn's error when the process is gone.
func (s *session) exitError() error {
	s.mu.Lock()
	desc := s.exit.Desc
	s.mu.Unlock()
	if tail := s.stderr.Summary(); tail != "" {
		return fmt.Errorf("claude: the CLI %s: %s", desc, tail)
	}
	return fmt.Errorf("claude: the CLI %s", desc)
}

// userMessageLine is the stream-json user message for a turn's input.
func userMessageLine(in agent.Input, sessionID string) (userLine, error) {
	var content []any
	for _, p := range in.Content {
		switch p.Type {
		case event.PartText:
			if p.Text != "" {
				content = append(content, map[string]string{"type": "text", "text": p.Text})
			}
		case event.PartImage:
			switch {
			case p.Data != "":
				if _, err := base64.StdEncoding.DecodeString(p.Data); err != nil {
					return userLine{}, fmt.Errorf("claude: image data is not base64: %w", err)
				}
				content = append(content, map[string]any{"type": "image", "source": map[string]string{
					"type": "base64", "media_type": orDefault(p.MimeType, "image/png"), "data": p.Data}})
			case strings.HasPrefix(p.URI, "https://") || strings.HasPrefix(p.URI, "http://"):
				content = append(content, map[string]any{"type": "image", "source": map[string]string{"type": "url", "url": p.URI}})
			default:
				content = append(content, map[string]string{"type": "text", "text": "(attached image: " + orDefault(p.Path, p.URI) + ")"})
			}
		case event.PartFile:
			switch {
			case p.Data != "" && p.MimeType == "application/pdf":
				content = append(content, map[string]any{"type": "document", "source": map[string]string{
					"type": "base64", "media_type": p.MimeType, "data": p.Data}})
			case p.Data != "":
				b, err := base64.StdEncoding.DecodeString(p.Data)
				if err != nil {
					return userLine{}, fmt.Errorf("claude: file data is not base64: %w", err)
				}
				content = append(content, map[string]string{"type": "text",
					"text": fmt.Sprintf("Attached file %s:\n%s", orDefault(p.Path, orDefault(p.URI, "(unnamed)")), b)})
			default:
				content = append(content, map[string]string{"type": "text", "text": "(attached file: " + orDefault(p.Path, p.URI) + ")"})
			}
		}
	}
	if len(content) == 0 {
		return userLine{}, errors.New("claude: the message is empty")
	}
	return userLine{Type: "user", Message: userMessage{Role: "user", Content: content}, SessionID: sessionID}, nil
}

package pi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

var (
	errBusy   = errors.New("pi: a turn is already running")
	errClosed = errors.New("pi: session closed")
)

// writeTimeout bounds one write to pi's stdin.
const writeTimeout = 30 * time.Second

// drainWait is how long the end of the process waits for its output to be
// read (a grandchild may hold the pipe) before giving up on it.
const drainWait = 2 * time.Second

// session is one running pi process.
type session struct {
	opts Options
	host agent.Host
	cwd  string
	dir  string // the private agent directory, removed at the end
	proc *agent.Proc

	wmu    sync.Mutex // serialises writes to stdin
	stdin  *os.File
	stdout *os.File
	stderr *agent.TailBuffer

	// mapper is used by the reader goroutine only (Decline aside).
	mapper *Mapper

	// ctx ends when the process is gone: pending permission requests
	// are cancelled with it.
	ctx    context.Context
	cancel context.CancelFunc

	turnMu sync.Mutex // held while a turn runs

	mu        sync.Mutex
	turn      *turn
	closing   bool
	nextID    int
	responses map[string]chan *Line // command id → its response

	readerDone chan struct{}
	exited     chan struct{} // the process exited and its output was read
	done       chan struct{} // exited, and the turn it failed has returned
	exit       agent.ProcExit
}

// turn is the running turn.
type turn struct {
	ctx    context.Context
	result chan agent.Result
}

var (
	_ agent.Session = (*session)(nil)
	_ agent.Exiter  = (*session)(nil)
)

// startSession starts pi (on the host or in the session's sandbox) and the
// goroutines reading its output.
func startSession(opts Options, c command, cfg agent.Config, host agent.Host, dir string) (*session, error) {
	proc := &agent.Proc{Path: c.path, Args: c.args, Env: c.env, Dir: c.dir, Sandbox: cfg.Sandbox}
	inW, outR, errR, err := proc.StartPiped()
	if err != nil {
		return nil, fmt.Errorf("pi: start %s: %w", c.path, err)
	}

	// The process's lifetime is the session's, not the request's that
	// started it: ctx ends only once the process is gone (see wait).
	ctx, cancel := context.WithCancel(context.Background())
	m := NewMapper(cfg.Cwd)
	m.Raw = opts.Raw
	s := &session{
		opts: opts, host: host, cwd: cfg.Cwd, dir: dir, proc: proc,
		stdin: inW, stdout: outR, stderr: agent.NewTailBuffer(stderrTail), mapper: m,
		ctx: ctx, cancel: cancel, responses: map[string]chan *Line{},
		readerDone: make(chan struct{}), exited: make(chan struct{}), done: make(chan struct{}),
	}
	m.ReadFile = s.readInCwd
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
	stderrR.Close()
	s.mu.Lock()
	s.exit = ex
	s.mu.Unlock()
	s.wmu.Lock()
	s.stdin.Close()
	s.wmu.Unlock()
	s.cancel()      // pending permission requests end with the process
	close(s.exited) // a turn in flight fails with the exit (Prompt watches exited)
	_ = os.RemoveAll(s.dir)
	close(s.done) // the engine records how the turn and the session ended
}

// read translates pi's stdout until it ends.
func (s *session) read() {
	defer close(s.readerDone)
	defer s.stdout.Close()
	r := bufio.NewReaderSize(s.stdout, 64<<10)
	for {
		line, skipped, err := readLine(r, s.opts.MaxLine)
		if err != nil {
			return
		}
		if skipped > 0 {
			_ = s.host.Emit(s.ctx, event.New(event.SourceAgent, &event.Error{
				Code:    "output_too_long",
				Message: fmt.Sprintf("skipped a line of %d bytes from pi (the limit is %d)", skipped, s.opts.MaxLine),
			}))
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		s.handle(line)
	}
}

// readLine reads one LF-terminated line (pi's framing: LF only, a trailing
// CR stripped) of at most max bytes; a longer one is consumed and its size
// returned instead.
func readLine(r *bufio.Reader, max int) (line []byte, skipped int, err error) {
	var buf []byte
	n := 0
	for {
		chunk, err := r.ReadSlice('\n')
		n += len(chunk)
		if n <= max+1 {
			buf = append(buf, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && n == 0 {
			return nil, 0, err
		}
		break
	}
	if n > max+1 {
		return nil, n, nil
	}
	buf = bytes.TrimSuffix(buf, []byte("\n"))
	return bytes.TrimSuffix(buf, []byte("\r")), 0, nil
}

func (s *session) currentTurn() *turn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.turn
}

// handle maps one line and acts on it.
func (s *session) handle(line []byte) {
	out := s.mapper.Map(line)
	if len(out.Events) > 0 {
		_ = s.host.Emit(s.ctx, out.Events...)
	}
	if r := out.Response; r != nil {
		s.mu.Lock()
		ch := s.responses[r.ID]
		delete(s.responses, r.ID)
		s.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
	if out.Dismiss != "" {
		_ = s.writeJSON(context.Background(), uiResponse{Type: "extension_ui_response", ID: out.Dismiss, Cancelled: true})
	}
	if p := out.Permission; p != nil {
		s.askPermission(p)
	}
	if out.Result != nil {
		if t := s.currentTurn(); t != nil {
			select {
			case t.result <- *out.Result:
			default:
			}
		}
	}
}

// askPermission puts a tool call to the host and answers the extension.
// It does not block the reader: pi waits for the answer, and other lines
// (an abort's) must still be read meanwhile.
func (s *session) askPermission(p *Permission) {
	base := s.ctx
	if t := s.currentTurn(); t != nil {
		base = t.ctx
	}
	ctx, cancel := context.WithCancel(base)
	stop := context.AfterFunc(s.ctx, cancel)
	go func() {
		defer cancel()
		defer stop()
		ans, err := s.host.RequestPermission(ctx, p.Request)
		if err != nil {
			ans = agent.PermissionAnswer{Decision: event.DecisionDeny}
		}
		ok := ans.Decision == event.DecisionAllow
		if !ok {
			s.mapper.Decline(p.ToolCallID)
		}
		_ = s.writeJSON(context.Background(), uiResponse{Type: "extension_ui_response", ID: p.UIID, Confirmed: &ok})
	}()
}

// readInCwd reads a file inside the session's directory (at most 1 MiB),
// for the diff of an edit.
func (s *session) readInCwd(path string) (string, bool) { return agent.ReadFileIn(s.cwd, path, 1<<20) }

// writeJSON writes one line to pi's stdin within ctx and writeTimeout.
func (s *session) writeJSON(ctx context.Context, v any) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := agent.WriteJSONLine(ctx, s.stdin, v, writeTimeout); err != nil {
		return fmt.Errorf("pi: write to pi: %w", err)
	}
	return nil
}

// call sends a command and waits for its response.
func (s *session) call(ctx context.Context, typ string, cmd func(id string) any) (*Line, error) {
	s.mu.Lock()
	s.nextID++
	id := "agentbox-" + strconv.Itoa(s.nextID)
	ch := make(chan *Line, 1)
	s.responses[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.responses, id)
		s.mu.Unlock()
	}()
	if err := s.writeJSON(ctx, cmd(id)); err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		if r.Success == nil || !*r.Success {
			return r, fmt.Errorf("pi: %s failed: %s", typ, orDefault(jsonString(r.Error), "no reason given"))
		}
		return r, nil
	case <-s.exited:
		return nil, s.exitError()
	case <-ctx.Done():
		return nil, fmt.Errorf("pi: no answer to %s: %w", typ, ctx.Err())
	}
}

// sessionID asks pi for its session id.
func (s *session) sessionID(ctx context.Context) (string, error) {
	r, err := s.call(ctx, "get_state", func(id string) any { return simpleCommand{ID: id, Type: "get_state"} })
	if err != nil {
		return "", err
	}
	var st struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(r.Data, &st); err != nil || st.SessionID == "" {
		return "", fmt.Errorf("pi: get_state named no session id (%s)", agent.Clip(string(r.Data), 200))
	}
	return st.SessionID, nil
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
	cmd, err := promptFor(in)
	if err != nil {
		return agent.Result{}, err
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return agent.Result{}, errClosed
	}
	t := &turn{ctx: ctx, result: make(chan agent.Result, 1)}
	s.turn = t
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.turn = nil
		s.mu.Unlock()
	}()

	// The prompt's response comes at once (pi accepted it); its events
	// follow, up to agent_end.
	if _, err := s.call(ctx, "prompt", func(id string) any { cmd.ID = id; return cmd }); err != nil {
		if ctx.Err() != nil {
			return s.interrupt(t)
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

// promptFor builds the prompt command of a turn's input.
func promptFor(in agent.Input) (promptCommand, error) {
	cmd := promptCommand{Type: "prompt"}
	var text []string
	for _, p := range in.Content {
		switch p.Type {
		case event.PartText:
			text = append(text, p.Text)
		case event.PartImage:
			if p.Data != "" {
				cmd.Images = append(cmd.Images, promptImage{Type: "image", Data: p.Data, MimeType: orDefault(p.MimeType, "image/png")})
			} else {
				text = append(text, "(attached image: "+orDefault(p.Path, p.URI)+")")
			}
		case event.PartFile:
			text = append(text, "(attached file: "+orDefault(p.Path, p.URI)+")")
		}
	}
	cmd.Message = strings.Join(text, "\n")
	if strings.TrimSpace(cmd.Message) == "" && len(cmd.Images) == 0 {
		return cmd, errors.New("pi: the message is empty")
	}
	return cmd, nil
}

// interrupt sends abort and waits for the run's end; a pi that does not
// stop in time is killed.
func (s *session) interrupt(t *turn) (agent.Result, error) {
	select {
	case r := <-t.result: // it had just finished
		return r, nil
	default:
	}
	wctx, cancel := context.WithTimeout(context.Background(), s.opts.InterruptTimeout)
	defer cancel()
	// abort's response comes after agent_end; the turn ends at agent_end.
	err := s.writeJSON(wctx, simpleCommand{ID: "agentbox-abort", Type: "abort"})
	if err == nil {
		select {
		case r := <-t.result:
			r.StopReason = event.StopInterrupted
			return r, nil
		case <-s.exited:
			return agent.Result{StopReason: event.StopInterrupted, Message: "pi exited while it was interrupted"}, nil
		case <-wctx.Done():
		}
	}
	s.kill()
	select {
	case <-s.exited:
	case <-time.After(2 * drainWait):
	}
	return agent.Result{StopReason: event.StopInterrupted,
		Message: fmt.Sprintf("pi did not stop within %s of the interrupt and was killed", s.opts.InterruptTimeout)}, nil
}

func (s *session) kill() { _ = s.proc.Kill() }

// Close implements agent.Session: close stdin (pi exits on EOF), then
// SIGTERM, then SIGKILL, each after CloseGrace, never past ctx.
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
	return ex.Ended("pi", closing, s.stderr.String())
}

// exitError is a turn's error when the process is gone.
func (s *session) exitError() error {
	s.mu.Lock()
	desc := s.exit.Desc
	s.mu.Unlock()
	if desc == "" {
		desc = "exited"
	}
	if tail := s.stderr.Summary(); tail != "" {
		return fmt.Errorf("pi %s: %s", desc, tail)
	}
	return fmt.Errorf("pi %s", desc)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

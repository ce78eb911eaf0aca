package codex

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// message is one JSON-RPC message from either side. The server omits
// "jsonrpc"; a message with a method and an id is a request, with a method
// and no id a notification, without a method a response.
type message struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *rpcError       `json:"error,omitempty"`
}

// rpcError is a JSON-RPC error object.
type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *rpcError) Error() string {
	return fmt.Sprintf("codex app-server: %s (code %d)", e.Message, e.Code)
}

// JSON-RPC error codes used in replies.
const (
	codeMethodNotFound = -32601
	codeInternal       = -32603
)

// isRequest reports whether m is a request from the peer.
func (m *message) isRequest() bool { return m.Method != "" && len(m.ID) > 0 && string(m.ID) != "null" }

// parseMessage decodes one line. Blank lines and non-objects are errors.
func parseMessage(line []byte) (*message, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return nil, errors.New("not a JSON object")
	}
	var m message
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// threadIDOf returns the thread a notification or request is about: its
// params' threadId, or params.thread.id.
func threadIDOf(params json.RawMessage) string {
	var p struct {
		ThreadID string `json:"threadId"`
		Thread   struct {
			ID string `json:"id"`
		} `json:"thread"`
	}
	if json.Unmarshal(params, &p) != nil {
		return ""
	}
	if p.ThreadID != "" {
		return p.ThreadID
	}
	return p.Thread.ID
}

// lineReader reads newline-terminated lines, dropping (and reporting the
// size of) any longer than max.
type lineReader struct {
	r   *bufio.Reader
	max int
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

func (lr *lineReader) next() (line []byte, skipped int, err error) {
	var buf []byte
	n, over := 0, false
	for {
		chunk, err := lr.r.ReadSlice('\n')
		n += len(chunk)
		if !over && len(buf)+len(chunk) > lr.max+1 {
			over, buf = true, nil
		}
		if !over {
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
	if over {
		return nil, n, nil
	}
	return bytes.TrimSuffix(buf, []byte("\n")), 0, nil
}

// threadHandler receives what the server says about one thread.
type threadHandler interface {
	notify(m *message)
	request(m *message)
	serverGone()
}

// server is one running `codex app-server` and the JSON-RPC peer over its
// stdio: a shared one on the host (under agent.StartTree, like every host
// agent process), or a session's own inside its sandbox.
type server struct {
	opts Options
	proc *agent.Proc
	key  string // the API key it runs with (the servers map key)

	wmu   sync.Mutex
	stdin *os.File

	stderr  *agent.TailBuffer
	stderrR *os.File // the parent's end of the server's stderr

	mu       sync.Mutex
	nextID   int64
	pending  map[string]chan *message
	threads  map[string]threadHandler
	early    map[string][]*message // messages for threads not registered yet
	exited   bool
	exitCode int
	exitDesc string

	done chan struct{} // closed once the process is gone and its output read
}

// startServer starts the process (inside sb when it is set: a session's
// own server) and runs the initialize handshake.
func startServer(ctx context.Context, opts Options, c command, key string, sb sandbox.Sandbox) (*server, error) {
	s := &server{opts: opts, key: key, stderr: agent.NewTailBuffer(stderrTail),
		pending: map[string]chan *message{}, threads: map[string]threadHandler{},
		early: map[string][]*message{}, done: make(chan struct{})}
	// The process outlives the request that started it: it is stopped by
	// stop/kill, never by a context.
	s.proc = &agent.Proc{Path: c.path, Args: c.args, Env: c.env, Dir: c.dir, Sandbox: sb}
	in, stdout, errR, err := s.proc.StartPiped()
	if err != nil {
		return nil, fmt.Errorf("codex: start %s: %w", c.path, err)
	}
	s.stdin, s.stderrR = in, errR
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		_, _ = io.Copy(s.stderr, errR)
	}()
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		s.read(stdout)
	}()
	go s.wait(readerDone, stdout, stderrDone)

	ictx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	var res json.RawMessage
	if err := s.call(ictx, "initialize", map[string]any{
		"clientInfo": map[string]string{"name": "agentbox", "title": "agentbox", "version": "1"},
	}, &res); err != nil {
		s.kill()
		<-s.done
		return nil, fmt.Errorf("codex: initialize: %w%s", err, s.stderrSuffix())
	}
	if err := s.send(ictx, message{Method: "initialized"}); err != nil {
		s.kill()
		<-s.done
		return nil, fmt.Errorf("codex: initialized: %w", err)
	}
	return s, nil
}

func (s *server) stderrSuffix() string {
	if t := s.stderr.Summary(); t != "" {
		return ": " + t
	}
	return ""
}

// wait reaps the process, then fails every pending call and tells every
// thread.
func (s *server) wait(readerDone chan struct{}, stdout *os.File, stderrDone chan struct{}) {
	ex := s.proc.Wait()
	code, desc := ex.Code, ex.Desc
	select {
	case <-readerDone:
	case <-time.After(drainWait): // a grandchild holds the pipe
		stdout.Close()
		<-readerDone
	}
	stdout.Close()
	select {
	case <-stderrDone:
	case <-time.After(drainWait):
	}
	{
		s.stderrR.Close() // ends the copy if a grandchild still holds the pipe
	}
	s.mu.Lock()
	s.exited, s.exitCode, s.exitDesc = true, code, desc
	pending := s.pending
	s.pending = map[string]chan *message{}
	threads := make([]threadHandler, 0, len(s.threads))
	for _, h := range s.threads {
		threads = append(threads, h)
	}
	s.mu.Unlock()
	close(s.done)
	for _, ch := range pending {
		close(ch)
	}
	for _, h := range threads {
		h.serverGone()
	}
}

// read dispatches the server's stdout until it ends.
func (s *server) read(r io.Reader) {
	lr := newLineReader(r, s.opts.MaxLine)
	for {
		line, skipped, err := lr.next()
		if err != nil {
			return
		}
		if skipped > 0 || len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		m, err := parseMessage(line)
		if err != nil {
			continue
		}
		s.dispatch(m)
	}
}

func (s *server) dispatch(m *message) {
	if m.Method == "" {
		s.mu.Lock()
		ch := s.pending[string(m.ID)]
		delete(s.pending, string(m.ID))
		s.mu.Unlock()
		if ch != nil {
			ch <- m
		}
		return
	}
	tid := threadIDOf(m.Params)
	s.mu.Lock()
	h := s.threads[tid]
	if h == nil && tid != "" && m.Method != "thread/started" && len(s.early[tid]) < 1000 {
		// A thread's first notifications can come before thread/start's
		// response registered it.
		s.early[tid] = append(s.early[tid], m)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	switch {
	case h != nil && m.isRequest():
		h.request(m)
	case h != nil:
		h.notify(m)
	case m.isRequest():
		go s.replyError(m.ID, codeMethodNotFound, "agentbox does not handle "+m.Method+" outside a session")
	}
}

// register routes tid's messages to h and hands it what came early.
func (s *server) register(tid string, h threadHandler) bool {
	s.mu.Lock()
	if s.exited {
		s.mu.Unlock()
		return false
	}
	s.threads[tid] = h
	early := s.early[tid]
	delete(s.early, tid)
	s.mu.Unlock()
	for _, m := range early {
		if m.isRequest() {
			h.request(m)
		} else {
			h.notify(m)
		}
	}
	return true
}

func (s *server) unregister(tid string) {
	s.mu.Lock()
	delete(s.threads, tid)
	delete(s.early, tid)
	s.mu.Unlock()
}

// call sends a request and decodes its result into out (may be nil).
func (s *server) call(ctx context.Context, method string, params, out any) error {
	p, err := json.Marshal(params)
	if err != nil {
		return err
	}
	ch := make(chan *message, 1)
	s.mu.Lock()
	if s.exited {
		s.mu.Unlock()
		return s.goneError()
	}
	s.nextID++
	id := json.RawMessage(fmt.Sprintf("%d", s.nextID))
	s.pending[string(id)] = ch
	s.mu.Unlock()
	drop := func() {
		s.mu.Lock()
		delete(s.pending, string(id))
		s.mu.Unlock()
	}
	if err := s.send(ctx, message{ID: id, Method: method, Params: p}); err != nil {
		drop()
		return err
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return s.goneError()
		}
		if m.Error != nil {
			return m.Error
		}
		if out != nil && len(m.Result) > 0 {
			return json.Unmarshal(m.Result, out)
		}
		return nil
	case <-ctx.Done():
		drop()
		return ctx.Err()
	}
}

// reply answers a server request.
func (s *server) reply(id json.RawMessage, result any) error {
	b, err := json.Marshal(result)
	if err != nil {
		return err
	}
	return s.send(context.Background(), message{ID: id, Result: b})
}

func (s *server) replyError(id json.RawMessage, code int, msg string) {
	_ = s.send(context.Background(), message{ID: id, Error: &rpcError{Code: code, Message: msg}})
}

// send writes one message line, bounded by writeTimeout.
func (s *server) send(ctx context.Context, m message) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := agent.WriteJSONLine(ctx, s.stdin, m, writeTimeout); err != nil {
		return fmt.Errorf("codex: write to the app-server: %w", err)
	}
	return nil
}

// goneError describes the dead process.
func (s *server) goneError() error {
	s.mu.Lock()
	desc := s.exitDesc
	s.mu.Unlock()
	if desc == "" {
		desc = "is gone"
	}
	return fmt.Errorf("codex: the app-server %s%s", desc, s.stderrSuffix())
}

// exit returns the exit code and description once the process is gone.
func (s *server) exit() (int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exitCode, s.exitDesc
}

func (s *server) kill() { _ = s.proc.Kill() }

// pid is the server's host pid.
func (s *server) pid() int { return s.proc.Pid() }

// stop closes stdin (the server exits on EOF), then escalates to SIGTERM
// and SIGKILL after grace each, never past ctx.
func (s *server) stop(ctx context.Context, grace time.Duration) {
	s.wmu.Lock()
	_ = s.stdin.Close()
	s.wmu.Unlock()
	for step := 0; step < 2; step++ {
		if step == 1 {
			_ = s.proc.Terminate()
		}
		t := time.NewTimer(grace)
		select {
		case <-s.done:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			s.kill()
			return
		case <-t.C:
		}
	}
	s.kill()
	select {
	case <-s.done:
	case <-ctx.Done():
	}
}

// exitedYet reports whether the process is gone.
func (s *server) exitedYet() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

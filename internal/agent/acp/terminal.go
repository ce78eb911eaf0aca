package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	wire "github.com/agentbox/agentbox/internal/acpwire"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// The client side of terminal/*: the agent asks agentbox to run a command
// and reads its output later. Each command is an agent.Proc, so it runs in
// the session's sandbox when there is one, exactly like the agent itself,
// in the session's directory (or the absolute cwd the agent names), with
// the agent's own environment plus the variables of the request.

// Bounds of terminal output.
const (
	// defaultTerminalOutput is the output kept when the agent sets no
	// outputByteLimit; maxTerminalOutput caps what it may ask for.
	defaultTerminalOutput = 1 << 20
	maxTerminalOutput     = 16 << 20
	// maxTerminals bounds the terminals one session holds unreleased.
	maxTerminals = 64
)

var errNoTerminal = errors.New("no such terminal (never created, or released)")

// terminals are the terminals of one session.
type terminals struct {
	cwd     string          // the session's directory, the default cwd
	env     []string        // the agent's environment ("K=V")
	sandbox sandbox.Sandbox // nil: on the host

	mu     sync.Mutex
	next   int
	byID   map[string]*terminal
	closed bool
}

func newTerminals(cwd string, env []string, sb sandbox.Sandbox) *terminals {
	return &terminals{cwd: cwd, env: env, sandbox: sb, byID: map[string]*terminal{}}
}

// terminal is one command and its output.
type terminal struct {
	proc   *agent.Proc
	out    *agent.TailBuffer
	exited chan struct{} // closed once exit is set and the output is read
	exit   agent.ProcExit
}

// handle serves the terminal/* methods; ok is false for other methods.
func (ts *terminals) handle(ctx context.Context, method string, params json.RawMessage) (result any, rerr *wire.RequestError, ok bool) {
	switch method {
	case wire.ClientMethodTerminalCreate:
		var req wire.CreateTerminalRequest
		if err := decodeParams(params, &req); err != nil {
			return nil, err, true
		}
		id, err := ts.create(req)
		if err != nil {
			return nil, wire.NewInvalidParams(map[string]any{"error": err.Error()}), true
		}
		return wire.CreateTerminalResponse{TerminalId: id}, nil, true
	case wire.ClientMethodTerminalOutput:
		var req wire.TerminalOutputRequest
		t, rerr := ts.lookup(params, &req, &req.TerminalId)
		if rerr != nil {
			return nil, rerr, true
		}
		out, truncated := snapshot(t.out)
		resp := wire.TerminalOutputResponse{Output: out, Truncated: truncated}
		select {
		case <-t.exited:
			code, sig := exitStatus(t.exit)
			resp.ExitStatus = &wire.TerminalExitStatus{ExitCode: code, Signal: sig}
		default:
		}
		return resp, nil, true
	case wire.ClientMethodTerminalWaitForExit:
		var req wire.WaitForTerminalExitRequest
		t, rerr := ts.lookup(params, &req, &req.TerminalId)
		if rerr != nil {
			return nil, rerr, true
		}
		select {
		case <-t.exited:
		case <-ctx.Done():
			// The agent withdrew the request, or the connection closed.
			return nil, wire.NewInternalError(map[string]any{"error": "the wait was cancelled"}), true
		}
		code, sig := exitStatus(t.exit)
		return wire.WaitForTerminalExitResponse{ExitCode: code, Signal: sig}, nil, true
	case wire.ClientMethodTerminalKill:
		var req wire.KillTerminalRequest
		t, rerr := ts.lookup(params, &req, &req.TerminalId)
		if rerr != nil {
			return nil, rerr, true
		}
		t.kill()
		return wire.KillTerminalResponse{}, nil, true
	case wire.ClientMethodTerminalRelease:
		var req wire.ReleaseTerminalRequest
		t, rerr := ts.lookup(params, &req, &req.TerminalId)
		if rerr != nil {
			return nil, rerr, true
		}
		ts.mu.Lock()
		delete(ts.byID, req.TerminalId)
		ts.mu.Unlock()
		t.kill()
		return wire.ReleaseTerminalResponse{}, nil, true
	}
	return nil, nil, false
}

func decodeParams(params json.RawMessage, v any) *wire.RequestError {
	if err := json.Unmarshal(params, v); err != nil {
		return wire.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	return nil
}

// lookup decodes a request naming a terminal (id points into v) and finds it.
func (ts *terminals) lookup(params json.RawMessage, v any, id *string) (*terminal, *wire.RequestError) {
	if rerr := decodeParams(params, v); rerr != nil {
		return nil, rerr
	}
	ts.mu.Lock()
	t := ts.byID[*id]
	ts.mu.Unlock()
	if t == nil {
		return nil, wire.NewInvalidParams(map[string]any{"error": fmt.Sprintf("terminal %q: %v", *id, errNoTerminal)})
	}
	return t, nil
}

// create starts the command. Without args the command is a shell command
// line (agents send "ls -la" as well as "ls" with ["-la"]); with args it
// is a program, found in PATH by the shell, so that the lookup happens
// where the command runs (inside the sandbox when there is one).
func (ts *terminals) create(req wire.CreateTerminalRequest) (string, error) {
	if strings.TrimSpace(req.Command) == "" {
		return "", errors.New("the command is empty")
	}
	cwd := ts.cwd
	if req.Cwd != nil && *req.Cwd != "" {
		if !filepath.IsAbs(*req.Cwd) {
			return "", fmt.Errorf("the cwd %q is not an absolute path", *req.Cwd)
		}
		cwd = filepath.Clean(*req.Cwd)
	}
	if ts.sandbox == nil {
		// Inside a sandbox the directory is the sandbox's to check.
		if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
			return "", fmt.Errorf("the cwd %q is not a directory", cwd)
		}
	}
	limit := defaultTerminalOutput
	if req.OutputByteLimit != nil {
		if *req.OutputByteLimit < 0 {
			return "", fmt.Errorf("outputByteLimit %d is negative", *req.OutputByteLimit)
		}
		limit = min(*req.OutputByteLimit, maxTerminalOutput)
	}
	args := []string{"-c", req.Command}
	if len(req.Args) > 0 {
		args = append([]string{"-c", `exec "$0" "$@"`, req.Command}, req.Args...)
	}
	env := map[string]string{}
	for _, kv := range ts.env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for _, e := range req.Env {
		if e.Name == "" || strings.ContainsAny(e.Name, "=\x00") {
			return "", fmt.Errorf("invalid environment variable name %q", e.Name)
		}
		env[e.Name] = e.Value
	}
	list := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		list = append(list, k+"="+env[k])
	}

	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return "", errors.New("the session is closing")
	}
	if len(ts.byID) >= maxTerminals {
		return "", fmt.Errorf("%d terminals are open: release some first", len(ts.byID))
	}
	// One pipe for stdout and stderr, as a terminal shows them. We read
	// it ourselves, so the process's exit is known when it exits, even if
	// a child it left behind still holds the pipe.
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	t := &terminal{
		proc:   &agent.Proc{Path: "/bin/sh", Args: args, Env: list, Dir: cwd, Stdout: w, Stderr: w, Sandbox: ts.sandbox},
		out:    agent.NewTailBuffer(limit),
		exited: make(chan struct{}),
	}
	if err := t.proc.Start(); err != nil {
		r.Close()
		w.Close()
		return "", fmt.Errorf("start %q: %w", req.Command, err)
	}
	w.Close()
	read := make(chan struct{})
	go func() {
		defer close(read)
		_, _ = io.Copy(t.out, r)
		r.Close()
	}()
	// The command's lifetime is the session's (or until kill/release),
	// never the request's that created it.
	go func() {
		ex := t.proc.Wait()
		select {
		case <-read:
		case <-time.After(drainWait):
			// A child left behind holds the pipe: the output so far is
			// what the command wrote.
		}
		t.exit = ex
		close(t.exited)
	}()
	ts.next++
	id := "term_" + strconv.Itoa(ts.next)
	ts.byID[id] = t
	return id, nil
}

// kill ends the command's whole process tree, if it still runs.
func (t *terminal) kill() {
	select {
	case <-t.exited:
	default:
		_ = t.proc.Kill()
	}
}

// closeAll kills every terminal and refuses new ones: the session ends.
func (ts *terminals) closeAll() {
	ts.mu.Lock()
	ts.closed = true
	all := slicesOf(ts.byID)
	ts.byID = map[string]*terminal{}
	ts.mu.Unlock()
	for _, t := range all {
		t.kill()
	}
}

func slicesOf(m map[string]*terminal) []*terminal {
	out := make([]*terminal, 0, len(m))
	for _, t := range m {
		out = append(out, t)
	}
	return out
}

// exitStatus is ACP's view of an exit: a code, or the signal that ended
// the process (agent.Proc reports a signal n as code 128+n).
func exitStatus(ex agent.ProcExit) (code *int, signal *string) {
	if ex.Code > 128 && strings.Contains(ex.Desc, "signal") {
		s := signalName(ex.Code - 128)
		return nil, &s
	}
	c := ex.Code
	return &c, nil
}

var signalNames = map[int]string{1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS",
	8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM"}

func signalName(n int) string {
	if s, ok := signalNames[n]; ok {
		return s
	}
	return "SIG" + strconv.Itoa(n)
}

// snapshot returns a terminal's output as valid UTF-8, and whether older
// output was dropped: a character cut by the limit at the start is
// dropped, and a partial one at the end (still being written) is left for
// later.
func snapshot(b *agent.TailBuffer) (string, bool) {
	s, truncated := b.Bytes()
	if truncated {
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s = s[1:]
		}
	}
	end := len(s)
	for i := len(s) - 1; i >= 0 && i >= len(s)-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			if !utf8.FullRune(s[i:]) {
				end = i
			}
			break
		}
	}
	return strings.ToValidUTF8(string(s[:end]), "\uFFFD"), truncated
}

package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Proc is an agent's process: started on the host under the process-tree
// supervisor (StartTree: its whole tree dies with it, with the session and
// with the daemon), or inside the session's sandbox when Sandbox is set. Adapters use it
// instead of exec.Cmd so that both work the same way.
//
// Its lifetime is the session's, never a request's: nothing here takes a
// context, and the adapter ends it with Terminate or Kill.
type Proc struct {
	Path string
	Args []string // without argv[0]
	// Env is the complete environment ("K=V"); nothing is inherited.
	Env []string
	Dir string

	Stdin          io.Reader
	Stdout, Stderr io.Writer

	// Sandbox, when set, runs the process inside it (see Config.Sandbox).
	Sandbox sandbox.Sandbox

	mu   sync.Mutex
	cmd  *exec.Cmd
	tree *Tree
	sp   sandbox.Process
	exit *ProcExit
}

// ProcExit is how an agent process ended.
type ProcExit struct {
	// Code is the exit code, 128+n for signal n (as shells report it).
	Code int
	// Desc is a sentence: "exited with code 2", "was killed by signal 9
	// (killed)", "hit the sandbox's memory limit".
	Desc    string
	Verdict sandbox.Verdict
}

// Start starts the process.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tree != nil || p.sp != nil {
		return errors.New("agent: Proc started twice")
	}
	if p.Sandbox != nil {
		env := map[string]string{}
		for _, kv := range p.Env {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
		sp, err := p.Sandbox.Start(contextBackground(), sandbox.Cmd{
			Args: append([]string{p.Path}, p.Args...), Env: env, Dir: p.Dir,
			Stdin: p.Stdin, Stdout: p.Stdout, Stderr: p.Stderr,
		})
		if err != nil {
			return fmt.Errorf("start %s in the sandbox: %w", p.Path, err)
		}
		p.sp = sp
		return nil
	}
	// Detached on purpose: the process lives as long as the session.
	cmd := exec.CommandContext(contextBackground(), p.Path, p.Args...)
	cmd.Env, cmd.Dir = p.Env, p.Dir
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.Stdin, p.Stdout, p.Stderr
	tree, err := StartTree(cmd)
	if err != nil {
		return err
	}
	p.cmd, p.tree = cmd, tree
	return nil
}

// StartPiped starts the process with new pipes for its stdin, stdout and
// stderr (in place of any set) and returns the parent's ends, which the
// caller closes.
func (p *Proc) StartPiped() (stdin, stdout, stderr *os.File, err error) {
	var child, parent []*os.File
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	for i := range 3 {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(child)
			closeAll(parent)
			return nil, nil, nil, err
		}
		if i == 0 { // stdin: the child reads, we write
			child, parent = append(child, r), append(parent, w)
		} else {
			child, parent = append(child, w), append(parent, r)
		}
	}
	p.Stdin, p.Stdout, p.Stderr = child[0], child[1], child[2]
	err = p.Start()
	// The child has its copies; ours would keep the pipes open.
	closeAll(child)
	if err != nil {
		closeAll(parent)
		return nil, nil, nil, err
	}
	return parent[0], parent[1], parent[2], nil
}

// WriteJSONLine writes v as one line of JSON to w, a process's stdin,
// giving up at ctx's deadline or after timeout, whichever comes first (a
// stuck process must not hang its writer). The caller serialises writes.
func WriteJSONLine(ctx context.Context, w *os.File, v any, timeout time.Duration) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = w.SetWriteDeadline(deadline)
	_, err = w.Write(append(b, '\n'))
	return err
}

// Pid is the host pid (0 before Start or when the runtime has none).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.sp != nil:
		return p.sp.Pid()
	case p.tree != nil:
		return p.tree.Pid()
	}
	return 0
}

// Terminate asks the process tree to stop (SIGTERM to every process of it).
func (p *Proc) Terminate() error { return p.signal(syscall.SIGTERM) }

// Kill kills the whole process tree.
func (p *Proc) Kill() error { return p.signal(syscall.SIGKILL) }

func (p *Proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	tree, sp := p.tree, p.sp
	p.mu.Unlock()
	switch {
	case sp != nil:
		return sp.Signal(sig)
	case tree != nil:
		return tree.Signal(sig)
	}
	return errors.New("agent: Proc not started")
}

// Wait waits for the process to end. It may be called once.
func (p *Proc) Wait() ProcExit {
	p.mu.Lock()
	cmd, tree, sp := p.cmd, p.tree, p.sp
	p.mu.Unlock()
	var ex ProcExit
	switch {
	case sp != nil:
		e, err := sp.Wait()
		ex = ProcExit{Code: e.Code, Verdict: e.Verdict}
		switch {
		case err != nil:
			ex.Code, ex.Desc = -1, err.Error()
		case e.Reason != "":
			ex.Desc = "was stopped by the sandbox: " + e.Reason
			if e.Message != "" {
				ex.Desc += " (" + e.Message + ")"
			}
		case e.Signal != "":
			ex.Desc = "was killed by signal " + e.Signal
		default:
			ex.Desc = fmt.Sprintf("exited with code %d", e.Code)
		}
	case tree != nil:
		_ = tree.Wait()
		ex.Code, ex.Desc = ExitStatus(cmd.ProcessState)
	default:
		ex = ProcExit{Code: -1, Desc: "was never started"}
	}
	p.mu.Lock()
	p.exit = &ex
	p.mu.Unlock()
	return ex
}

// Stop ends the process after the caller has closed its stdin. A process
// that exitsOnEOF gets grace to exit by itself; then its tree gets
// SIGTERM and grace again, then SIGKILL. Stop returns once done is closed
// (the adapter closes it when the process is reaped and its output read);
// when ctx ends first, it kills the process at once and returns ctx's
// error.
func (p *Proc) Stop(ctx context.Context, done <-chan struct{}, grace time.Duration, exitsOnEOF bool) error {
	steps := []func() error{p.Terminate}
	if exitsOnEOF {
		steps = []func() error{nil, p.Terminate}
	}
	for _, step := range steps {
		if step != nil {
			_ = step()
		}
		t := time.NewTimer(grace)
		select {
		case <-done:
			t.Stop()
			return nil
		case <-ctx.Done():
			t.Stop()
			_ = p.Kill()
			return ctx.Err()
		case <-t.C:
		}
	}
	_ = p.Kill()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Ended is the session.ended event of a session whose process ended with
// ex: an error, unless the session was closing, which ends it normally.
// who names the process in the message ("the claude CLI").
func (ex ProcExit) Ended(who string, closing bool, stderrTail string) event.SessionEnded {
	code := ex.Code
	end := event.SessionEnded{Reason: event.EndError, ExitCode: &code, StderrTail: stderrTail,
		Message: who + " " + ex.Desc}
	if closing {
		end.Reason, end.Message = event.EndCompleted, who+" was closed; it "+ex.Desc
	}
	return end
}

// ExitStatus returns a process's exit code (128+n for signal n, as shells
// report it) and a description.
func ExitStatus(ps *os.ProcessState) (int, string) {
	if ps == nil {
		return -1, "is gone"
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), fmt.Sprintf("was killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
	}
	return ps.ExitCode(), fmt.Sprintf("exited with code %d", ps.ExitCode())
}

// contextBackground is the context an agent process starts under, on the
// host or in a sandbox: the process outlives whatever request asked for
// the session, so it is never cancelled.
func contextBackground() context.Context { return context.Background() }

// InstallRoot returns the directory an agent's installed binary bin lives
// in as a whole: the directory holding the first node_modules on bin's
// resolved path (an npm install), else bin's directory. A sandbox binds it
// read-only so the agent's code and its runtime files are visible.
func InstallRoot(bin string) string {
	if real, err := filepath.EvalSymlinks(bin); err == nil {
		bin = real
	}
	if i := strings.Index(bin, string(filepath.Separator)+"node_modules"+string(filepath.Separator)); i > 0 {
		return bin[:i]
	}
	return filepath.Dir(bin)
}

// TailBuffer keeps the last bytes written to it, up to a size: the tail
// of a process's output, such as its stderr.
type TailBuffer struct {
	mu   sync.Mutex
	size int
	buf  []byte
	cut  bool // older bytes were dropped
}

// NewTailBuffer returns a TailBuffer that keeps the last size bytes.
func NewTailBuffer(size int) *TailBuffer { return &TailBuffer{size: size} }

// Write implements io.Writer; it never fails.
func (b *TailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.size; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
		b.cut = true
	}
	return len(p), nil
}

// Bytes returns a copy of the tail, and whether older output was dropped.
func (b *TailBuffer) Bytes() ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf), b.cut
}

// String returns the tail as valid UTF-8 (a broken character reads "?"),
// starting with "…" when older output was dropped.
func (b *TailBuffer) String() string {
	tail, cut := b.Bytes()
	s := string(bytes.ToValidUTF8(tail, []byte("?")))
	if cut {
		return "…" + s
	}
	return s
}

// Summary is the end of the tail for an error message: its last five
// lines, at most 2000 bytes, or "" when it holds nothing but space.
func (b *TailBuffer) Summary() string {
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return Clip(strings.Join(lines, "\n"), 2000)
}

// Clip shortens s to at most n bytes, cut at a character boundary and
// marked with "…".
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

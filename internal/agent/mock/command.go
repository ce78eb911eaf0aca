package mock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// maxOutput caps the output a command step records and streams; the rest
// is dropped with a note.
const maxOutput = 1 << 20

const truncatedNote = "\n[output truncated by the mock agent]\n"

// waitDelay bounds how long a command's output is still read after it
// exited or was killed (background children may hold the pipe open).
const waitDelay = 2 * time.Second

func (t *turn) command(st Step) error {
	it := event.Item{ID: ids.New(ids.Item), Kind: event.ItemCommand, Status: event.StatusInProgress,
		Command: st.Command, Argv: []string{"/bin/sh", "-c", st.Command}, Cwd: t.s.cwd}
	if err := t.emit(&event.ItemStarted{Item: it}); err != nil {
		return err
	}
	input, _ := json.Marshal(map[string]string{"command": st.Command})
	req := agent.PermissionRequest{Kind: event.PermCommand, Title: "Run " + st.Command, Detail: "/bin/sh -c in " + t.s.cwd, Tool: "shell", Input: input}
	if ok, err := t.guard(KindCommand, it, req, "run "+st.Command); !ok {
		return err
	}

	timeout := time.Duration(st.Timeout)
	if timeout == 0 {
		timeout = defaultTimeout
	}
	ctx, cancel := context.WithTimeout(t.ctx, timeout)
	defer cancel()
	w := &outputWriter{t: t, itemID: it.ID}
	if t.s.sandbox != nil {
		return t.sandboxed(ctx, st, it, w, timeout)
	}
	// Without a sandbox the command runs as the daemon's user: the mock is
	// for demos and tests.
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", st.Command)
	cmd.Dir = t.s.cwd
	cmd.Env = shellEnv(t.s.cwd)
	cmd.Stdout, cmd.Stderr = w, w // one pipe, so stdout and stderr keep their order
	cmd.WaitDelay = waitDelay
	// Under the process-tree supervisor: what the command starts dies
	// with it, with the turn's context and with the daemon.
	tree, runErr := agent.StartTree(cmd)
	if runErr == nil {
		runErr = tree.Wait()
	}
	flushErr := w.flush()
	it.Output = w.output()

	switch {
	case t.ctx.Err() != nil:
		return t.abort(it)
	case w.failed() != nil:
		_ = t.fail(it, w.failed())
		return w.failed()
	case flushErr != nil:
		_ = t.fail(it, flushErr)
		return flushErr
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return t.fail(it, fmt.Errorf("timed out after %s", timeout))
	case cmd.ProcessState == nil:
		return t.fail(it, runErr)
	}
	code := cmd.ProcessState.ExitCode()
	if code < 0 {
		return t.fail(it, errors.New(cmd.ProcessState.String())) // killed by a signal
	}
	it.ExitCode, it.Status = &code, event.StatusCompleted
	if code != 0 {
		it.Status = event.StatusFailed
	}
	return t.finish(it)
}

// shellEnv is the whole environment of a command: nothing of the daemon's
// own environment but PATH, so no secret leaks into it.
func shellEnv(cwd string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	return []string{"PATH=" + path, "HOME=" + cwd, "PWD=" + cwd, "LANG=C.UTF-8"}
}

// outputWriter streams a command's output as output deltas of its item,
// never splitting a UTF-8 sequence across deltas, and keeps what it
// streamed. exec calls Write from its copying goroutine, hence the mutex.
type outputWriter struct {
	t      *turn
	itemID string

	mu        sync.Mutex
	out       strings.Builder
	pending   []byte // an incomplete UTF-8 sequence at the end of the last write
	truncated bool
	err       error
}

func (w *outputWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return 0, w.err
	}
	if w.truncated {
		return len(p), nil
	}
	buf := append(w.pending, p...)
	n := completeUTF8(buf)
	w.pending = append([]byte(nil), buf[n:]...)
	if err := w.send(string(buf[:n])); err != nil {
		return 0, err
	}
	return len(p), nil
}

// send emits one delta, truncating at maxOutput. The caller holds mu.
func (w *outputWriter) send(s string) error {
	if room := maxOutput - w.out.Len(); len(s) > room {
		s = strings.ToValidUTF8(s[:room], "") + truncatedNote
		w.truncated, w.pending = true, nil
	}
	if s == "" {
		return nil
	}
	if err := w.t.emit(&event.ItemDelta{ItemID: w.itemID, Field: event.DeltaOutput, Delta: s}); err != nil {
		w.err = err
		return err
	}
	w.out.WriteString(s)
	return nil
}

// flush emits what is left of an incomplete UTF-8 sequence.
func (w *outputWriter) flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || len(w.pending) == 0 {
		return nil
	}
	s := string(w.pending)
	w.pending = nil
	return w.send(s)
}

func (w *outputWriter) output() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.String()
}

func (w *outputWriter) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if errors.Is(w.err, errInterrupted) {
		return nil // the caller sees the context
	}
	return w.err
}

// completeUTF8 returns the length of the longest prefix of b that does not
// end inside a UTF-8 sequence.
func completeUTF8(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if utf8.FullRune(b[i:]) {
				return len(b)
			}
			return i
		}
	}
	return len(b)
}

// sandboxed runs a command step inside the session's sandbox.
func (t *turn) sandboxed(ctx context.Context, st Step, it event.Item, w *outputWriter, timeout time.Duration) error {
	env := map[string]string{}
	for _, kv := range shellEnv(t.s.cwd) {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "PATH" { // the sandbox has its own PATH
			env[k] = v
		}
	}
	p, err := t.s.sandbox.Start(ctx, sandbox.Cmd{
		Args: []string{"/bin/sh", "-c", st.Command}, Env: env, Dir: t.s.cwd,
		Stdout: w, Stderr: w, Timeout: timeout,
	})
	if err != nil {
		return t.fail(it, err)
	}
	stop := context.AfterFunc(t.ctx, func() { _ = p.Signal(syscall.SIGKILL) })
	ex, waitErr := p.Wait()
	stop()
	flushErr := w.flush()
	it.Output = w.output()
	switch {
	case t.ctx.Err() != nil:
		return t.abort(it)
	case w.failed() != nil:
		_ = t.fail(it, w.failed())
		return w.failed()
	case flushErr != nil:
		_ = t.fail(it, flushErr)
		return flushErr
	case waitErr != nil:
		return t.fail(it, waitErr)
	case ex.Reason != "":
		msg := "stopped by the sandbox: " + ex.Reason
		if ex.Message != "" {
			msg += ": " + ex.Message
		}
		return t.fail(it, errors.New(msg))
	case ex.Signal != "":
		return t.fail(it, errors.New("killed by signal "+ex.Signal))
	}
	code := ex.Code
	it.ExitCode, it.Status = &code, event.StatusCompleted
	if code != 0 {
		it.Status = event.StatusFailed
	}
	return t.finish(it)
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Proc is an agent's process: started on the host in its own process group,
// or inside the session's sandbox when Sandbox is set. Adapters use it
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
	if p.cmd != nil || p.sp != nil {
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
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	p.cmd = cmd
	return nil
}

// Pid is the host pid (0 before Start or when the runtime has none).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.sp != nil:
		return p.sp.Pid()
	case p.cmd != nil:
		return p.cmd.Process.Pid
	}
	return 0
}

// Terminate asks the process tree to stop (SIGTERM to the group).
func (p *Proc) Terminate() error { return p.signal(syscall.SIGTERM) }

// Kill kills the whole process tree.
func (p *Proc) Kill() error { return p.signal(syscall.SIGKILL) }

func (p *Proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd, sp := p.cmd, p.sp
	p.mu.Unlock()
	switch {
	case sp != nil:
		return sp.Signal(sig)
	case cmd != nil:
		return syscall.Kill(-cmd.Process.Pid, sig)
	}
	return errors.New("agent: Proc not started")
}

// Wait waits for the process to end. It may be called once.
func (p *Proc) Wait() ProcExit {
	p.mu.Lock()
	cmd, sp := p.cmd, p.sp
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
	case cmd != nil:
		_ = cmd.Wait()
		ex.Code, ex.Desc = exitStatus(cmd.ProcessState)
	default:
		ex = ProcExit{Code: -1, Desc: "was never started"}
	}
	p.mu.Lock()
	p.exit = &ex
	p.mu.Unlock()
	return ex
}

// exitStatus returns the exit code (128+n for a signal) and a description.
func exitStatus(ps *os.ProcessState) (int, string) {
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

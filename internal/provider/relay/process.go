package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/execution"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Bounds of a provider process, whose inner daemon is as hostile as the
// code it runs.
const (
	// callTimeout bounds each call made to the inner daemon for a
	// process (a stdin write, a signal, a resize).
	callTimeout = 30 * time.Second
	// killGrace is how long after a SIGKILL the inner daemon has to
	// report the process ended; past it the host takes the process for
	// lost, and its sandbox is destroyed (which ends it for sure).
	killGrace = 15 * time.Second
	// stdinChunk is the most standard input sent in one request (the
	// inner daemon takes 1 MiB).
	stdinChunk = 32 << 10
	// maxReason bounds the message of an inner exit's error.
	maxReason = 4 << 10
)

var _ execution.RemoteProcesses = (*Relay)(nil)

// StartProcess implements execution.RemoteProcesses: a fresh sandbox on
// the request's provider, made with a token of its own (random, never
// stored: nothing resumes a process across a host restart), the process
// started there by the inner daemon's own processes API under the
// policy the host resolved. Its output is followed from the inner
// daemon's stream (resumed by seq across cuts), its standard input
// pumped from req.Input, its signals and resizes forwarded; the sandbox
// is destroyed by Close, and at the next start when a crash left it (it
// carries the owner label; no session keeps it).
//
// What the inner daemon refuses to enforce (its 422 policy problem) is
// provider.ErrUnsupported with its detail, as for an exec.
func (r *Relay) StartProcess(ctx context.Context, req execution.RemoteStartRequest) (execution.RemoteProcess, error) {
	ok := false
	defer func() {
		if !ok && req.Input != nil {
			_ = req.Input.Close()
		}
	}()
	name := req.Provider
	p, err := r.cfg.Providers.Get(name)
	if err != nil {
		return nil, err
	}
	token, err := execToken()
	if err != nil {
		return nil, err
	}
	// The same checkpoint as an exec's: a provider whose sandbox is the
	// boundary maps the policy onto it, or refuses before anything is made.
	specPolicy, innerPolicy, err := placement(p, req.Policy)
	if err != nil {
		return nil, err
	}
	sb, err := p.Create(ctx, provider.Spec{
		Owner: r.Owner(), Binary: r.cfg.Binary, Token: token,
		Options: maps.Clone(r.cfg.Options[name]),
		Labels:  map[string]string{"purpose": "process"},
		Policy:  specPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("create a sandbox on %s: %w", name, err)
	}
	rp := &remoteProc{r: r, p: p, name: name, sb: sb, token: token, tty: req.TTY, stdout: req.Stdout, stderr: req.Stderr, done: make(chan struct{})}
	defer func() {
		if !ok {
			_, _ = rp.destroy(ctx)
		}
	}()
	if specPolicy != nil {
		if rp.egressStop, err = r.carryExecEgress(ctx, p, sb.ID, specPolicy); err != nil {
			return nil, err
		}
	}
	if rp.c, err = innerClient(sb.Address, token); err != nil {
		return nil, err
	}
	in := client.StartProcess{
		Argv: req.Argv, Env: req.Env, Cwd: req.Cwd, Stdin: req.Stdin, TTY: req.TTY, Rows: req.Rows, Cols: req.Cols,
		Policy: innerPolicy, TimeoutMS: req.Limit.Milliseconds(),
	}
	if len(req.Files) > 0 {
		in.Files = make(map[string]string, len(req.Files))
		for k, v := range req.Files {
			in.Files[k] = string(v)
		}
	}
	started, err := rp.c.StartProcess(ctx, in)
	if err != nil {
		return nil, innerExecError(name, sb.ID, err)
	}
	if started.ID == "" || len(started.ID) > 128 {
		return nil, fmt.Errorf("%w: the agentbox daemon in sandbox %s on %s answered a process without a usable id", provider.ErrUnavailable, sb.ID, name)
	}
	rp.id = started.ID
	rp.info = execution.SandboxInfo{ID: sb.ID, Provider: name, Runtime: started.Sandbox.Runtime,
		Mechanisms: started.Sandbox.Mechanisms, Degraded: started.Sandbox.Degraded}
	// The process outlives the request that started it, on purpose: its
	// output is followed until it ends or Close.
	var fctx context.Context
	fctx, rp.stop = context.WithCancelCause(context.WithoutCancel(ctx))
	go rp.follow(fctx)
	go rp.watch(fctx, r.cfg.LostAfter)
	if req.Input != nil {
		go rp.pump(fctx, req.Input)
	}
	ok = true
	return rp, nil
}

// remoteProc is a process in a provider's sandbox (execution.RemoteProcess).
type remoteProc struct {
	r      *Relay
	p      provider.Provider
	name   string
	sb     provider.Sandbox
	token  string // the sandbox's, never stored
	c      *client.Client
	id     string // the inner daemon's
	info   execution.SandboxInfo
	tty    bool
	stdout io.Writer
	stderr io.Writer
	stop   context.CancelCauseFunc

	done chan struct{} // closed when follow has ended
	exit sandbox.Exit
	err  error
	viol []sandbox.Violation

	egressStop func() // the host side of a carried network; nil when none

	killOnce    sync.Once
	destroyOnce sync.Once
	destroyErr  error
}

var _ execution.RemoteProcess = (*remoteProc)(nil)

// errLost ends a follow the host gave up on.
var errLost = errors.New("lost")

// follow copies the inner process's output to the host's writers until
// its exit event (the client resumes the stream by seq across cuts, so
// nothing is written twice), or until the host stops it.
func (rp *remoteProc) follow(ctx context.Context) {
	defer close(rp.done)
	for ev, err := range rp.c.ProcessStream(ctx, rp.id, 0) {
		if err != nil {
			if cause := context.Cause(ctx); cause != nil {
				err = cause
			}
			rp.err = fmt.Errorf("%w: following process %s in sandbox %s on %s: %w", provider.ErrUnavailable, rp.id, rp.sb.ID, rp.name, err)
			return
		}
		switch ev.Type {
		case "stdout", "stderr":
			if ev.Output == nil {
				continue
			}
			w := rp.stdout
			if ev.Type == "stderr" && !rp.tty {
				w = rp.stderr
			}
			_, _ = w.Write([]byte(ev.Output.Data))
		case "exit":
			if ev.Exit != nil {
				rp.exit, rp.viol = fromInnerExit(*ev.Exit)
			}
			return
		}
	}
	// The iteration ends without an error only after the exit event.
}

// watch takes the process for lost when its inner daemon has not
// answered for lostAfter (the stream's reconnections would go on for
// ever): Wait then returns an error, and Close destroys the sandbox.
func (rp *remoteProc) watch(ctx context.Context, lostAfter time.Duration) {
	every := max(lostAfter/8, time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	answered := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-rp.done:
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, every)
		_, err := rp.c.GetProcess(cctx, rp.id)
		cancel()
		var ae *client.APIError
		switch {
		case err == nil:
			answered = time.Now()
		case errors.As(err, &ae) && ae.Status == 404:
			rp.stop(fmt.Errorf("%w: the agentbox daemon in sandbox %s on %s no longer knows process %s", errLost, rp.sb.ID, rp.name, rp.id))
			return
		case time.Since(answered) > lostAfter:
			rp.stop(fmt.Errorf("%w: the agentbox daemon in sandbox %s on %s has not answered for %s: %w", errLost, rp.sb.ID, rp.name, lostAfter, err))
			return
		}
	}
}

// fromInnerExit is how the inner daemon says its process ended, bounded:
// a reason the host does not know is the sandbox's failure, a message is
// cut, violations are counted at most maxInnerViolations.
func fromInnerExit(p client.Process) (sandbox.Exit, []sandbox.Violation) {
	exit := sandbox.Exit{Code: -1, Signal: p.Signal}
	if p.ExitCode != nil {
		exit.Code = *p.ExitCode
	}
	if len(exit.Signal) > 16 {
		exit.Signal = exit.Signal[:16]
	}
	if p.Resources != nil {
		exit.Usage = sandbox.Usage{MaxRSSBytes: p.Resources.MaxRSS, CPUMillis: p.Resources.CPUMS}
	}
	if e := p.Error; e != nil {
		exit.Reason, exit.Message = e.Code, e.Message
		switch e.Code {
		case sandbox.ReasonTimeout, sandbox.ReasonMemory, sandbox.ReasonPids, sandbox.ReasonDisk, sandbox.ReasonFiles,
			sandbox.ReasonOutput, sandbox.ReasonPolicyDenied, sandbox.ReasonSandboxFailed:
		default:
			exit.Reason = sandbox.ReasonSandboxFailed
			exit.Message = fmt.Sprintf("the agentbox daemon in the sandbox reported %q: %s", truncate(e.Code, 64), e.Message)
		}
		exit.Message = truncate(exit.Message, maxReason)
	}
	res := fromClientResult(client.ExecResult{Violations: p.Violations})
	return exit, res.Violations
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// pump writes what in yields to the inner process's standard input, in
// chunks that never end inside a UTF-8 sequence (the API carries text),
// and closes it at EOF (a terminal's input is not closed: ^D is the
// process's to read). It stops at the first refusal: the host's writes
// then fail as to a process that closed its input.
func (rp *remoteProc) pump(ctx context.Context, in io.ReadCloser) {
	defer func() { _ = in.Close() }()
	buf := make([]byte, stdinChunk)
	held := 0
	for {
		n, rerr := in.Read(buf[held:])
		n += held
		cut := n
		if rerr == nil {
			cut = completeUTF8(buf[:n])
		}
		if cut > 0 {
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			err := rp.c.SendStdin(cctx, rp.id, string(buf[:cut]), false)
			cancel()
			if err != nil {
				return
			}
		}
		held = copy(buf, buf[cut:n])
		if rerr != nil {
			if errors.Is(rerr, io.EOF) && !rp.tty {
				cctx, cancel := context.WithTimeout(ctx, callTimeout)
				_ = rp.c.SendStdin(cctx, rp.id, "", true)
				cancel()
			}
			return
		}
	}
}

// completeUTF8 returns the length of b without an incomplete UTF-8
// sequence at its end.
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

// Pid implements sandbox.Process: the process has no pid on this host.
func (rp *remoteProc) Pid() int { return 0 }

// Signal implements sandbox.Process: sig goes to the inner process. After
// a SIGKILL the inner daemon has killGrace to report the end; past it
// the process is taken for lost (Wait returns an error) and Close
// destroys its sandbox.
func (rp *remoteProc) Signal(sig os.Signal) error {
	name, err := signalName(sig)
	if err != nil {
		return err
	}
	if name == "SIGKILL" {
		rp.killOnce.Do(func() {
			time.AfterFunc(killGrace, func() {
				rp.stop(fmt.Errorf("%w: the agentbox daemon in sandbox %s on %s did not end process %s within %s of SIGKILL", errLost, rp.sb.ID, rp.name, rp.id, killGrace))
			})
		})
	}
	select {
	case <-rp.done:
		return nil // ended meanwhile
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := rp.c.Signal(ctx, rp.id, name); err != nil {
		var ae *client.APIError
		if errors.As(err, &ae) && ae.Type == client.ProblemConflict {
			return nil // it has ended: the exit event is on its way
		}
		return fmt.Errorf("signal process %s in sandbox %s on %s: %w", rp.id, rp.sb.ID, rp.name, err)
	}
	return nil
}

// signalName names sig as the API does.
func signalName(sig os.Signal) (string, error) {
	for _, n := range execution.SignalNames {
		if s, err := execution.ParseSignal(n); err == nil && s == sig {
			return n, nil
		}
	}
	return "", fmt.Errorf("%w: signal %v", execution.ErrInvalid, sig)
}

// Wait implements sandbox.Process: the exit the inner daemon reported,
// after all of the output.
func (rp *remoteProc) Wait() (sandbox.Exit, error) {
	<-rp.done
	return rp.exit, rp.err
}

// Sandbox implements execution.RemoteProcess.
func (rp *remoteProc) Sandbox() execution.SandboxInfo { return rp.info }

// Resize implements execution.RemoteProcess.
func (rp *remoteProc) Resize(ctx context.Context, rows, cols int) error {
	if err := rp.c.Resize(ctx, rp.id, rows, cols); err != nil {
		return innerExecError(rp.name, rp.sb.ID, err)
	}
	return nil
}

// Archive implements execution.RemoteProcess: the inner daemon's archive
// of the process's workspace (bounded by the reader, see
// execution.RemoteProcess).
func (rp *remoteProc) Archive(ctx context.Context) (io.ReadCloser, error) {
	rc, err := rp.c.DownloadArchive(ctx, client.ProcessWorkspace(rp.id), ".")
	if err != nil {
		return nil, innerExecError(rp.name, rp.sb.ID, err)
	}
	return rc, nil
}

// Close implements execution.RemoteProcess: the following stops, the
// sandbox is destroyed (on a context of its own), and the violations the
// inner daemon reported are returned.
func (rp *remoteProc) Close(ctx context.Context) ([]sandbox.Violation, error) {
	rp.stop(fmt.Errorf("%w: its sandbox was closed", errLost))
	<-rp.done
	return rp.destroy(ctx)
}

// destroy removes the sandbox once: detached on purpose, so that the
// sandbox goes whatever became of the caller, and bounded on its own.
func (rp *remoteProc) destroy(ctx context.Context) ([]sandbox.Violation, error) {
	rp.destroyOnce.Do(func() {
		if rp.c != nil {
			rp.c.CloseIdleConnections()
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), destroyTimeout)
		defer cancel()
		if rp.egressStop != nil {
			rp.egressStop()
		}
		if err := rp.p.Destroy(dctx, rp.sb.ID); err != nil && !errors.Is(err, provider.ErrGone) {
			rp.r.cfg.Log.Warn("destroying a process's sandbox (the next start's reconciliation removes it)", "provider", rp.name, "sandbox", rp.sb.ID, "err", err)
			rp.destroyErr = fmt.Errorf("destroy sandbox %s on %s: %w", rp.sb.ID, rp.name, err)
		}
	})
	return rp.viol, rp.destroyErr
}

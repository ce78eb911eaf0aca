package execution

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// groupWrapper runs "$@" in a process group of its own, stdin passed on,
// and on SIGTERM kills that whole group and exits 143. It is how RunIn
// ends a command in a sandbox that is not the command's own: a runtime's
// SIGKILL, and its timeout, kill the whole sandbox (sandbox.Process), here
// the agent's too. Without setsid in the sandbox the command runs in the
// wrapper's place and SIGTERM reaches it alone.
//
// The trap is set first and reads $! when it runs, so a SIGTERM at any
// moment finds what there is: nothing started yet, the child before its
// setsid (killed by its pid), or the command's group.
const groupWrapper = `trap 'kill -KILL -$! $! 2>/dev/null; exit 143' TERM
command -v setsid >/dev/null 2>&1 || exec "$@"
exec 3<&0
setsid "$@" <&3 3<&- &
exec 3<&-
wait $!`

// runInStartTimeout bounds the start of a command in a sandbox it does not
// own; its expiry ends the sandbox, as any cancelled start does.
const runInStartTimeout = time.Minute

// runInGrace is how long after its timeout a command's wrapper may take to
// end before the runtime's own timeout ends the sandbox.
const runInGrace = 10 * time.Second

// RunIn runs req.Argv to its end in sb, a sandbox its caller owns (a
// session's, which the agent uses too), and answers as Exec does: output
// captured and capped per stream (the smaller of limits.OutputBytes and
// DefaultMaxOutputBytes), the timeout the shorter of req.Timeout and
// limits.Timeout, the command ended when ctx ends. Ending it never ends
// the sandbox: the command runs under groupWrapper, which kills the
// command's process group on SIGTERM (a process that leaves the group
// stays, under the sandbox's limits, until the sandbox ends); only a
// wrapper that outlives the timeout by runInGrace meets the runtime's
// timeout, which ends the sandbox. It takes no concurrency slot of the
// service and closes nothing: sb's owner bounds and tears down. The
// sandbox's violations are its owner's to report (a session's go to its
// log); the result lists only the limit the command hit. Only Argv, Stdin
// and Timeout are read: a language, code, files or a policy are refused
// (ErrInvalid), as sb's policy is fixed and its workspace shared.
func RunIn(ctx context.Context, sb sandbox.Sandbox, limits sandbox.Limits, req Request) (Result, error) {
	switch {
	case len(req.Argv) == 0 || req.Argv[0] == "":
		return Result{}, fmt.Errorf("%w: argv is empty", ErrInvalid)
	case req.Language != "" || req.Code != "" || len(req.Files) > 0:
		return Result{}, fmt.Errorf("%w: a command in an existing sandbox takes argv only (no language, code or files)", ErrInvalid)
	case !req.Policy.IsZero():
		return Result{}, fmt.Errorf("%w: a command in an existing sandbox runs under that sandbox's policy; it takes none", ErrInvalid)
	case req.Timeout < 0:
		return Result{}, fmt.Errorf("%w: negative timeout", ErrInvalid)
	}
	limit := int64(DefaultMaxOutputBytes)
	if l := limits.OutputBytes; l > 0 && l < limit {
		limit = l
	}
	var (
		mu                 sync.Mutex
		proc               sandbox.Process
		pending, timedOut  bool
		byOutput, canceled atomic.Bool
	)
	// end asks the wrapper to kill the command's group (now, or as soon
	// as the process is known).
	end := func() {
		mu.Lock()
		defer mu.Unlock()
		if proc == nil {
			pending = true
			return
		}
		_ = proc.Signal(syscall.SIGTERM) // an ended process needs nothing
	}
	out := newCapture(limit, nil, func() { byOutput.Store(true); end() })
	timeout := effectiveTimeout(req.Timeout, limits.Timeout)
	cmd := sandbox.Cmd{
		Args:   append([]string{"/bin/sh", "-c", groupWrapper, "agentbox-exec"}, req.Argv...),
		Stdout: out.writer(Stdout),
		Stderr: out.writer(Stderr),
	}
	if timeout > 0 {
		cmd.Timeout = timeout + runInGrace
	}
	adjusted := timeoutAdjusted(req.Timeout, timeout)
	if len(req.Stdin) > 0 {
		cmd.Stdin = bytes.NewReader(req.Stdin)
	}
	start := time.Now()
	// The start is not bound to ctx: a runtime whose start is cancelled
	// ends the whole sandbox (a process may start with nobody to wait for
	// it). A caller gone meanwhile ends the command once it runs (below).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), runInStartTimeout)
	p, err := sb.Start(sctx, cmd)
	cancel()
	if err != nil {
		return Result{}, fmt.Errorf("start %q in sandbox: %w", req.Argv[0], err)
	}
	mu.Lock()
	proc = p
	if pending {
		_ = p.Signal(syscall.SIGTERM)
	}
	mu.Unlock()
	in := sb.Info()
	info := SandboxInfo{ID: sb.ID(), Runtime: in.Runtime, Mechanisms: in.Mechanisms, Degraded: in.Degraded}
	out.start(nil, info)
	stop := context.AfterFunc(ctx, func() { canceled.Store(true); end() })
	defer stop()
	if timeout > 0 {
		t := time.AfterFunc(timeout, func() {
			mu.Lock()
			timedOut = true
			mu.Unlock()
			end()
		})
		defer t.Stop()
	}
	exit, werr := p.Wait()
	dur := time.Since(start)
	out.flush()
	if werr != nil {
		return Result{}, fmt.Errorf("wait for %q: %w", req.Argv[0], werr)
	}
	if canceled.Load() && !byOutput.Load() {
		return Result{}, fmt.Errorf("exec: %w", context.Cause(ctx))
	}
	mu.Lock()
	killed := timedOut
	mu.Unlock()
	res := Result{ExitCode: exit.Code, Signal: exit.Signal, Duration: dur, Usage: exit.Usage, Sandbox: info, Adjusted: adjusted}
	res.Stdout, res.Stderr, res.Truncated = out.result()
	reason, msg := exit.Reason, exit.Message
	switch {
	case res.Truncated:
		reason, msg = sandbox.ReasonOutput, fmt.Sprintf("output exceeded %d bytes on a stream; the process was killed", limit)
	case killed:
		reason, msg = sandbox.ReasonTimeout, fmt.Sprintf("killed after the %s timeout", timeout)
	}
	if (res.Truncated || killed) && exit.Reason == "" {
		// The wrapper killed the command's group: say it as a kill.
		res.ExitCode, res.Signal = -1, "SIGKILL"
	}
	if reason != "" {
		res.Error = &ErrorInfo{Code: reason, Message: msg}
	}
	res.Violations = withLimitViolation(nil, reason, msg)
	return res, nil
}

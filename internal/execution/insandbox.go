package execution

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// RunIn runs req.Argv to its end in sb, a sandbox its caller owns (a
// session's, which the agent uses too), the way Exec runs a task in a
// sandbox of its own: output captured and capped per stream (the smaller
// of limits.OutputBytes and DefaultMaxOutputBytes; past it the process is
// killed), the timeout the shorter of req.Timeout and limits.Timeout, the
// process tree killed when ctx ends. It takes no concurrency slot of the
// service and closes nothing: sb's owner bounds and tears down. The
// sandbox's violations are its owner's to report (a session's go to its
// log); the result lists only the limit the process hit. Only Argv, Stdin
// and Timeout are read: a language, files or a policy are refused
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
	var k killer
	out := newCapture(limit, nil, k.killForOutput)
	cmd := sandbox.Cmd{
		Args:    req.Argv,
		Stdout:  out.writer(Stdout),
		Stderr:  out.writer(Stderr),
		Timeout: effectiveTimeout(req.Timeout, limits.Timeout),
	}
	adjusted := timeoutAdjusted(req.Timeout, cmd.Timeout)
	if len(req.Stdin) > 0 {
		cmd.Stdin = bytes.NewReader(req.Stdin)
	}
	start := time.Now()
	p, err := sb.Start(ctx, cmd)
	if err != nil {
		return Result{}, fmt.Errorf("start %q in sandbox: %w", req.Argv[0], err)
	}
	k.set(p)
	in := sb.Info()
	info := SandboxInfo{ID: sb.ID(), Runtime: in.Runtime, Mechanisms: in.Mechanisms, Degraded: in.Degraded}
	out.start(nil, info)
	stop := context.AfterFunc(ctx, k.kill)
	defer stop()
	backstop := backstopKill(cmd.Timeout, &k)
	defer backstop()
	exit, werr := p.Wait()
	dur := time.Since(start)
	out.flush()
	if werr != nil {
		return Result{}, fmt.Errorf("wait for %q: %w", req.Argv[0], werr)
	}
	if ctx.Err() != nil && !k.byOutput() {
		return Result{}, fmt.Errorf("exec: %w", context.Cause(ctx))
	}
	res := Result{ExitCode: exit.Code, Signal: exit.Signal, Duration: dur, Usage: exit.Usage, Sandbox: info, Adjusted: adjusted}
	res.Stdout, res.Stderr, res.Truncated = out.result()
	reason, msg := exit.Reason, exit.Message
	if res.Truncated {
		reason, msg = sandbox.ReasonOutput, fmt.Sprintf("output exceeded %d bytes on a stream; the process was killed", limit)
	}
	if reason != "" {
		res.Error = &ErrorInfo{Code: reason, Message: msg}
	}
	res.Violations = withLimitViolation(nil, reason, msg)
	return res, nil
}

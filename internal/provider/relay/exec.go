package relay

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/execution"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
)

// execSlack is how much longer than the run's limit the host waits for
// the inner daemon's answer (its own teardown, the way back).
const execSlack = 30 * time.Second

// destroyTimeout bounds removing an exec's sandbox, on a context of its
// own: the sandbox goes whatever became of the caller.
const destroyTimeout = time.Minute

var _ execution.Remote = (*Relay)(nil)

// Exec implements execution.Remote: a fresh sandbox on the request's
// provider, made with a token of its own (random, never stored: nothing
// resumes an exec), the code run there by the inner daemon's own exec
// under the policy the host resolved, and the sandbox destroyed before
// Exec returns. The sandbox carries the daemon's owner label, so one a
// crash left is removed by the next start's reconciliation (no session
// keeps it).
//
// What the provider does not enforce of the policy, the inner daemon's
// runtimes do; what the inner daemon refuses to enforce there (its 422
// policy problem, e.g. no runtime can run in the provider's sandbox) is
// provider.ErrUnsupported with its detail: fail closed.
func (r *Relay) Exec(ctx context.Context, req execution.RemoteRequest, hooks execution.Hooks) (execution.Result, error) {
	name := req.Provider
	p, err := r.cfg.Providers.Get(name)
	if err != nil {
		return execution.Result{}, err
	}
	token, err := execToken()
	if err != nil {
		return execution.Result{}, err
	}
	specPolicy, innerPolicy, err := placement(p, req.Policy)
	if err != nil {
		return execution.Result{}, err
	}
	sb, err := p.Create(ctx, provider.Spec{
		Owner: r.Owner(), Binary: r.cfg.Binary, Token: token,
		Options: maps.Clone(r.cfg.Options[name]),
		Labels:  map[string]string{"purpose": "exec"},
		Policy:  specPolicy,
	})
	if err != nil {
		return execution.Result{}, fmt.Errorf("create a sandbox on %s: %w", name, err)
	}
	defer func() {
		// Detached on purpose: the sandbox goes even when the caller
		// went away; bounded on its own.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), destroyTimeout)
		defer cancel()
		if err := p.Destroy(dctx, sb.ID); err != nil && !errors.Is(err, provider.ErrGone) {
			r.cfg.Log.Warn("destroying an exec's sandbox (the next start's reconciliation removes it)", "provider", name, "sandbox", sb.ID, "err", err)
		}
	}()
	if specPolicy != nil {
		stop, err := r.carryExecEgress(ctx, p, sb.ID, specPolicy)
		if err != nil {
			return execution.Result{}, err
		}
		defer stop()
	}
	c, err := client.New(sb.Address, client.WithToken(token))
	if err != nil {
		return execution.Result{}, err
	}
	defer c.CloseIdleConnections()
	if req.Limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Limit+execSlack)
		defer cancel()
	}
	info := execution.SandboxInfo{ID: sb.ID, Provider: name}
	started := false
	start := func() {
		if !started && hooks.Started != nil {
			hooks.Started(info)
		}
		started = true
	}
	// Always the stream: its parser bounds what the inner daemon can
	// send (a line, an event's data), where a plain answer is read whole.
	creq := toClientExec(req)
	creq.Policy = innerPolicy
	out, err := c.ExecStream(ctx, creq, func(ch client.OutputChunk) {
		start()
		if hooks.Output != nil {
			hooks.Output(execution.Output{Seq: ch.Seq, Stream: ch.Stream, Data: []byte(ch.Data)})
		}
	})
	if err != nil {
		return execution.Result{}, innerExecError(name, sb.ID, err)
	}
	start()
	res := fromClientResult(out)
	info.Runtime, info.Mechanisms, info.Degraded = out.Sandbox.Runtime, out.Sandbox.Mechanisms, out.Sandbox.Degraded
	res.Sandbox = info
	return res, nil
}

// carryExecEgress starts the host side of the network of an exec's
// sandbox whose provider carries its egress (provider.EgressCarrier):
// Config.ExecEgress's gate for the exec's policy, serving what the
// provider carries out of the sandbox until stop. Without a carrier, an
// ExecEgress or a network to give (the gate's Serve nil: network none),
// nothing is carried and the sandbox has no way out.
func (r *Relay) carryExecEgress(ctx context.Context, p provider.Provider, id string, pol json.RawMessage) (stop func(), err error) {
	carrier, ok := p.(provider.EgressCarrier)
	if !ok || r.cfg.ExecEgress == nil {
		return func() {}, nil
	}
	eg, err := r.cfg.ExecEgress(ctx, ExecEgressRequest{Sandbox: p.Name() + "/" + id, Policy: pol})
	if err != nil {
		return nil, fmt.Errorf("the network of sandbox %s: %w", id, err)
	}
	if eg.Serve == nil {
		if eg.Close != nil {
			eg.Close()
		}
		return func() {}, nil
	}
	halt, err := carrier.CarryEgress(ctx, id, eg.Serve)
	if err != nil {
		eg.Close()
		return nil, fmt.Errorf("carry the egress of sandbox %s on %s: %w", id, p.Name(), err)
	}
	return func() { halt(); eg.Close() }, nil
}

// execToken is an exec sandbox's token: 32 bytes of crypto/rand.
func execToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// innerExecError maps what the inner daemon answered onto the errors the
// host's API maps: a policy it cannot enforce is the provider's refusal
// (provider-unsupported), a request it finds invalid the caller's, its
// own limit a retry later, anything else the provider's failure.
func innerExecError(name, sandboxID string, err error) error {
	var ae *client.APIError
	if !errors.As(err, &ae) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("exec in sandbox %s on %s: %w", sandboxID, name, err)
		}
		return fmt.Errorf("%w: exec in sandbox %s on %s: %w", provider.ErrUnavailable, sandboxID, name, err)
	}
	detail := ae.Detail
	if detail == "" {
		detail = ae.Title
	}
	switch {
	case ae.Type == client.ProblemPolicy:
		return fmt.Errorf("%w: neither %s nor the agentbox daemon in its sandbox %s can enforce the policy: %s", provider.ErrUnsupported, name, sandboxID, detail)
	case ae.Status == http.StatusUnprocessableEntity:
		return fmt.Errorf("%w: the agentbox daemon in sandbox %s on %s refused the exec: %s", execution.ErrInvalid, sandboxID, name, detail)
	case ae.Status == http.StatusTooManyRequests:
		return fmt.Errorf("%w: the agentbox daemon in sandbox %s on %s: %s", execution.ErrTooMany, sandboxID, name, detail)
	}
	return fmt.Errorf("%w: exec in sandbox %s on %s: %d %s", provider.ErrUnavailable, sandboxID, name, ae.Status, detail)
}

func toClientExec(req execution.RemoteRequest) client.ExecRequest {
	out := client.ExecRequest{
		Language: req.Language, Code: req.Code, Argv: req.Argv, Stdin: string(req.Stdin),
		Policy: req.Policy, TimeoutMS: req.Timeout.Milliseconds(),
	}
	if len(req.Files) > 0 {
		out.Files = make(map[string]string, len(req.Files))
		for k, v := range req.Files {
			out.Files[k] = string(v)
		}
	}
	return out
}

// maxInnerViolations bounds the violations taken from an inner result
// (the inner daemon bounds them too; this host does not rely on it).
const maxInnerViolations = 1000

func fromClientResult(in client.ExecResult) execution.Result {
	res := execution.Result{
		ExitCode: in.ExitCode, Signal: in.Signal,
		Stdout: []byte(in.Stdout), Stderr: []byte(in.Stderr), Truncated: in.Truncated,
		Duration: time.Duration(in.DurationMS) * time.Millisecond,
		Usage:    sandbox.Usage{MaxRSSBytes: in.Resources.MaxRSS, CPUMillis: in.Resources.CPUMS},
	}
	if in.Error != nil {
		res.Error = &execution.ErrorInfo{Code: in.Error.Code, Message: in.Error.Message}
	}
	for i, v := range in.Violations {
		if i == maxInnerViolations {
			break
		}
		sv := sandbox.Violation{Kind: v.Kind, Detail: v.Detail, Target: v.Target, Host: v.Host, Port: v.Port, Rule: v.Rule, Action: v.Action, Count: v.Count}
		if v.FirstAt != nil {
			sv.First = *v.FirstAt
		}
		if v.LastAt != nil {
			sv.Last = *v.LastAt
		}
		if v.Process != nil {
			sv.Process = &sandbox.Peer{Pid: v.Process.Pid, Name: v.Process.Name, CommandLine: v.Process.CommandLine}
		}
		res.Violations = append(res.Violations, sv)
	}
	for _, a := range in.Adjusted {
		res.Adjusted = append(res.Adjusted, policy.Adjustment{Field: a.Field, Requested: a.Requested, Applied: a.Applied, By: a.By + " (in the sandbox)"})
	}
	return res
}

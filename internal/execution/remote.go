package execution

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/agentbox/agentbox/internal/provider"
)

// Remote runs execs in a sandbox of a provider (internal/provider/relay):
// a fresh sandbox per exec, the agentbox daemon inside running the code
// through its own exec under the policy this host resolved, the sandbox
// destroyed before Exec returns. Errors wrap the provider contract's
// sentinels (provider.ErrUnknown, ErrUnsupported naming what neither the
// provider nor the inner daemon can enforce, ErrUnavailable, ...).
type Remote interface {
	Exec(ctx context.Context, req RemoteRequest, hooks Hooks) (Result, error)
}

// RemoteRequest is an exec a Remote runs: the request as the caller made
// it, with its policy resolved on this host (already intersected with the
// operator's global policy) as a policy object.
type RemoteRequest struct {
	Request
	// Policy is the effective policy, a JSON policy object.
	Policy json.RawMessage
	// Limit is the run's time limit (the request's timeout or the
	// policy's, whichever is shorter; 0: none): the Remote bounds its
	// wait for the inner daemon's answer by it.
	Limit time.Duration
}

// execRemote runs req on its provider: the policy is resolved here (what
// the operator's global policy refuses is refused before a sandbox is
// made), the run is the provider's.
func (s *Service) execRemote(ctx context.Context, req Request, hooks Hooks) (Result, error) {
	if s.opts.Remote == nil {
		return Result{}, fmt.Errorf("%w: %q (no provider is configured on this daemon)", provider.ErrUnknown, req.Provider)
	}
	pol, err := s.resolve(req.Policy)
	if err != nil {
		return Result{}, err
	}
	raw, err := json.Marshal(pol)
	if err != nil {
		return Result{}, fmt.Errorf("encode the effective policy: %w", err)
	}
	// The spec is compiled for its limits only: nothing of this host
	// (workspace, environment) goes to the provider's sandbox.
	spec, err := pol.Compile(s.opts.WorkDir, func(string) (string, bool) { return "", false })
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrPolicyInvalid, err)
	}
	limit := effectiveTimeout(req.Timeout, spec.Limits.Timeout)
	res, err := s.opts.Remote.Exec(ctx, RemoteRequest{Request: req, Policy: raw, Limit: limit}, hooks)
	if err != nil {
		return Result{}, err
	}
	res.Adjusted = append(slices.Clone(adjustments(pol)), res.Adjusted...)
	return res, nil
}

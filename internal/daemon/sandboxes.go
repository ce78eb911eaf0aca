package daemon

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
)

// sessionSandboxes implements engine.Sandboxes over the policy package,
// the isolation runtimes and the egress proxy.
type sessionSandboxes struct {
	// global returns the operator's policy (see loadGlobalPolicy).
	global func() *policy.Policy
	// fallback is the preset a session gets when its request names none;
	// empty runs such sessions on the host.
	fallback string
	runtimes *sandbox.Registry
	egress   *egress.Server
	// askTimeout bounds each per-connection approval.
	askTimeout time.Duration
	// secrets are the daemon's secrets (which of a policy's opt in to TLS
	// interception), hostRoots the host's roots (PEM) for the CA bundles
	// of sandboxes that intercept (read on the first such sandbox, not at
	// start), kept under caDir.
	secrets   egress.SecretSource
	hostRoots func() []byte
	caDir     string
	// workspaces checks session working directories.
	workspaces *workspaceRules
}

// Workspace implements engine.Sandboxes.
func (s *sessionSandboxes) Workspace(cwd string) (string, error) {
	return s.workspaces.check(s.global(), cwd)
}

// Reconcile implements engine.Sandboxes: the stored effective policy
// goes through Effective again, with the global policy as it is now.
func (s *sessionSandboxes) Reconcile(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	p, err := policy.Parse("session policy", raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", engine.ErrPolicy, err)
	}
	if p, err = policy.Effective(s.global(), p); err != nil {
		return nil, fmt.Errorf("%w: the session's policy cannot be honoured under the operator's current global policy: %w", engine.ErrPolicy, err)
	}
	if err := s.available(ctx, p); err != nil {
		return nil, err
	}
	return json.Marshal(p)
}

// available refuses a policy whose runtime cannot run on this host.
func (s *sessionSandboxes) available(ctx context.Context, p *policy.Policy) error {
	rt, err := s.runtimes.Get(p.Isolation())
	if err != nil {
		return fmt.Errorf("%w: %w", engine.ErrPolicy, err)
	}
	if pr := rt.Probe(ctx); !pr.Available {
		return fmt.Errorf("%w: isolation %q: %w: %s", engine.ErrPolicy, p.Isolation(), sandbox.ErrUnavailable, pr.Reason)
	}
	return nil
}

// Resolve implements engine.Sandboxes.
func (s *sessionSandboxes) Resolve(ctx context.Context, req json.RawMessage, doc *engine.PolicyDoc) (json.RawMessage, error) {
	raw, _, err := s.ResolveAdjusted(ctx, req, doc)
	return raw, err
}

// ResolveAdjusted implements engine.AdjustingSandboxes: Resolve, and the
// limits the request asked for that the global policy lowered.
func (s *sessionSandboxes) ResolveAdjusted(ctx context.Context, req json.RawMessage, doc *engine.PolicyDoc) (json.RawMessage, []engine.LimitAdjustment, error) {
	var asked, p *policy.Policy
	var err error
	switch {
	case doc != nil:
		asked, err = policy.Parse(doc.Name, []byte(doc.Text))
	case (len(req) == 0 || string(req) == "null") && s.fallback == "":
		return nil, nil, nil
	default:
		asked, err = policy.Request("request.policy", req, s.fallback)
	}
	if err == nil {
		p, err = policy.Effective(s.global(), asked)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", engine.ErrPolicy, err)
	}
	// Refuse now, not at the first turn, what this host cannot run.
	if err := s.available(ctx, p); err != nil {
		return nil, nil, err
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, nil, err
	}
	var adjusted []engine.LimitAdjustment
	for _, a := range policy.Adjustments(asked, p) {
		adjusted = append(adjusted, engine.LimitAdjustment{Field: a.Field, Requested: a.Requested, Applied: a.Applied, By: a.By})
	}
	return raw, adjusted, nil
}

// Create implements engine.Sandboxes.
func (s *sessionSandboxes) Create(ctx context.Context, raw json.RawMessage, cwd string, opts engine.SandboxOptions) (*engine.Sandbox, error) {
	p, err := policy.Parse("session policy", raw)
	if err != nil {
		return nil, err
	}
	// The host's environment reaches the sandbox only by name, through
	// the policy's env.pass list.
	spec, err := p.Compile(cwd, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	spec.ReadPaths = append(spec.ReadPaths, opts.Paths.Read...)
	// The agent's own state (its home) is not a plain writable bind: it
	// counts in the sandbox's disk and file limits and is written back
	// with the checked commit.
	spec.StateDirs = append(spec.StateDirs, opts.Paths.Write...)
	// No credential of the agent's enters the sandbox, whatever its
	// network: its variables hold placeholders, which the proxy's routes
	// (mode proxy) replace on the way to the model.
	env := credentialEnv(opts.Providers)
	spec.Review = opts.Review
	var routes []egress.Route
	if spec.Network.Mode == sandbox.NetworkProxy {
		var baseURLs map[string]string
		if routes, baseURLs, err = providerRoutes(spec.Network.Port(), opts.Providers); err != nil {
			return nil, err
		}
		maps.Copy(env, baseURLs)
	}
	// A variable the policy declares as a secret holds its placeholder,
	// whatever value the session's env gave it.
	for k, name := range spec.Network.Secrets {
		env[k] = egress.Placeholder(name)
	}
	rt, err := s.runtimes.Get(p.Isolation())
	if err != nil {
		return nil, err
	}
	var ca *egress.CA
	var release func()
	if spec.Network.Mode == sandbox.NetworkProxy {
		if ca, release, err = sandboxCA(s.secrets, s.hostRoots(), s.caDir, opts.SessionID, &spec); err != nil {
			return nil, err
		}
	}
	sb, err := rt.Create(ctx, spec)
	if err != nil {
		if release != nil {
			release()
		}
		return nil, err
	}
	if spec.Network.Mode != sandbox.NetworkProxy {
		return &engine.Sandbox{Sandbox: sb, Env: env, Limits: spec.Limits}, nil
	}
	g, err := attachEgress(s.egress, sb, egress.Config{
		Scope: "session", ID: opts.SessionID, Network: spec.Network,
		Ask: opts.Ask, AskTimeout: s.askTimeout, OnViolation: opts.OnViolation, Routes: routes, CA: ca,
	})
	if err != nil {
		_, _ = sb.Close(context.WithoutCancel(ctx)) // nothing ran in it yet
		if release != nil {
			release()
		}
		return nil, err
	}
	g.release = release
	return &engine.Sandbox{Sandbox: g, Env: env, SetAllow: g.gate.SetAllow, Limits: spec.Limits}, nil
}

// DeclaredSecrets implements engine.SecretDeclarer: the policy's
// env.secrets.
func (s *sessionSandboxes) DeclaredSecrets(raw json.RawMessage) (map[string]string, error) {
	p, err := policy.Parse("session policy", raw)
	if err != nil {
		return nil, err
	}
	return p.Env.Secrets, nil
}

var _ engine.SecretDeclarer = (*sessionSandboxes)(nil)

// ReplaceAllow implements engine.Sandboxes.
func (s *sessionSandboxes) ReplaceAllow(raw json.RawMessage, allow []string) (json.RawMessage, error) {
	p, err := policy.Parse("session policy", raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", engine.ErrPolicy, err)
	}
	if m := p.Network.Mode; m != "" && m != sandbox.NetworkProxy {
		return nil, fmt.Errorf("%w: the session's network mode is %s, which has no egress proxy to take rules", engine.ErrPolicy, m)
	}
	if err := policy.CheckAllow(s.global(), allow); err != nil {
		return nil, fmt.Errorf("%w: %w", engine.ErrPolicy, err)
	}
	p.Network.Allow = slices.Clone(allow)
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", engine.ErrPolicy, err)
	}
	return json.Marshal(p)
}

// Network implements engine.Sandboxes.
func (s *sessionSandboxes) Network(raw json.RawMessage) (engine.Network, error) {
	p, err := policy.Parse("session policy", raw)
	if err != nil {
		return engine.Network{}, fmt.Errorf("read the session's policy: %w", err)
	}
	n := p.Network
	allow := slices.Clone(n.Allow)
	if allow == nil {
		allow = []string{}
	}
	return engine.Network{Mode: n.Mode, Default: n.Default, Allow: allow, Deny: slices.Clone(n.Deny)}, nil
}

// defaultGlobalPolicy is the operator policy of a daemon started without
// one: a nil global would permit anything a request asks for.
//
//go:embed default-global-policy.yaml
var defaultGlobalPolicy []byte

// loadGlobalPolicy returns the operator's policy: the file at path, read
// and checked now so that a bad file stops the daemon at start, or, for
// "", the built-in default, parsed on first use (checking it against the
// schema costs milliseconds that the start of every daemon need not pay;
// TestDefaultGlobalPolicy keeps it valid).
func loadGlobalPolicy(path string) (func() *policy.Policy, error) {
	if path == "" {
		return sync.OnceValue(func() *policy.Policy {
			p, err := policy.Parse("default-global-policy.yaml", defaultGlobalPolicy)
			if err != nil {
				panic("daemon: the built-in global policy is invalid: " + err.Error())
			}
			return p
		}), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("global policy: %w", err)
	}
	p, err := policy.Parse(path, b)
	if err != nil {
		return nil, fmt.Errorf("global policy: %w", err)
	}
	return func() *policy.Policy { return p }, nil
}

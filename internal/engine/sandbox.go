package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/errkind"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// ErrPolicy is returned (wrapped) when a session's sandbox policy is invalid
// or cannot be enforced here; the message says which field or mechanism.
var ErrPolicy = errkind.New(errkind.Policy, "sandbox policy refused")

// LimitAdjustment is a limit a create request's policy asked for that came
// out lower in the effective policy (the operator's global policy is
// tighter): said back to the client, never applied silently.
type LimitAdjustment struct {
	Field, Requested, Applied, By string
}

// AdjustingSandboxes is the optional ability of a Sandboxes to say, as it
// resolves a create request's policy, which limits were lowered.
type AdjustingSandboxes interface {
	ResolveAdjusted(ctx context.Context, req json.RawMessage, doc *PolicyDoc) (json.RawMessage, []LimitAdjustment, error)
}

// Sandboxes builds the sandboxes sessions run in. The daemon implements it
// over the policy package, the isolation runtimes and the egress proxy; a
// nil Sandboxes in Config means sessions run on the host.
type Sandboxes interface {
	// Resolve turns the policy of a create request (a preset name as a JSON
	// string, an inline policy object, or empty for the daemon's default)
	// into the effective policy, already intersected with the operator's
	// global policy; doc, when set, is a policy file as written instead.
	// It returns nil when the session runs without a sandbox. Errors wrap
	// ErrPolicy.
	Resolve(ctx context.Context, req json.RawMessage, doc *PolicyDoc) (json.RawMessage, error)
	// Create builds the sandbox of one session from its stored effective
	// policy, with cwd as its workspace, and, when the policy's network
	// goes through the egress proxy, the proxy that serves it. Errors wrap
	// ErrPolicy or sandbox.ErrUnenforceable.
	Create(ctx context.Context, policy json.RawMessage, cwd string, opts SandboxOptions) (*Sandbox, error)
	// ReplaceAllow returns the stored policy with its network allow rules
	// replaced, after checking them against the global policy (errors
	// wrap ErrPolicy).
	ReplaceAllow(policy json.RawMessage, allow []string) (json.RawMessage, error)
	// Network reads the network section of a stored effective policy:
	// its mode, default and rules as written (Live false, Allow never
	// nil). The engine reads no policy itself.
	Network(policy json.RawMessage) (Network, error)
	// Workspace checks a session's working directory, given by a client,
	// against the operator's global policy (its workspace roots, and the
	// paths that are never a workspace) and returns it with symlinks
	// resolved. It applies to every session, sandboxed or not; the
	// directory the engine makes for a session without one is not
	// passed. Errors wrap ErrPolicy.
	Workspace(cwd string) (string, error)
	// Reconcile intersects a stored session's effective policy with the
	// operator's global policy as it is now, for a resume: the result is
	// never looser than either, and a policy asking for what the global
	// policy no longer grants is refused (errors wrap ErrPolicy and name
	// the field).
	Reconcile(ctx context.Context, policy json.RawMessage) (json.RawMessage, error)
}

// Network is a session's sandbox network as its stored policy says.
type Network struct {
	Mode    string   `json:"mode"`
	Default string   `json:"default,omitempty"`
	Allow   []string `json:"allow"`
	Deny    []string `json:"deny,omitempty"`
	// Live is true when a running sandbox's proxy enforces it now.
	Live bool `json:"live"`
}

// SandboxOptions are what a session's sandbox needs besides its policy.
type SandboxOptions struct {
	// SessionID names the session in audit records.
	SessionID string
	// Paths are host paths the agent needs inside.
	Paths SandboxPaths
	// Providers are the model APIs the agent calls. Behind the egress
	// proxy each becomes a route, and the agent's environment is changed
	// to use it (Sandbox.Env).
	Providers []agent.Provider
	// Ask decides a network destination no rule settles, for one
	// connection (network.default ask).
	Ask sandbox.Asker
	// OnViolation gets each connection the proxy refuses, when it
	// happens. It must not block.
	OnViolation func(sandbox.Violation)
	// Review decides the workspace changes the sandbox's commit holds
	// back (sandbox.Spec.Review).
	Review sandbox.ReviewFunc
}

// Sandbox is a session's sandbox with what the session needs of its
// egress proxy.
type Sandbox struct {
	sandbox.Sandbox
	// Env replaces variables of the agent's environment: each provider's
	// base URL becomes its route, and its key a placeholder.
	Env map[string]string
	// SetAllow replaces the proxy's allow rules; nil without the proxy.
	SetAllow func(rules []string) error
	// Limits are the sandbox's limits (its compiled policy's), which
	// bound the callers' commands run in it (Manager.Exec).
	Limits sandbox.Limits
}

// PolicyDoc is a policy document as written in a file: errors name Name,
// line and field.
type PolicyDoc struct {
	Name, Text string
}

// SandboxPaths are host paths an agent needs inside its sandbox.
type SandboxPaths struct {
	Read []string
	// Write are the agent's own state directories (its home): they
	// count in the sandbox's limits (sandbox.Spec.StateDirs) and are
	// removed when the session is purged (agent.SandboxNeeder).
	Write []string
}

// report records violations of the session's sandbox, as its coalescer
// passes them on: each becomes a sandbox.violation event (queued, not
// awaited: the proxy must not wait for the disk) and goes to
// Config.OnViolation (the audit log).
func (l *live) report(vs ...sandbox.Violation) {
	evs := make([]event.Event, len(vs))
	for i, v := range vs {
		if l.m.cfg.OnViolation != nil {
			l.m.cfg.OnViolation(l.id, v)
		}
		evs[i] = violationEvent(v)
	}
	l.mu.Lock()
	if !l.announced {
		// The sandbox runs before session.started is written (the agent
		// starts in it): its violations follow that event (announce).
		l.early = append(l.early, evs...)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	_ = l.enqueue(evs, noWait) // fails once the session has ended, or dropped at the bound of a stalled queue
}

// announce is called once session.started is in the log: the violation
// events held until then follow it. (A session that never starts logs
// none of them; they are in the audit log all the same.)
func (l *live) announce() {
	l.mu.Lock()
	l.announced = true
	early := l.early
	l.early = nil
	l.mu.Unlock()
	if len(early) > 0 {
		_ = l.enqueue(early, noWait)
	}
}

// addReports hands violations to the session's coalescer.
func (l *live) addReports(vs []sandbox.Violation) {
	for _, v := range vs {
		l.reports.Add(v)
	}
}

// newSandbox creates the sandbox of session s for live session l, with
// the paths and model APIs its agent says it needs.
func (m *Manager) newSandbox(ctx context.Context, s store.Session, a agent.Adapter, cfg agent.Config, l *live) (*Sandbox, error) {
	opts := SandboxOptions{SessionID: s.ID, Ask: l.AskNetwork, OnViolation: l.NetworkViolation, Review: l.review}
	if n, ok := a.(agent.SandboxNeeder); ok {
		opts.Paths.Read, opts.Paths.Write = n.SandboxPaths(cfg)
	}
	if p, ok := a.(agent.ProviderUser); ok {
		opts.Providers = p.Providers(cfg)
	}
	sb, err := m.cfg.Sandboxes.Create(ctx, s.Policy, s.Cwd, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPolicy, err)
	}
	return sb, nil
}

// violationEvent is the event of one violation.
func violationEvent(v sandbox.Violation) event.Event {
	ev := &event.SandboxViolation{
		Kind: event.ViolationKind(v.Kind), Action: violationAction(v.Action),
		Detail: v.Detail, Path: v.Target, Host: v.Host, Port: v.Port, Rule: v.Rule,
	}
	if v.Kind == sandbox.ViolationNetwork {
		ev.Path = ""
	}
	if v.Process != nil {
		ev.Process = &event.Process{Pid: v.Process.Pid, Name: v.Process.Name, CommandLine: v.Process.CommandLine}
	}
	if v.Count > 1 {
		first, last := v.First, v.Last
		ev.Count, ev.FirstAt, ev.LastAt = v.Count, &first, &last
	}
	return event.New(event.SourceDaemon, ev)
}

// NetworkViolation records a connection the session's egress proxy
// refused, through the coalescer: the first of a kind becomes a
// sandbox.violation event now (not at the end of the turn), its repeats a
// summary. It is the local sandbox's proxy's OnViolation and, through
// agent.NetworkHost, that of the host's proxy of a provider's sandbox.
func (l *live) NetworkViolation(v sandbox.Violation) { l.reports.Add(v) }

// review is the session's sandbox.ReviewFunc: each workspace change the
// commit holds back becomes a permission request of kind file_write with
// the path and the diff, all asked at once; each is applied only when a
// client allows it. Unanswered ones are denied by timeout, and once the
// session is ending every one is denied by the daemon without waiting.
func (l *live) review(ctx context.Context, changes []sandbox.Change) []bool {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(l.closing, func() { cancel(errClosing) })
	defer stop()
	out := make([]bool, len(changes))
	var wg sync.WaitGroup
	for i, c := range changes {
		wg.Go(func() {
			ans, err := l.requestPermission(ctx, reviewRequest(c), event.SourceDaemon, l.m.cfg.PermissionTimeout)
			out[i] = err == nil && ans.Decision == event.DecisionAllow
		})
	}
	wg.Wait()
	return out
}

// reviewRequest is the permission request of one held-back change.
func reviewRequest(c sandbox.Change) agent.PermissionRequest {
	what := c.Type
	if what == "" {
		what = "entry"
	}
	verb := map[string]string{"create": "create", "modify": "change", "delete": "delete"}[c.Op]
	if verb == "" {
		verb = "change"
	}
	input, _ := json.Marshal(struct {
		Path string `json:"path"`
		Op   string `json:"op"`
		Type string `json:"type,omitempty"`
		Rule string `json:"rule"`
		Size int64  `json:"size,omitempty"`
	}{c.Path, c.Op, c.Type, c.Rule, c.Size})
	return agent.PermissionRequest{
		Kind:  event.PermFileWrite,
		Title: fmt.Sprintf("Apply the sandbox's change to %s?", c.Path),
		Detail: fmt.Sprintf("The sandbox wants to %s the %s %s in the working directory. Host tools may run or read files like it (rule %s), "+
			"so it is held back: it reaches the host only if allowed.", verb, what, c.Path, c.Rule),
		Path: c.Path, Diff: c.Diff, Input: input,
		Options: []event.PermissionOption{
			{ID: "allow", Kind: event.OptionAllowOnce, Label: "Apply this change"},
			{ID: "deny", Kind: event.OptionDenyOnce, Label: "Drop it"},
		},
	}
}

// AskNetwork raises a permission request of kind network for one
// connection and waits for its answer, at most req.Timeout (then it is
// denied by timeout) or until ctx ends (the sandbox is closing). It is the
// local sandbox's proxy's Asker and, through agent.NetworkHost, that of
// the host's proxy of a provider's sandbox (the relay's session).
//
// A request that arrives while no turn runs (before session.started, or
// between turns) is not asked: nobody is waiting on the session to answer
// it, and a permission request belongs inside a turn. It is denied at once
// by policy, with the reason, which the proxy audits and reports as a
// sandbox.violation of kind network; adding the host to the policy's
// network allow rules is how such a connection is permitted.
func (l *live) AskNetwork(ctx context.Context, req sandbox.NetworkRequest) (sandbox.NetworkAnswer, error) {
	dest := net.JoinHostPort(req.Host, strconv.Itoa(req.Port))
	l.mu.Lock()
	inTurn := l.turnID != ""
	l.mu.Unlock()
	if !inTurn {
		l.m.cfg.Metrics.PermissionRequests.WithLabelValues(string(event.PermNetwork), string(event.DecisionDeny), string(event.ByPolicy)).Inc()
		return sandbox.NetworkAnswer{Allow: false, By: string(event.ByPolicy), Message: fmt.Sprintf(
			"no turn is running, so nobody is asked: a connection to %s that no network rule allows is denied outside a turn", dest)}, nil
	}
	pr := agent.PermissionRequest{
		Kind:  event.PermNetwork,
		Title: "Allow a connection to " + dest + "?",
		Host:  req.Host, Port: req.Port,
		Options: []event.PermissionOption{
			{ID: "allow", Kind: event.OptionAllowOnce, Label: "Allow this connection"},
			{ID: "deny", Kind: event.OptionDenyOnce, Label: "Deny"},
		},
	}
	who := "a process"
	if !req.Peer.IsZero() {
		pr.Process = &event.Process{Pid: req.Peer.Pid, Name: req.Peer.Name, CommandLine: req.Peer.CommandLine}
		// The name is the process's own claim (sanitised by the
		// runtime): quoted, and said to be the sandbox's word.
		who = fmt.Sprintf("a process calling itself %q (pid %d, as the sandbox reports it)", req.Peer.Name, req.Peer.Pid)
	}
	pr.Detail = fmt.Sprintf("%s in the sandbox opens a %s connection to %s, which no network rule settles. An answer is good for this one connection.", who, req.Via, dest)
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = l.m.cfg.PermissionTimeout
	}
	ans, err := l.requestPermission(ctx, pr, event.SourceDaemon, timeout)
	if err != nil {
		return sandbox.NetworkAnswer{}, err
	}
	return sandbox.NetworkAnswer{Allow: ans.Decision == event.DecisionAllow, By: string(ans.By), Message: ans.Message}, nil
}

// violationAction maps a runtime's action word onto the event's enum.
func violationAction(a string) event.ViolationAction {
	switch a {
	case string(event.ActionDropped):
		return event.ActionDropped
	case string(event.ActionAsked):
		return event.ActionAsked
	}
	return event.ActionBlocked
}

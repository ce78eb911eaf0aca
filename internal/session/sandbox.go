package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// ErrPolicy is returned (wrapped) when a session's sandbox policy is invalid
// or cannot be enforced here; the message says which field or mechanism.
var ErrPolicy = errors.New("sandbox policy refused")

// Sandboxes builds the sandboxes sessions run in. The daemon implements it
// over the policy package and the isolation runtimes; a nil Sandboxes in
// Config means sessions run on the host.
type Sandboxes interface {
	// Resolve turns the policy of a create request (a preset name as a JSON
	// string, an inline policy object, or empty for the daemon's default)
	// into the effective policy, already intersected with the operator's
	// global policy; doc, when set, is a policy file as written instead.
	// It returns nil when the session runs without a sandbox. Errors wrap
	// ErrPolicy.
	Resolve(ctx context.Context, req json.RawMessage, doc *PolicyDoc) (json.RawMessage, error)
	// Create builds the sandbox of one session from its stored effective
	// policy, with cwd as its workspace and extra paths the agent needs
	// (its installed binary, its private state dir). Errors wrap ErrPolicy
	// or sandbox.ErrUnenforceable.
	Create(ctx context.Context, policy json.RawMessage, cwd string, paths SandboxPaths) (sandbox.Sandbox, error)
}

// PolicyDoc is a policy document as written in a file: errors name Name,
// line and field.
type PolicyDoc struct {
	Name, Text string
}

// SandboxPaths are host paths an agent needs inside its sandbox.
type SandboxPaths struct {
	Read  []string
	Write []string
}

// violationEvents turns what a session's sandbox refused into
// sandbox.violation events, handing each to Config.OnViolation (the audit
// log) too.
func (m *Manager) violationEvents(sessionID string, vs []sandbox.Violation) []event.Event {
	evs := make([]event.Event, 0, len(vs))
	for _, v := range vs {
		if m.cfg.OnViolation != nil {
			m.cfg.OnViolation(sessionID, v)
		}
		evs = append(evs, event.New(event.SourceDaemon, &event.SandboxViolation{
			Kind: event.ViolationKind(v.Kind), Action: violationAction(v.Action),
			Detail: v.Detail, Path: v.Target, Rule: v.Rule,
		}))
	}
	return evs
}

// newSandbox creates the sandbox of session s, with the paths its agent
// says it needs.
func (m *Manager) newSandbox(ctx context.Context, s store.Session, a agent.Adapter, cfg agent.Config) (sandbox.Sandbox, error) {
	var paths SandboxPaths
	if n, ok := a.(agent.SandboxNeeder); ok {
		paths.Read, paths.Write = n.SandboxPaths(cfg)
	}
	sb, err := m.cfg.Sandboxes.Create(ctx, s.Policy, s.Cwd, paths)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPolicy, err)
	}
	return sb, nil
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

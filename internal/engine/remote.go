package engine

import (
	"context"
	"encoding/json"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/provider"
)

// The provider contract's errors, as the API maps them (httpapi/problem.go).
var (
	ErrUnknownProvider     = provider.ErrUnknown
	ErrProviderCredentials = provider.ErrCredentials
	ErrProviderQuota       = provider.ErrQuota
	ErrProviderUnavailable = provider.ErrUnavailable
	ErrSandboxGone         = provider.ErrGone
	ErrProviderUnsupported = provider.ErrUnsupported
)

// Remote places sessions on a sandbox provider (internal/provider/relay):
// such a session runs its agent in the agentbox daemon of a sandbox the
// provider made, through an adapter that relays that inner session to
// this engine. The engine knows only the session's native id: Remote
// makes it at create, stored before anything is made, and recognises it
// at every later start, so a session placed on a provider never runs on
// this host.
type Remote interface {
	// Place returns the native id placing a new session on the named
	// provider ("" names the default), or "" when the session runs on
	// this host. An unknown provider is an error wrapping
	// provider.ErrUnknown.
	Place(provider string) (string, error)
	// Adapter returns the adapter that runs the session of native, with
	// the agent named agentName (info is its adapter's on this host) and
	// the session's policy (the inner daemon enforces it); ok is false
	// when native places nothing.
	Adapter(agentName string, info agent.Info, native string, policy json.RawMessage) (agent.Adapter, bool)
	// Remove destroys what native placed (a deleted session's sandbox).
	Remove(ctx context.Context, native string) error
}

// remoteAdapter returns the relay's adapter of a session placed by native,
// or a and false.
func (m *Manager) remoteAdapter(ctx context.Context, name string, a agent.Adapter, native string, policy json.RawMessage) (agent.Adapter, bool) {
	if m.cfg.Remote == nil || native == "" {
		return a, false
	}
	ra, ok := m.cfg.Remote.Adapter(name, a.Info(ctx), native, policy)
	if !ok {
		return a, false
	}
	return ra, true
}

// Package amp lists Sourcegraph's Amp among the agents, as unavailable.
//
// Amp's CLI does not call a model API agentbox could point at a local
// server: its agent loop runs in Amp's own service (a server-side "thread
// actor" reached over a WebSocket), so an adapter could not be tested
// offline against the fake LLM, and agentbox does not ship untested
// adapters. See docs/agents.md.
package amp

import (
	"context"
	"errors"

	"github.com/agentbox/agentbox/internal/agent"
)

// Name is the registry name.
const Name = "amp"

// Reason is why Amp is not available, as /v1/agents reports it.
const Reason = "not supported: Amp's agent loop runs on Amp's servers, not in the CLI, " +
	"so agentbox cannot point it at a model endpoint or test it offline"

// ErrUnsupported is returned by Start.
var ErrUnsupported = errors.New("amp: " + Reason)

type adapter struct{}

// New returns the Amp entry: listed, never available.
func New() agent.Adapter { return adapter{} }

func (adapter) Info(context.Context) agent.Info {
	return agent.Info{Name: Name, Title: "Amp", Available: false, Reason: Reason}
}

func (adapter) Start(context.Context, agent.Config, agent.Host) (agent.Session, error) {
	return nil, ErrUnsupported
}

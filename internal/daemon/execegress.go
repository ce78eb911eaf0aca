package daemon

import (
	"context"
	"fmt"

	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/relay"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
)

// execEgress is the host side of the network of an exec's sandbox on a
// provider that carries its egress and enforces the exec's policy
// (relay.Config.ExecEgress): a gate of this daemon's egress proxy deciding
// every connection under the policy's network rules and secrets, as for a
// local exec, its denials recorded in the audit log under the sandbox.
// Mode none carries nothing; mode host is refused (the provider's mapping
// refuses it first). Nobody is asked: destinations no rule settles are
// denied, as for a local exec.
func (d *Daemon) execEgress(_ context.Context, req relay.ExecEgressRequest) (*relay.Egress, error) {
	p, err := policy.Parse("exec policy", req.Policy)
	if err != nil {
		return nil, err
	}
	n := p.Network
	switch n.Mode {
	case "", sandbox.NetworkProxy:
	case sandbox.NetworkNone:
		return &relay.Egress{}, nil
	default:
		return nil, fmt.Errorf("%w: network.mode %s: the sandbox has no host network to give (use proxy)", provider.ErrUnsupported, n.Mode)
	}
	network := sandbox.Network{
		Mode: sandbox.NetworkProxy, Default: egress.DefaultDeny, ProxyPort: provider.EgressPort,
		Allow: n.Allow, Deny: n.Deny, Secrets: p.Env.Secrets,
		MaxConnections: n.MaxConnections, MaxConnectionRate: n.MaxConnectionRate,
	}
	task := "exec:" + req.Sandbox
	g, err := d.egress.Gate(egress.Config{
		Scope: "exec", ID: task, Network: network,
		OnViolation: func(v sandbox.Violation) { d.audit.Record("exec", task, v) },
	})
	if err != nil {
		return nil, err
	}
	return &relay.Egress{Serve: g.Serve, Close: func() { _ = g.Close() }}, nil
}

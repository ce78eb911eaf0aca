package daemon

import (
	"context"
	"fmt"
	"maps"
	"net"
	"strconv"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/relay"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
)

// forwardEgress makes the egress proxy's address of this daemon's
// sandbox (127.0.0.1:provider.EgressPort) the host's proxy, reached on the
// unix socket Config.EgressSocket: this daemon is the inner daemon of a
// provider's sandbox that has no network. It only carries connections;
// the host decides each. The forwarder lives until ctx ends (the daemon's
// shutdown).
func (d *Daemon) forwardEgress(ctx context.Context, cu *cleanup) error {
	if d.cfg.EgressSocket == "" {
		return nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(provider.EgressPort)))
	if err != nil {
		return fmt.Errorf("egress socket: the egress proxy's address: %w", err)
	}
	cu.add(func() { _ = ln.Close() })
	go func() {
		if err := egress.Forward(ctx, ln, egress.UnixDialer(d.cfg.EgressSocket), 0); err != nil {
			d.log.Warn("carrying egress to the host stopped", "err", err)
		}
	}()
	return nil
}

// relayEgress is the host side of the network of a session's sandbox on a
// provider that carries its egress (relay.Config.Egress): this daemon's
// egress proxy, a gate of its own for the sandbox, deciding every
// connection under the session's policy as for a local sandbox, with the
// agent's model APIs as routes that add the real credentials here. The
// sandbox holds placeholders only.
//
// The network is the policy's network section; a session without a policy
// gets a gate that denies every destination (its model routes aside):
// without a sandbox of its own, the container is the sandbox, and nothing
// is reached that nobody allowed. Mode none carries nothing (the credential
// variables still hold placeholders); mode host is refused, the container
// having no host network to give. A destination no rule settles is denied,
// or, with network.default ask, asked through the host session's
// permission flow (req.Ask, the serve --network-ask-timeout bound), for
// that one connection, as for a local sandbox; every refusal is the host
// session's sandbox.violation (req.OnViolation) besides its audit record.
func (d *Daemon) relayEgress(_ context.Context, req relay.EgressRequest) (*relay.Egress, error) {
	var providers []agent.Provider
	if a, err := d.cfg.Agents.Get(req.Agent); err == nil {
		if pu, ok := a.(agent.ProviderUser); ok {
			providers = pu.Providers(req.Config)
		}
	}
	if len(providers) == 0 {
		// An agent this host does not know: the model APIs the session's
		// variables name, as for a sandboxed session of such an agent.
		providers = agent.ProvidersIn(req.Config.Env)
	}
	network := sandbox.Network{Mode: sandbox.NetworkProxy, Default: egress.DefaultDeny}
	if len(req.Policy) > 0 && string(req.Policy) != "null" {
		p, err := policy.Parse("session policy", req.Policy)
		if err != nil {
			return nil, err
		}
		n := p.Network
		network.Allow, network.Deny, network.Secrets = n.Allow, n.Deny, p.Env.Secrets
		if n.Default != "" {
			// The stored policy is the effective one: an ask there is
			// one the operator's global policy permits.
			network.Default = n.Default
		}
		network.MaxConnections, network.MaxConnectionRate = n.MaxConnections, n.MaxConnectionRate
		switch n.Mode {
		case "", sandbox.NetworkProxy:
		case sandbox.NetworkNone:
			network.Mode = sandbox.NetworkNone
		default:
			return nil, fmt.Errorf("%w: network.mode %s: the sandbox has no host network to give (use proxy)", provider.ErrUnsupported, n.Mode)
		}
	}
	env := credentialEnv(providers)
	for k, name := range network.Secrets {
		env[k] = egress.Placeholder(name)
	}
	if network.Mode == sandbox.NetworkNone {
		return &relay.Egress{Env: env}, nil
	}
	port := provider.EgressPort
	routes, baseURLs, err := providerRoutes(port, providers)
	if err != nil {
		return nil, err
	}
	maps.Copy(env, baseURLs)
	maps.Copy(env, policy.ProxyEnv(port))
	network.ProxyPort = port
	g, err := d.egress.Gate(egress.Config{Scope: "session", ID: req.SessionID, Network: network, Routes: routes,
		Ask: req.Ask, AskTimeout: d.cfg.NetworkAskTimeout, OnViolation: req.OnViolation})
	if err != nil {
		return nil, err
	}
	return &relay.Egress{Serve: g.Serve, Env: env, Close: func() { _ = g.Close() }}, nil
}

package daemon

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/execution"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/relay"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/yamldoc"
)

// ProviderFactory builds a sandbox provider from the daemon's environment
// (where its credentials are: getenv, never the sandbox's) and data
// directory. Provider packages are added to providerFactories by name.
type ProviderFactory func(getenv func(string) (string, bool), dataDir string) (provider.Provider, error)

// providerFactories are the providers this binary can be configured with,
// by name.
var providerFactories = map[string]ProviderFactory{}

// providersFile is the file of --provider-config: each provider to
// configure and its options (Spec.Options: image or template, region,
// size, runtime), which the provider validates (an unknown key is
// refused at the first create):
//
//	providers:
//	  docker: {runtime: runsc}
//	  e2b: {template: base}
type providersFile struct {
	Providers map[string]map[string]string `json:"providers"`
}

// loadProviders builds the providers of the configuration file (path, ""
// for none) and of the default provider, and returns them with their
// options. A name no factory has is refused, naming the built-in ones.
func loadProviders(cfg Config) (*provider.Registry, map[string]map[string]string, error) {
	opts := map[string]map[string]string{}
	if cfg.ProviderConfig != "" {
		b, err := os.ReadFile(cfg.ProviderConfig)
		if err != nil {
			return nil, nil, fmt.Errorf("provider config: %w", err)
		}
		var f providersFile
		if err := yamldoc.Decode(b, &f, yamldoc.Default); err != nil {
			return nil, nil, fmt.Errorf("provider config %s:%w", cfg.ProviderConfig, err)
		}
		opts = f.Providers
	}
	if cfg.DefaultProvider != "" && opts[cfg.DefaultProvider] == nil {
		opts[cfg.DefaultProvider] = map[string]string{}
	}
	reg := provider.NewRegistry()
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.LookupEnv
	}
	for _, name := range slices.Sorted(maps.Keys(opts)) {
		build, ok := providerFactories[name]
		if !ok {
			return nil, nil, fmt.Errorf("%w %q (built in: %v)", provider.ErrUnknown, name, slices.Sorted(maps.Keys(providerFactories)))
		}
		p, err := build(getenv, cfg.DataDir)
		if err != nil {
			return nil, nil, fmt.Errorf("provider %s: %w", name, err)
		}
		reg.Register(p)
	}
	return reg, opts, nil
}

// buildRelay builds the relay that places sessions on the configured
// providers (nil when there are none): its key in the data directory, the
// binary it uploads (this daemon's own executable unless configured).
func (d *Daemon) buildRelay() (*relay.Relay, error) {
	cfg := d.cfg
	if cfg.Providers == nil || len(cfg.Providers.Names()) == 0 {
		if cfg.DefaultProvider != "" {
			return nil, fmt.Errorf("default provider: %w %q (configured: none)", provider.ErrUnknown, cfg.DefaultProvider)
		}
		return nil, nil
	}
	key, err := relay.LoadKey(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	bin := cfg.ProviderBinary
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("the binary to upload to sandboxes: %w", err)
		}
	}
	return relay.New(relay.Config{
		Providers: cfg.Providers, Default: cfg.DefaultProvider, Options: cfg.ProviderOptions,
		Binary: bin, Key: key, LastRelayed: d.lastRelayed, LostAfter: cfg.RelayLostAfter, Egress: d.relayEgress, ExecEgress: d.execEgress,
		Log: cfg.Log.With("component", "relay"),
	})
}

// execRemote is the relay as the execution service's Remote, read at
// each exec: the service is built before the relay (buildEngine), and
// both before the daemon serves.
type execRemote struct{ d *Daemon }

func (r execRemote) Exec(ctx context.Context, req execution.RemoteRequest, hooks execution.Hooks) (execution.Result, error) {
	if r.d.relay == nil {
		return execution.Result{}, fmt.Errorf("%w %q (configured: none)", provider.ErrUnknown, req.Provider)
	}
	return r.d.relay.Exec(ctx, req, hooks)
}

var _ execution.RemoteProcesses = execRemote{}

func (r execRemote) StartProcess(ctx context.Context, req execution.RemoteStartRequest) (execution.RemoteProcess, error) {
	if r.d.relay == nil {
		if req.Input != nil {
			_ = req.Input.Close()
		}
		return nil, fmt.Errorf("%w %q (configured: none)", provider.ErrUnknown, req.Provider)
	}
	return r.d.relay.StartProcess(ctx, req)
}

// lastRelayed is the relay's cursor of a session: the inner seq of the
// last relayed event the host's store holds, read backwards from the end
// of its log (relay.LastRelayed).
func (d *Daemon) lastRelayed(ctx context.Context, sessionID string) (int64, error) {
	return relay.LastRelayed(ctx, func(ctx context.Context, after int64, limit int) ([]event.Event, error) {
		return d.st.Events(ctx, sessionID, after, limit)
	})
}

// reconcileSandboxes removes, after Recover, the sandboxes this daemon
// made that no session keeps: a session not ended for good keeps its
// sandbox (a resume reconnects to it); everything else a crash left is
// destroyed. A provider that fails is logged: the daemon serves anyway.
func (d *Daemon) reconcileSandboxes(ctx context.Context) {
	if d.relay == nil {
		return
	}
	keep := map[string]map[string]bool{}
	before := ""
	for {
		ss, err := d.st.ListSessions(ctx, store.ListOptions{Limit: 500, Before: before})
		if err != nil {
			d.log.Warn("reconciling provider sandboxes: listing sessions", "err", err)
			return
		}
		for _, s := range ss {
			if s.Status == store.StatusEnded || s.Status == store.StatusFailed {
				continue
			}
			if p, id, ok := relay.Sandboxes(s.NativeSessionID); ok {
				if keep[p] == nil {
					keep[p] = map[string]bool{}
				}
				keep[p][id] = true
			}
		}
		if len(ss) < 500 {
			break
		}
		before = ss[len(ss)-1].ID
	}
	removed, err := d.relay.Reconcile(ctx, keep)
	if err != nil {
		d.log.Warn("reconciling provider sandboxes", "err", err)
	}
	if len(removed) > 0 {
		d.log.Warn("removed provider sandboxes no session keeps", "sandboxes", removed)
	}
}

package daemon

import (
	"context"
	"fmt"
	"os"

	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/relay"
	"github.com/agentbox/agentbox/internal/store"
)

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
		Binary: bin, Key: key, LastRelayed: d.lastRelayed, LostAfter: cfg.RelayLostAfter,
		Log: cfg.Log.With("component", "relay"),
	})
}

// lastRelayed is the relay's cursor of a session: the inner seq of the
// last relayed event the host's store holds.
func (d *Daemon) lastRelayed(ctx context.Context, sessionID string) (int64, error) {
	var last, after int64
	for {
		evs, err := d.st.Events(ctx, sessionID, after, 1000)
		if err != nil {
			return 0, err
		}
		for _, e := range evs {
			if seq, ok := relay.InnerSeq(e.Raw); ok {
				last = seq
			}
			after = e.Seq
		}
		if len(evs) < 1000 {
			return last, nil
		}
	}
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

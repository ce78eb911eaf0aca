package httpapi

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/provider"
)

// providerHealthTimeout bounds each provider's health check of GET
// /v1/providers; the checks run at once.
const providerHealthTimeout = 5 * time.Second

type providersOutput struct{ Body client.ProviderList }

func providerOps() []route {
	return []route{
		&op[struct{}, providersOutput]{h: (*server).providers, opSpec: opSpec{
			ID: "listProviders", Method: http.MethodGet, Path: "/v1/providers", Tag: "providers",
			Summary: "List sandbox providers",
			Description: "The sandbox providers this daemon is configured with (serve --provider-config), each with its capabilities " +
				"and whether it answers now with its credentials (each checked at once, for at most 5 seconds). A session created " +
				"with provider runs in a sandbox there; the default is the one sessions without provider use (none: this host).",
			Errors: errs(),
		}},
	}
}

func (s *server) providers(ctx context.Context, _ *struct{}) (*providersOutput, error) {
	out := client.ProviderList{Providers: []client.ProviderInfo{}, Default: s.cfg.DefaultProvider}
	reg := s.cfg.Providers
	if reg == nil {
		return &providersOutput{Body: out}, nil
	}
	names := reg.Names()
	out.Providers = make([]client.ProviderInfo, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		p, err := reg.Get(name)
		if err != nil {
			continue
		}
		out.Providers[i] = toProviderInfo(name, p.Capabilities())
		out.Providers[i].Default = name == s.cfg.DefaultProvider
		wg.Go(func() {
			hctx, cancel := context.WithTimeout(ctx, providerHealthTimeout)
			defer cancel()
			if err := p.Health(hctx); err != nil {
				out.Providers[i].Reason = err.Error()
				return
			}
			out.Providers[i].Healthy = true
		})
	}
	wg.Wait()
	return &providersOutput{Body: out}, nil
}

func toProviderInfo(name string, c provider.Capabilities) client.ProviderInfo {
	return client.ProviderInfo{Name: name, Capabilities: client.ProviderCapabilities{
		PauseResume: c.PauseResume, Snapshot: c.Snapshot, EgressRules: c.EgressRules,
		PreviewURLs: c.PreviewURLs, FileTransfer: c.FileTransfer, CarriedEgress: c.CarriedEgress, Runtimes: c.Runtimes,
	}}
}

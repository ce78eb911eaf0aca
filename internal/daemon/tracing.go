package daemon

import (
	"context"
	"net/url"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/tracing"
	"github.com/agentbox/agentbox/internal/version"
)

// buildTracing starts the trace exporter when OTLP is configured
// (Config.OTLPEndpoint, or the OTEL_* variables through Config.Getenv;
// tracing.FromEnv) and wraps every isolation runtime so that each sandbox
// created, for a session or an execution, is a span. Not configured,
// nothing is started or wrapped.
func (d *Daemon) buildTracing(cu *cleanup) error {
	cfg := d.cfg
	tc, err := tracing.FromEnv(cfg.Getenv, cfg.OTLPEndpoint)
	if err != nil {
		return err
	}
	tc.ServiceVersion = version.String()
	t, err := tracing.New(tc, cfg.Log.With("component", "tracing"))
	if err != nil || t == nil {
		return err
	}
	cu.add(func() { _ = t.Shutdown(context.Background()) })
	d.tracer = t
	// Each runtime is wrapped in a registry of the daemon's own: the
	// caller's (Config.Runtimes) is left as it was given.
	traced := sandbox.NewRegistry()
	for _, rt := range cfg.Runtimes.All() {
		traced.Register(tracedRuntime{Runtime: rt, t: t})
	}
	d.cfg.Runtimes = traced
	host := tc.Endpoint
	if u, err := url.Parse(tc.Endpoint); err == nil {
		host = u.Scheme + "://" + u.Host + u.Path // no user, no query
	}
	cfg.Log.Info("exporting traces over OTLP/HTTP", "endpoint", host)
	return nil
}

// tracedRuntime records a span for each sandbox its runtime creates, the
// child of the span in the creating context (the request's).
type tracedRuntime struct {
	sandbox.Runtime
	t *tracing.Tracer
}

func (r tracedRuntime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	_, span := r.t.Start(ctx, "agentbox.sandbox.create", tracing.KindInternal)
	span.SetString("agentbox.sandbox.runtime", r.Name())
	sb, err := r.Runtime.Create(ctx, spec)
	if err != nil {
		span.SetError(err)
	} else {
		span.SetString("agentbox.sandbox.id", sb.ID())
	}
	span.End()
	return sb, err
}

// Unwrap returns the wrapped runtime.
func (r tracedRuntime) Unwrap() sandbox.Runtime { return r.Runtime }

// Package metrics holds the daemon's metrics: the instruments (counters,
// gauges, histograms and their labelled vectors), the registry that serves
// them as the Prometheus text exposition format, the Go runtime and process
// collectors, the session engine's and the HTTP API's instruments, and the
// one instrument several subsystems count in (NewViolations). Every other
// subsystem owns its instruments and registers them on the Registerer it is
// given (this package's Metrics): execution (execution/metrics.go), the
// egress proxy (sandbox/egress/conn.go). Each metric is defined once.
//
// It replaces Prometheus's client library, keeping every name, type,
// label, bucket and HELP text, and the format, as that client wrote them:
// the client and its protobuf dependencies cost 1 MiB of the binary.
package metrics

import (
	"slices"
	"sync"
)

// NewViolations returns the counter agentbox_policy_violations_total{kind}:
// what sandboxes refused, whether sessions' (through the audit log) or
// executions'. Register one per registry, shared by both.
func NewViolations() *CounterVec {
	return NewCounterVec(CounterOpts{
		Name: "agentbox_policy_violations_total",
		Help: "Things a sandbox refused, by violation kind (filesystem, syscall, resource, network).",
	}, []string{"kind"})
}

// Metrics are the daemon's instruments. A nil *Metrics is not valid; use New.
type Metrics struct {
	// Registry is what /metrics serves. Register on Metrics itself, which
	// records the names for Names.
	Registry *Registry

	mu    sync.Mutex
	names []string

	SessionsCreated    *Counter
	SessionsActive     *Gauge
	EventsAppended     *Counter
	TurnDuration       *HistogramVec // agent, stop_reason
	ToolCallDuration   *HistogramVec // kind
	PermissionRequests *CounterVec   // kind, decision, by
	PermissionWait     *HistogramVec // kind
	HTTPDuration       *HistogramVec // method, route, code
}

// New creates the instruments and registers them, with the Go and process
// collectors, on a fresh registry.
func New() *Metrics {
	r := NewRegistry()
	m := &Metrics{
		Registry: r,
		SessionsCreated: NewCounter(CounterOpts{
			Name: "agentbox_sessions_created_total", Help: "Sessions created.",
		}),
		SessionsActive: NewGauge(GaugeOpts{
			Name: "agentbox_sessions_active", Help: "Sessions with a live agent.",
		}),
		EventsAppended: NewCounter(CounterOpts{
			Name: "agentbox_events_appended_total", Help: "Events durably appended to session logs.",
		}),
		TurnDuration: NewHistogramVec(HistogramOpts{
			Name: "agentbox_turn_duration_seconds", Help: "Turn duration from message to turn.completed.",
			Buckets: ExponentialBuckets(0.01, 2.5, 12),
		}, []string{"agent", "stop_reason"}),
		ToolCallDuration: NewHistogramVec(HistogramOpts{
			Name: "agentbox_tool_call_duration_seconds", Help: "Duration of tool, command and file-change items from start to completion.",
			Buckets: ExponentialBuckets(0.001, 3, 12),
		}, []string{"kind"}),
		PermissionRequests: NewCounterVec(CounterOpts{
			Name: "agentbox_permission_requests_total", Help: "Permission requests by kind and how they were settled.",
		}, []string{"kind", "decision", "by"}),
		PermissionWait: NewHistogramVec(HistogramOpts{
			Name: "agentbox_permission_wait_seconds", Help: "Time a permission request waited for its answer.",
			Buckets: ExponentialBuckets(0.01, 3, 12),
		}, []string{"kind"}),
		HTTPDuration: NewHistogramVec(HistogramOpts{
			Name: "agentbox_http_request_duration_seconds", Help: "HTTP request duration by route.",
			Buckets: ExponentialBuckets(0.0001, 4, 10),
		}, []string{"method", "route", "code"}),
	}
	m.MustRegister(
		NewGoCollector(),
		NewProcessCollector(),
		m.SessionsCreated, m.SessionsActive, m.EventsAppended, m.TurnDuration,
		m.ToolCallDuration, m.PermissionRequests, m.PermissionWait, m.HTTPDuration,
	)
	return m
}

// Register registers c on the registry and records the names it reports.
func (m *Metrics) Register(c Collector) error {
	if err := m.Registry.Register(c); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.names = append(m.names, c.names()...)
	return nil
}

// MustRegister registers cs and panics on an error.
func (m *Metrics) MustRegister(cs ...Collector) {
	for _, c := range cs {
		if err := m.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister removes c from the registry; Names
// keeps listing it.
func (m *Metrics) Unregister(c Collector) bool { return m.Registry.Unregister(c) }

// Names lists the metrics registered, sorted, each once per registration:
// what /metrics can report.
func (m *Metrics) Names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := slices.Clone(m.names)
	slices.Sort(names)
	return names
}

var _ Registerer = (*Metrics)(nil)

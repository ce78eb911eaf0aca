// Package metrics holds the daemon's Prometheus registry, the session
// engine's and the HTTP API's instruments, and the one instrument several
// subsystems count in (NewViolations). Every other subsystem owns its
// instruments and registers them on the Registerer it is given (this
// package's Metrics): execution (execution/metrics.go), the egress proxy
// (sandbox/egress/conn.go). Each metric is defined once.
package metrics

import (
	"regexp"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// NewViolations returns the counter agentbox_policy_violations_total{kind}:
// what sandboxes refused, whether sessions' (through the audit log) or
// executions'. Register one per registry, shared by both.
func NewViolations() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentbox_policy_violations_total",
		Help: "Things a sandbox refused, by violation kind (filesystem, syscall, resource, network).",
	}, []string{"kind"})
}

// Metrics are the daemon's instruments. A nil *Metrics is not valid; use New.
type Metrics struct {
	// Registry is what /metrics serves. Register on Metrics itself, which
	// records the names for Names.
	Registry *prometheus.Registry

	mu    sync.Mutex
	names []string

	SessionsCreated    prometheus.Counter
	SessionsActive     prometheus.Gauge
	EventsAppended     prometheus.Counter
	TurnDuration       *prometheus.HistogramVec // agent, stop_reason
	ToolCallDuration   *prometheus.HistogramVec // kind
	PermissionRequests *prometheus.CounterVec   // kind, decision, by
	PermissionWait     *prometheus.HistogramVec // kind
	HTTPDuration       *prometheus.HistogramVec // method, route, code
}

// New creates the instruments and registers them, with the Go and process
// collectors, on a fresh registry.
func New() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		SessionsCreated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentbox_sessions_created_total", Help: "Sessions created.",
		}),
		SessionsActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agentbox_sessions_active", Help: "Sessions with a live agent.",
		}),
		EventsAppended: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentbox_events_appended_total", Help: "Events durably appended to session logs.",
		}),
		TurnDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentbox_turn_duration_seconds", Help: "Turn duration from message to turn.completed.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 12),
		}, []string{"agent", "stop_reason"}),
		ToolCallDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentbox_tool_call_duration_seconds", Help: "Duration of tool, command and file-change items from start to completion.",
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 12),
		}, []string{"kind"}),
		PermissionRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_permission_requests_total", Help: "Permission requests by kind and how they were settled.",
		}, []string{"kind", "decision", "by"}),
		PermissionWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentbox_permission_wait_seconds", Help: "Time a permission request waited for its answer.",
			Buckets: prometheus.ExponentialBuckets(0.01, 3, 12),
		}, []string{"kind"}),
		HTTPDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentbox_http_request_duration_seconds", Help: "HTTP request duration by route.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"method", "route", "code"}),
	}
	m.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.SessionsCreated, m.SessionsActive, m.EventsAppended, m.TurnDuration,
		m.ToolCallDuration, m.PermissionRequests, m.PermissionWait, m.HTTPDuration,
	)
	return m
}

// Register registers c on the registry (prometheus.Registerer) and records
// the names it describes.
func (m *Metrics) Register(c prometheus.Collector) error {
	if err := m.Registry.Register(c); err != nil {
		return err
	}
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	m.mu.Lock()
	defer m.mu.Unlock()
	for d := range ch {
		if n := fqName.FindStringSubmatch(d.String()); n != nil {
			m.names = append(m.names, n[1])
		}
	}
	return nil
}

// fqName is a metric's name in a Desc's String (which has no accessor).
var fqName = regexp.MustCompile(`^Desc\{fqName: "([^"]*)"`)

// MustRegister registers cs and panics on an error (prometheus.Registerer).
func (m *Metrics) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := m.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister removes c from the registry (prometheus.Registerer); Names
// keeps listing it.
func (m *Metrics) Unregister(c prometheus.Collector) bool { return m.Registry.Unregister(c) }

// Names lists the metrics registered, sorted, each once per registration:
// what /metrics can report.
func (m *Metrics) Names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := slices.Clone(m.names)
	slices.Sort(names)
	return names
}

var _ prometheus.Registerer = (*Metrics)(nil)

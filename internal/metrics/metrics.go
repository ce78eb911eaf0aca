// Package metrics holds the daemon's Prometheus instruments, defined and
// named in one place and registered on a registry of their own.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the daemon's instruments. A nil *Metrics is not valid; use New.
type Metrics struct {
	Registry *prometheus.Registry

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
	r.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.SessionsCreated, m.SessionsActive, m.EventsAppended, m.TurnDuration,
		m.ToolCallDuration, m.PermissionRequests, m.PermissionWait, m.HTTPDuration,
	)
	return m
}

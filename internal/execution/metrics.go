package execution

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentbox/agentbox/internal/metrics"
)

// serviceMetrics are the service's instruments. They always exist, so the
// code can count unconditionally; they are registered only when
// Options.Registerer is set.
type serviceMetrics struct {
	violations   *prometheus.CounterVec // kind
	execs        *prometheus.CounterVec // language, outcome
	execDuration *prometheus.HistogramVec
	processes    prometheus.Counter
	running      prometheus.Gauge
	rejected     prometheus.Counter
	policyDenied prometheus.Counter
	pool         *prometheus.CounterVec // result: hit, miss
	poolReady    prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, violations *prometheus.CounterVec) (*serviceMetrics, error) {
	shared := violations != nil
	if !shared {
		violations = metrics.NewViolations()
	}
	m := &serviceMetrics{
		violations: violations,
		execs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_execs_total", Help: "Executions by language and outcome (ok, an error code, or failed).",
		}, []string{"language", "outcome"}),
		execDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentbox_exec_duration_seconds", Help: "Run time of executions, from process start to exit.",
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 12),
		}, []string{"language"}),
		processes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentbox_processes_started_total", Help: "Processes started through the processes API.",
		}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agentbox_processes_running", Help: "Processes of the processes API still running.",
		}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentbox_exec_rejected_total", Help: "Executions and processes refused by the concurrency limit.",
		}),
		policyDenied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentbox_exec_policy_denied_total", Help: "Executions and processes refused because of their policy.",
		}),
		pool: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_sandbox_pool_takes_total", Help: "Requests for a warm sandbox, by result (hit, miss).",
		}, []string{"result"}),
		poolReady: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agentbox_sandbox_pool_ready", Help: "Sandboxes waiting in the warm pool.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.execs, m.execDuration, m.processes, m.running, m.rejected, m.policyDenied, m.pool, m.poolReady}
	if !shared {
		cs = append(cs, m.violations)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("execution: register metrics: %w", err)
		}
	}
	return m, nil
}

// countExec records one finished exec.
func (m *serviceMetrics) countExec(lang string, res Result, err error) {
	outcome := "ok"
	switch {
	case errors.Is(err, ErrTooMany):
		return // counted as rejected
	case err != nil:
		outcome = "failed"
	case res.Error != nil:
		outcome = res.Error.Code
	}
	m.execs.WithLabelValues(lang, outcome).Inc()
	if err == nil {
		m.execDuration.WithLabelValues(lang).Observe(res.Duration.Seconds())
	}
}

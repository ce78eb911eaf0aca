package execution

import (
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/internal/metrics"
)

// serviceMetrics are the service's instruments. They always exist, so the
// code can count unconditionally; they are registered only when
// Options.Registerer is set.
type serviceMetrics struct {
	violations   *metrics.CounterVec // kind
	execs        *metrics.CounterVec // language, outcome
	execDuration *metrics.HistogramVec
	processes    *metrics.Counter
	running      *metrics.Gauge
	rejected     *metrics.Counter
	policyDenied *metrics.Counter
	pool         *metrics.CounterVec // result: hit, miss
	poolReady    *metrics.Gauge
	zygote       *metrics.CounterVec // result: started, failed, discarded, used
}

func newMetrics(reg metrics.Registerer, violations *metrics.CounterVec) (*serviceMetrics, error) {
	shared := violations != nil
	if !shared {
		violations = metrics.NewViolations()
	}
	m := &serviceMetrics{
		violations: violations,
		execs: metrics.NewCounterVec(metrics.CounterOpts{
			Name: "agentbox_execs_total", Help: "Executions by language and outcome (ok, an error code, or failed).",
		}, []string{"language", "outcome"}),
		execDuration: metrics.NewHistogramVec(metrics.HistogramOpts{
			Name: "agentbox_exec_duration_seconds", Help: "Run time of executions, from process start to exit.",
			Buckets: metrics.ExponentialBuckets(0.001, 3, 12),
		}, []string{"language"}),
		processes: metrics.NewCounter(metrics.CounterOpts{
			Name: "agentbox_processes_started_total", Help: "Processes started through the processes API.",
		}),
		running: metrics.NewGauge(metrics.GaugeOpts{
			Name: "agentbox_processes_running", Help: "Processes of the processes API still running.",
		}),
		rejected: metrics.NewCounter(metrics.CounterOpts{
			Name: "agentbox_exec_rejected_total", Help: "Executions and processes refused by the concurrency limit.",
		}),
		policyDenied: metrics.NewCounter(metrics.CounterOpts{
			Name: "agentbox_exec_policy_denied_total", Help: "Executions and processes refused because of their policy.",
		}),
		pool: metrics.NewCounterVec(metrics.CounterOpts{
			Name: "agentbox_sandbox_pool_takes_total", Help: "Requests for a warm sandbox, by result (hit, miss).",
		}, []string{"result"}),
		poolReady: metrics.NewGauge(metrics.GaugeOpts{
			Name: "agentbox_sandbox_pool_ready", Help: "Sandboxes waiting in the warm pool.",
		}),
		zygote: metrics.NewCounterVec(metrics.CounterOpts{
			Name: "agentbox_exec_zygote_total", Help: "Warm-pool interpreters started ahead of their task, by result (started; failed: the pool fell back to plain sandboxes; discarded: found unusable when taken, the task ran cold; used).",
		}, []string{"result"}),
	}
	if reg == nil {
		return m, nil
	}
	cs := []metrics.Collector{m.execs, m.execDuration, m.processes, m.running, m.rejected, m.policyDenied, m.pool, m.poolReady, m.zygote}
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

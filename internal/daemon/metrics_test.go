package daemon_test

import (
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/daemon"
)

// TestMetricNames: the daemon's /metrics registry has exactly these of
// agentbox's own metrics, each registered once (a second registration of
// a name fails New, and would show here twice).
func TestMetricNames(t *testing.T) {
	d, err := daemon.New(t.Context(), daemon.Config{
		Listen: "127.0.0.1:0", DataDir: t.TempDir(), InsecureNoAuth: true,
		Log: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Shutdown(t.Context()) })
	var got []string
	for _, n := range d.MetricNames() {
		if strings.HasPrefix(n, "agentbox_") {
			got = append(got, n)
		}
	}
	want := []string{
		"agentbox_egress_ask_seconds",
		"agentbox_egress_connections_active",
		"agentbox_egress_decisions_total",
		"agentbox_egress_secret_injections_total",
		"agentbox_events_appended_total",
		"agentbox_exec_duration_seconds",
		"agentbox_exec_policy_denied_total",
		"agentbox_exec_rejected_total",
		"agentbox_execs_total",
		"agentbox_http_request_duration_seconds",
		"agentbox_permission_requests_total",
		"agentbox_permission_wait_seconds",
		"agentbox_policy_violations_total",
		"agentbox_processes_running",
		"agentbox_processes_started_total",
		"agentbox_sandbox_pool_ready",
		"agentbox_sandbox_pool_takes_total",
		"agentbox_sessions_active",
		"agentbox_sessions_created_total",
		"agentbox_tool_call_duration_seconds",
		"agentbox_turn_duration_seconds",
	}
	if !slices.Equal(got, want) {
		t.Errorf("metrics:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

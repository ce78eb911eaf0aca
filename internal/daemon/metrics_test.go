package daemon_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/golden"
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
		"agentbox_exec_zygote_total",
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

// TestMetricsScrape scrapes /metrics of a real daemon over HTTP: the
// families an idle daemon reports (agentbox's own, go_*, process_*), each
// with its TYPE and HELP, are pinned in testdata/metrics.golden (the same
// as the Prometheus client wrote them before it was replaced by
// internal/metrics), and every sample line is well formed and belongs to
// the family above it.
func TestMetricsScrape(t *testing.T) {
	d, err := daemon.New(t.Context(), daemon.Config{
		Listen: "127.0.0.1:0", DataDir: t.TempDir(), InsecureNoAuth: true,
		Log: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
	// get reads the whole answer to GET path.
	get := func(path string) (http.Header, bool, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), "GET", d.URL()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		return resp.Header, resp.Uncompressed, body
	}
	get("/v1/health")
	// The default transport asks for gzip and undoes it.
	header, uncompressed, body := get("/metrics")
	if ct := header.Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8; escaping=underscores" {
		t.Errorf("Content-Type %q", ct)
	}
	if !uncompressed {
		t.Error("/metrics was not gzipped for a client that accepts gzip")
	}
	var families strings.Builder
	sampleLine := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\[\\"n]|[^\\"\n])*",?)*\})? (NaN|[+-]Inf|[-+]?[0-9.]+(e[-+][0-9]+)?)$`)
	var family string
	for _, line := range strings.Split(strings.TrimSuffix(string(body), "\n"), "\n") {
		if strings.HasPrefix(line, "# ") {
			families.WriteString(line + "\n")
			if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
				family, _, _ = strings.Cut(rest, " ")
			}
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("malformed sample line %q", line)
			continue
		}
		if name := m[1]; name != family && !slices.Contains([]string{"_bucket", "_sum", "_count"}, strings.TrimPrefix(name, family)) {
			t.Errorf("sample %s under the family %s", name, family)
		}
	}
	golden.Check(t, "testdata/metrics.golden", []byte(families.String()))
	for _, want := range []string{
		`agentbox_http_request_duration_seconds_count{code="200",method="GET",route="/v1/health"} 1`,
		"\ngo_goroutines ", "\ngo_memstats_heap_alloc_bytes ", "\nprocess_resident_memory_bytes ", "\nprocess_open_fds ", "\nprocess_start_time_seconds ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}

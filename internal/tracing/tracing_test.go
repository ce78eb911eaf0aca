package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentbox/agentbox/internal/tracing"
	"github.com/agentbox/agentbox/internal/tracing/tracingtest"
)

func newTracer(t *testing.T, cfg tracing.Config, log *slog.Logger) *tracing.Tracer {
	t.Helper()
	tr, err := tracing.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if tr == nil {
		t.Fatal("tracing.New returned no tracer for an enabled config")
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr
}

// TestExportDecodes: what the exporter sends decodes with the official
// OTLP types, with every field as recorded, parent links included.
func TestExportDecodes(t *testing.T) {
	for _, gz := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", gz), func(t *testing.T) {
			rcv := tracingtest.NewReceiver(t)
			tr := newTracer(t, tracing.Config{
				Endpoint: rcv.URL + "/v1/traces", Gzip: gz, ServiceName: "svc", ServiceVersion: "1.2.3",
				Resource: map[string]string{"deployment.environment": "test"},
				Headers:  tracing.Headers{"X-Token": "s3cret"},
			}, nil)
			remote, ok := tracing.ParseTraceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
			if !ok {
				t.Fatal("traceparent did not parse")
			}
			ctx := tracing.WithSpan(t.Context(), nil)
			root := tr.StartChild(remote, "GET /v1/sessions/{id}", tracing.KindServer)
			ctx = tracing.WithSpan(ctx, root)
			root.SetString("http.route", "/v1/sessions/{id}")
			root.SetInt("http.response.status_code", 200)
			root.SetInt("negative", -7)
			root.SetBool("flag", true)
			root.SetBool("off", false)
			root.SetString("empty", "")
			root.SetString("bad utf8", "a\xffb")
			root.AddEvent("something")
			_, child := tr.Start(ctx, "child", tracing.KindInternal)
			child.SetStatus(tracing.StatusError, "it broke")
			child.End()
			root.End()
			root.End() // twice: once exported
			if err := tr.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
			spans := rcv.Wait(func(s []tracingtest.Span) bool { return len(s) >= 2 })
			if len(spans) != 2 {
				t.Fatalf("got %d spans, want 2", len(spans))
			}
			c, r := tracingtest.Named(spans, "child")[0], tracingtest.Named(spans, "GET /v1/sessions/{id}")[0]
			if got := fmt.Sprintf("%x", r.TraceId); got != "0af7651916cd43dd8448eb211c80319c" {
				t.Errorf("trace id %s", got)
			}
			if got := fmt.Sprintf("%x", r.ParentSpanId); got != "b7ad6b7169203331" {
				t.Errorf("parent %s", got)
			}
			if r.Flags != 0x301 || c.Flags != 0x101 {
				t.Errorf("flags %#x %#x, want 0x301 (sampled, remote parent) and 0x101", r.Flags, c.Flags)
			}
			if p, ok := tracingtest.ParentOf(spans, c); !ok || p.Name != r.Name {
				t.Errorf("child's parent is not the root")
			}
			if r.Kind != 2 || c.Kind != 1 {
				t.Errorf("kinds %v %v", r.Kind, c.Kind)
			}
			if r.StartTimeUnixNano == 0 || r.EndTimeUnixNano < r.StartTimeUnixNano {
				t.Errorf("times %d..%d", r.StartTimeUnixNano, r.EndTimeUnixNano)
			}
			for k, want := range map[string]string{
				"http.route": "/v1/sessions/{id}", "http.response.status_code": "200", "negative": "-7",
				"flag": "true", "off": "false", "empty": "", "bad utf8": "a\uFFFDb",
			} {
				if got := r.Attr(k); got != want {
					t.Errorf("attribute %s = %q, want %q", k, got, want)
				}
			}
			if len(r.Attributes) != 7 {
				t.Errorf("%d attributes, want 7", len(r.Attributes))
			}
			if len(r.Events) != 1 || r.Events[0].Name != "something" || r.Events[0].TimeUnixNano == 0 {
				t.Errorf("events %v", r.Events)
			}
			if c.Status.GetCode() != 2 || c.Status.GetMessage() != "it broke" || r.Status != nil {
				t.Errorf("status %v / %v", c.Status, r.Status)
			}
			if r.Resource["service.name"] != "svc" || r.Resource["service.version"] != "1.2.3" ||
				r.Resource["deployment.environment"] != "test" || r.Scope == "" {
				t.Errorf("resource %v scope %q", r.Resource, r.Scope)
			}
			req := rcv.Requests()[0]
			if req.Header.Get("X-Token") != "s3cret" {
				t.Errorf("header not sent")
			}
		})
	}
}

// TestNotConfigured: without an endpoint there is no tracer, no goroutine,
// and the nil tracer's whole API allocates nothing.
func TestNotConfigured(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, cfg := range []tracing.Config{{}, {Endpoint: "http://127.0.0.1:1/v1/traces", Sampler: "always_off"}} {
		tr, err := tracing.New(cfg, nil)
		if err != nil || tr != nil {
			t.Fatalf("New(%+v) = %v, %v; want nil, nil", cfg, tr, err)
		}
	}
	var tr *tracing.Tracer
	ctx := t.Context()
	allocs := testing.AllocsPerRun(100, func() {
		c, s := tr.Start(ctx, "x", tracing.KindServer)
		s.SetString("k", "v")
		s.SetInt("n", 1)
		s.SetBool("b", true)
		s.SetStatus(tracing.StatusError, "no")
		s.AddEvent("e")
		s.End()
		_ = tracing.FromContext(c)
		_ = tracing.Carry(ctx, c)
		_ = tr.Shutdown(c)
	})
	if allocs != 0 {
		t.Errorf("tracing off allocates %v times per call", allocs)
	}
}

// TestBackPressure: with the collector stuck and the queue full, ending a
// span never waits: the span is dropped and counted.
func TestBackPressure(t *testing.T) {
	rcv := tracingtest.NewReceiver(t)
	release := rcv.Block()
	tr := newTracer(t, tracing.Config{Endpoint: rcv.URL + "/v1/traces", QueueSize: 4, BatchSize: 1}, nil)
	const n = 100
	for i := range n {
		s := tr.StartChild(tracing.SpanContext{}, fmt.Sprint("span ", i), tracing.KindInternal)
		s.End() // must return although nothing is being sent
	}
	// At most one batch in the stuck request, the queue's 4 and one in
	// the loop's hands wait; the rest are dropped.
	if d := tr.Dropped(); d < n-6 {
		t.Errorf("dropped %d of %d spans, want at least %d", d, n, n-6)
	}
	release()
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := len(rcv.Spans())
	if uint64(got)+tr.Dropped() != n {
		t.Errorf("received %d + dropped %d != %d ended", got, tr.Dropped(), n)
	}
}

// TestShutdownFlushes: spans ended before Shutdown all reach the collector,
// in batches, without waiting for the interval; spans ended afterwards
// are dropped.
func TestShutdownFlushes(t *testing.T) {
	rcv := tracingtest.NewReceiver(t)
	tr := newTracer(t, tracing.Config{Endpoint: rcv.URL + "/v1/traces", BatchSize: 7, Interval: time.Hour}, nil)
	for i := range 50 {
		tr.StartChild(tracing.SpanContext{}, fmt.Sprint(i), tracing.KindInternal).End()
	}
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := len(rcv.Spans()); got != 50 {
		t.Errorf("received %d spans, want 50", got)
	}
	if got := len(rcv.Requests()); got < 50/7 {
		t.Errorf("%d requests, want batches of at most 7", got)
	}
	tr.StartChild(tracing.SpanContext{}, "late", tracing.KindInternal).End()
	if tr.Dropped() != 1 {
		t.Errorf("dropped %d, want the late span", tr.Dropped())
	}
}

// TestShutdownDeadline: a collector that never answers does not hold the
// shutdown past its deadline.
func TestShutdownDeadline(t *testing.T) {
	rcv := tracingtest.NewReceiver(t)
	_ = rcv.Block()
	tr := newTracer(t, tracing.Config{Endpoint: rcv.URL + "/v1/traces"}, nil)
	tr.StartChild(tracing.SpanContext{}, "stuck", tracing.KindInternal).End()
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // already over: Shutdown must still return
	if err := tr.Shutdown(ctx); err == nil {
		t.Error("Shutdown past its deadline returned nil")
	}
}

// TestHeadersNeverLogged: a failing export is logged without the headers'
// values, and no way of printing the config shows them.
func TestHeadersNeverLogged(t *testing.T) {
	const secret = "Bearer-very-s3cret-value"
	rcv := tracingtest.NewReceiver(t)
	rcv.Fail(http.StatusUnauthorized)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg, err := tracing.FromEnv(envOf(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL,
		"OTEL_EXPORTER_OTLP_HEADERS":  "Authorization=" + secret + ",x-other=" + secret,
	}), "")
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracer(t, cfg, log)
	tr.StartChild(tracing.SpanContext{}, "x", tracing.KindInternal).End()
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(rcv.Requests()) == 0 || rcv.Requests()[0].Header.Get("Authorization") != secret {
		t.Fatal("the collector did not get the header")
	}
	log.Info("config", "cfg", cfg, "headers", cfg.Headers)
	var js bytes.Buffer
	slog.New(slog.NewJSONHandler(&js, nil)).Info("config", "cfg", cfg, "headers", cfg.Headers)
	enc, _ := json.Marshal(cfg)
	printed := logs.String() + js.String() + string(enc) + fmt.Sprintf("%v %+v %#v %s %q", cfg, cfg, cfg, cfg.Headers, cfg.Headers)
	if !strings.Contains(logs.String(), "exporting trace spans failed") {
		t.Errorf("the failure was not logged: %s", logs.String())
	}
	if strings.Contains(printed, secret) || strings.Contains(printed, "s3cret") {
		t.Errorf("a header value was printed: %s", printed)
	}
}

// TestSampling: always_off records nothing (no tracer), ratio 0 under a
// parent-based sampler follows the parent, and a sampled-out span's
// children are not sampled either.
func TestSampling(t *testing.T) {
	rcv := tracingtest.NewReceiver(t)
	tr := newTracer(t, tracing.Config{Endpoint: rcv.URL + "/v1/traces", Sampler: "parentbased_traceidratio", SamplerArg: "0"}, nil)
	root := tr.StartChild(tracing.SpanContext{}, "root", tracing.KindInternal) // ratio 0: not sampled
	if root.Context().Sampled() || !root.Context().IsValid() {
		t.Fatalf("root %+v", root.Context())
	}
	child := tr.StartChild(root.Context(), "child", tracing.KindInternal)
	sampledParent, _ := tracing.ParseTraceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	follows := tr.StartChild(sampledParent, "follows", tracing.KindServer)
	child.End()
	root.End()
	follows.End()
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := tracingtest.Names(rcv.Spans()); len(got) != 1 || got[0] != "follows" {
		t.Errorf("exported %v, want [follows]", got)
	}
}

// TestNoRedirects: a collector that redirects does not get the headers
// sent on to another server; the export counts as failed.
func TestNoRedirects(t *testing.T) {
	other := tracingtest.NewReceiver(t)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/v1/traces", http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	var logs bytes.Buffer
	tr := newTracer(t, tracing.Config{Endpoint: redirect.URL + "/v1/traces", Headers: tracing.Headers{"X-Api-Key": "k"}},
		slog.New(slog.NewTextHandler(&logs, nil)))
	tr.StartChild(tracing.SpanContext{}, "x", tracing.KindInternal).End()
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(other.Requests()); n != 0 {
		t.Errorf("the redirect was followed: %d requests elsewhere", n)
	}
	if !strings.Contains(logs.String(), "307") {
		t.Errorf("the redirect was not reported as a failure: %s", logs.String())
	}
}

// TestTLSEndpoint: an https collector with a private CA is reached with
// OTEL_EXPORTER_OTLP_CERTIFICATE, and not without it.
func TestTLSEndpoint(t *testing.T) {
	rcv := tracingtest.NewTLSReceiver(t)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, rcv.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, trusted := range []bool{true, false} {
		env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL}
		if trusted {
			env["OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE"] = ca
		}
		cfg, err := tracing.FromEnv(envOf(env), "")
		if err != nil {
			t.Fatal(err)
		}
		tr := newTracer(t, cfg, nil)
		tr.StartChild(tracing.SpanContext{}, fmt.Sprint("trusted ", trusted), tracing.KindInternal).End()
		if err := tr.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if got := tracingtest.Names(rcv.Spans()); len(got) != 1 || got[0] != "trusted true" {
		t.Errorf("received %q, want only the span sent with the CA", got)
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": filepath.Join(t.TempDir(), "missing.pem")}, "OTEL_EXPORTER_OTLP_CERTIFICATE"},
		{map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": "/dev/null"}, "no PEM certificate"},
		{map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": ca}, "go together"},
		{map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": ca, "OTEL_EXPORTER_OTLP_CLIENT_KEY": ca}, "private key"},
	} {
		tc.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = rcv.URL
		if _, err := tracing.FromEnv(envOf(tc.env), ""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("FromEnv(%v) = %v, want an error saying %q", tc.env, err, tc.want)
		}
	}
}

package tracing_test

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/tracing"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestFromEnv(t *testing.T) {
	const secret = "hunter2-secret"
	for _, tc := range []struct {
		name     string
		env      map[string]string
		flag     string
		endpoint string // "" = off
		err      string // part of the error
	}{
		{name: "nothing", env: nil},
		{name: "base", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, endpoint: "http://127.0.0.1:4318/v1/traces"},
		{name: "base with path", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c.example/otlp/"}, endpoint: "https://c.example/otlp/v1/traces"},
		{name: "traces as is", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:2/custom"}, endpoint: "http://b:2/custom"},
		{name: "flag wins", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:2/custom"}, flag: "http://f:3", endpoint: "http://f:3/v1/traces"},
		{name: "disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1"}},
		{name: "exporter none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1"}},
		{name: "exporter zipkin", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1"}, err: "OTEL_TRACES_EXPORTER"},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1"}, err: `OTEL_EXPORTER_OTLP_PROTOCOL="grpc"`},
		{name: "http/json", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1"}, err: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/json"`},
		{name: "protobuf", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1"}, endpoint: "http://a:1/v1/traces"},
		{name: "grpc but off", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}},
		{name: "scheme", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "grpc://a:1"}, err: "http:// or https://"},
		{name: "password hidden", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://u:" + secret + "@a:1"}, err: "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{name: "query", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1/?token=" + secret}, err: "no query"},
		{name: "header without =", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_HEADERS": "a=b," + secret}, err: "entry 2"},
		{name: "header control", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_HEADERS": "a=" + secret + "%0d%0aX: y"}, err: "entry 1"},
		{name: "header bad escape", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_HEADERS": "a=" + secret + "%zz"}, err: "entry 1"},
		{name: "header bad name", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_HEADERS": secret + " x=1"}, err: "entry 1"},
		{name: "sampler", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_TRACES_SAMPLER": "jaeger_remote"}, err: "OTEL_TRACES_SAMPLER"},
		{name: "sampler arg", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, err: "OTEL_TRACES_SAMPLER_ARG"},
		{name: "always_off", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_TRACES_SAMPLER": "always_off"}, endpoint: "http://a:1/v1/traces"},
		{name: "timeout", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, err: "OTEL_EXPORTER_OTLP_TIMEOUT"},
		{name: "compression", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, err: "OTEL_EXPORTER_OTLP_COMPRESSION"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tracing.FromEnv(envOf(tc.env), tc.flag)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one naming %q", err, tc.err)
				}
				if strings.Contains(err.Error(), secret) {
					t.Errorf("the error shows a secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Endpoint != tc.endpoint {
				t.Errorf("endpoint %q, want %q", cfg.Endpoint, tc.endpoint)
			}
		})
	}
}

func TestFromEnvHeaders(t *testing.T) {
	cfg, err := tracing.FromEnv(envOf(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":       "http://a:1",
		"OTEL_EXPORTER_OTLP_HEADERS":        " api-key = a%20b%3Dc , X-Both=general",
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "X-Both=traces",
		"OTEL_SERVICE_NAME":                 "mine",
		"OTEL_EXPORTER_OTLP_COMPRESSION":    "gzip",
		"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "1500",
	}), "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Headers["api-key"] != "a b=c" || cfg.Headers["X-Both"] != "traces" || len(cfg.Headers) != 2 {
		t.Errorf("headers %d: want api-key and X-Both=traces", len(cfg.Headers))
	}
	if cfg.ServiceName != "mine" || !cfg.Gzip || cfg.Timeout.Milliseconds() != 1500 {
		t.Errorf("cfg: service %q gzip %v timeout %v", cfg.ServiceName, cfg.Gzip, cfg.Timeout)
	}
}

package tracing

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config says where and how spans are exported. The zero value is tracing
// off. FromEnv reads it from the standard OTEL_* variables.
type Config struct {
	// Endpoint is the full URL spans are POSTed to ({base}/v1/traces);
	// empty turns tracing off.
	Endpoint string
	// Headers are added to every export request (OTEL_EXPORTER_OTLP_HEADERS:
	// usually credentials). They are never logged nor put in an error.
	Headers Headers
	// Gzip compresses the requests' bodies.
	Gzip bool
	// tls, when set, is the TLS configuration of an https endpoint: the
	// roots it is verified with (OTEL_EXPORTER_OTLP_CERTIFICATE) and the
	// client certificate (_CLIENT_CERTIFICATE, _CLIENT_KEY), set by
	// FromEnv. Nil: the system's roots, no client certificate. Unexported,
	// so that no encoding of a Config shows the client's private key.
	tls *tls.Config
	// Timeout bounds one export request (default 10s).
	Timeout time.Duration
	// ServiceName is the resource's service.name (default "agentbox");
	// Resource are its other attributes (OTEL_RESOURCE_ATTRIBUTES).
	ServiceName string
	Resource    map[string]string
	// ServiceVersion is the resource's service.version, when set.
	ServiceVersion string
	// Sampler and SamplerArg decide which spans are recorded, as
	// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG say (default
	// parentbased_always_on).
	Sampler, SamplerArg string
	// QueueSize bounds the spans waiting for export: past it spans are
	// dropped and counted, never waited for (default 2048). BatchSize is
	// the most spans per request (default 512); Interval how often a
	// partial batch is sent (default 5s).
	QueueSize int
	BatchSize int
	Interval  time.Duration
}

// Enabled reports whether cfg exports anything.
func (c Config) Enabled() bool { return c.Endpoint != "" && c.Sampler != "always_off" }

// Headers are the export requests' extra headers. Their values are
// secrets: every way of printing or logging Headers shows the names only.
type Headers map[string]string

func (h Headers) names() []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	return out
}

// String shows the header names only.
func (h Headers) String() string {
	return fmt.Sprintf("%d header(s) %v, values hidden", len(h), h.names())
}

// GoString is String, for %#v.
func (h Headers) GoString() string { return h.String() }

// LogValue is String, for slog.
func (h Headers) LogValue() slog.Value { return slog.StringValue(h.String()) }

// Format makes every verb print String.
func (h Headers) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(h.String())) }

// MarshalJSON is String, as a JSON string (slog's JSON handler, a Config
// encoded whole).
func (h Headers) MarshalJSON() ([]byte, error) { return json.Marshal(h.String()) }

// Defaults of the batching exporter (the OTel SDK's, OTEL_BSP_*).
const (
	DefaultTimeout   = 10 * time.Second
	DefaultQueueSize = 2048
	DefaultBatchSize = 512
	DefaultInterval  = 5 * time.Second
)

// FromEnv reads the standard OpenTelemetry variables through getenv:
// OTEL_SDK_DISABLED, OTEL_TRACES_EXPORTER (otlp or none),
// OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _PROTOCOL (http/protobuf only),
// _HEADERS, _TIMEOUT, _COMPRESSION, _CERTIFICATE, _CLIENT_CERTIFICATE,
// _CLIENT_KEY, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER[_ARG] and OTEL_BSP_*.
// endpoint, when set (serve --otlp-endpoint), is a base endpoint like
// OTEL_EXPORTER_OTLP_ENDPOINT and wins over both endpoint variables.
// Without an endpoint (or with OTEL_SDK_DISABLED=true), the Config is
// off. Errors name the variable, never a header's value.
func FromEnv(getenv func(string) (string, bool), endpoint string) (Config, error) {
	get := func(name string) string {
		v, _ := getenv(name)
		return strings.TrimSpace(v)
	}
	// The traces-specific variable wins over the general one.
	pick := func(suffix string) (string, string) {
		if v := get("OTEL_EXPORTER_OTLP_TRACES_" + suffix); v != "" {
			return "OTEL_EXPORTER_OTLP_TRACES_" + suffix, v
		}
		return "OTEL_EXPORTER_OTLP_" + suffix, get("OTEL_EXPORTER_OTLP_" + suffix)
	}
	var cfg Config
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return cfg, nil
	}
	switch e := get("OTEL_TRACES_EXPORTER"); e {
	case "", "otlp":
	case "none":
		return cfg, nil
	default:
		return cfg, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: agentbox exports traces with otlp (or none)", e)
	}
	var err error
	switch {
	case endpoint != "":
		cfg.Endpoint, err = baseEndpoint("--otlp-endpoint", endpoint)
	case get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "":
		cfg.Endpoint, err = checkEndpoint("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	case get("OTEL_EXPORTER_OTLP_ENDPOINT") != "":
		cfg.Endpoint, err = baseEndpoint("OTEL_EXPORTER_OTLP_ENDPOINT", get("OTEL_EXPORTER_OTLP_ENDPOINT"))
	default:
		return cfg, nil // not configured: off
	}
	if err != nil {
		return Config{}, err
	}
	if name, p := pick("PROTOCOL"); p != "" && p != "http/protobuf" {
		return Config{}, fmt.Errorf("%s=%q: agentbox exports traces over OTLP/HTTP with protobuf only (http/protobuf)", name, p)
	}
	cfg.Headers = Headers{}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		if err := parseList(name, get(name), cfg.Headers, true); err != nil {
			return Config{}, err
		}
	}
	if name, v := pick("TIMEOUT"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return Config{}, fmt.Errorf("%s=%q: want milliseconds, more than 0", name, v)
		}
		cfg.Timeout = time.Duration(ms) * time.Millisecond
	}
	switch name, c := pick("COMPRESSION"); c {
	case "", "none":
	case "gzip":
		cfg.Gzip = true
	default:
		return Config{}, fmt.Errorf("%s=%q: want gzip or none", name, c)
	}
	if cfg.tls, err = tlsFromEnv(pick); err != nil {
		return Config{}, err
	}
	cfg.Resource = map[string]string{}
	if err := parseList("OTEL_RESOURCE_ATTRIBUTES", get("OTEL_RESOURCE_ATTRIBUTES"), cfg.Resource, false); err != nil {
		return Config{}, err
	}
	cfg.ServiceName = get("OTEL_SERVICE_NAME")
	cfg.Sampler, cfg.SamplerArg = get("OTEL_TRACES_SAMPLER"), get("OTEL_TRACES_SAMPLER_ARG")
	if _, err := parseSampler(cfg.Sampler, cfg.SamplerArg); err != nil {
		return Config{}, err
	}
	for _, b := range []struct {
		name string
		to   *int
	}{{"OTEL_BSP_MAX_QUEUE_SIZE", &cfg.QueueSize}, {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", &cfg.BatchSize}} {
		if v := get(b.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 || n > 1<<20 {
				return Config{}, fmt.Errorf("%s=%q: want a count from 1 to %d", b.name, v, 1<<20)
			}
			*b.to = n
		}
	}
	if v := get("OTEL_BSP_SCHEDULE_DELAY"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return Config{}, fmt.Errorf("OTEL_BSP_SCHEDULE_DELAY=%q: want milliseconds, more than 0", v)
		}
		cfg.Interval = time.Duration(ms) * time.Millisecond
	}
	return cfg, nil
}

// checkEndpoint checks an http or https URL with a host. The error shows
// the URL without its password.
func checkEndpoint(name, v string) (string, error) {
	u, err := url.Parse(v)
	if err != nil {
		return "", fmt.Errorf("%s: not a URL", name)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("%s=%q: want an http:// or https:// URL with a host (OTLP/HTTP)", name, u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" {
		// Not shown: a query is where a credential would be.
		return "", fmt.Errorf("%s: an endpoint takes no query or fragment", name)
	}
	return u.String(), nil
}

// baseEndpoint is checkEndpoint for a base URL, returned with v1/traces
// appended to its path.
func baseEndpoint(name, v string) (string, error) {
	s, err := checkEndpoint(name, v)
	if err != nil {
		return "", err
	}
	u, _ := url.Parse(s)
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	u.RawPath = ""
	return u.String(), nil
}

// parseList parses a W3C-baggage-like list, key=value[,key=value...], with
// percent-encoded values, into to. For secret (headers) values, the error
// names the entry by its position only, and keys must be header names.
func parseList(name, v string, to map[string]string, secret bool) error {
	if v == "" {
		return nil
	}
	for i, entry := range strings.Split(v, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		k, val, ok := strings.Cut(entry, "=")
		k, val = strings.TrimSpace(k), strings.TrimSpace(val)
		if !ok || k == "" {
			return fmt.Errorf("%s: entry %d is not key=value", name, i+1)
		}
		dec, err := url.PathUnescape(val)
		if err != nil {
			return fmt.Errorf("%s: entry %d: the value is not valid percent-encoding", name, i+1)
		}
		if secret {
			if !validHeaderName(k) {
				return fmt.Errorf("%s: entry %d: the key is not a valid header name", name, i+1)
			}
			if !validHeaderValue(dec) {
				return fmt.Errorf("%s: entry %d: the value holds control characters", name, i+1)
			}
		}
		to[k] = dec
	}
	return nil
}

func validHeaderName(k string) bool {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return k != ""
}

func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// tlsFromEnv reads the CA file and the client certificate and key files
// the _CERTIFICATE, _CLIENT_CERTIFICATE and _CLIENT_KEY variables name.
// Errors name the variable and the file, never what the file holds.
func tlsFromEnv(pick func(string) (string, string)) (*tls.Config, error) {
	caVar, ca := pick("CERTIFICATE")
	certVar, cert := pick("CLIENT_CERTIFICATE")
	keyVar, key := pick("CLIENT_KEY")
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", caVar, err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s=%q: no PEM certificate in the file", caVar, ca)
		}
	}
	if (cert == "") != (key == "") {
		return nil, fmt.Errorf("%s and %s go together: a client certificate needs its key", certVar, keyVar)
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			// Not err itself: it may quote the files' content.
			return nil, fmt.Errorf("%s=%q, %s=%q: not a PEM certificate and its matching private key", certVar, cert, keyVar, key)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

package httpapi

import (
	"github.com/agentbox/agentbox/internal/provider"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/files"
	"github.com/agentbox/agentbox/internal/tracing"
)

// Defaults for the zero values of [Config].
const (
	DefaultMaxBodyBytes    int64 = 1 << 20 // 1 MiB
	DefaultMaxMessageBytes int64 = 8 << 20 // 8 MiB
	DefaultHeartbeat             = 15 * time.Second
	DefaultRetry                 = 3 * time.Second
	DefaultWriteTimeout          = 10 * time.Second
)

// Config tunes the API handler. The zero value is usable: no authentication,
// no CORS, default limits.
type Config struct {
	// Token, when not empty, is the bearer token every request except
	// GET /v1/health must present. The daemon must set one when it listens
	// on a non-loopback address (see [RequireToken]).
	Token string
	// AllowedHosts adds to the names a request's Host header may give for
	// a TCP listener (see checkHost): "name" (any port) or "name:port";
	// "*" turns the check off. Loopback addresses, localhost and the
	// address the connection arrived at are always allowed, with the
	// listener's port.
	AllowedHosts []string
	// CORSOrigins lists the browser origins allowed to call the API, exactly
	// as browsers send them ("https://app.example.com"), or "*" for any.
	// Empty disables CORS. Browser requests from any other origin are
	// refused (see checkOrigin).
	CORSOrigins []string
	// MaxBodyBytes limits request bodies (default 1 MiB), except those of
	// POST /v1/sessions/{id}/messages, which MaxMessageBytes limits
	// (default 8 MiB; messages may carry inline images).
	MaxBodyBytes    int64
	MaxMessageBytes int64
	// MaxFileBytes limits a file's content written with PUT
	// /v1/sessions/{id}/files/content (default files.DefaultMaxFileBytes),
	// MaxArchiveBytes a tar stream unpacked with PUT …/files/archive
	// (default files.DefaultMaxArchiveBytes plus room for its headers).
	MaxFileBytes    int64
	MaxArchiveBytes int64
	// MaxUploadBytes bounds the memory of the file and archive uploads
	// received at once (default DefaultMaxUploadBytes, at least one
	// archive's limit); past it an upload is refused with 429.
	MaxUploadBytes int64
	// Files serves /v1/sessions/{id}/files; nil answers it with 503.
	Files FilesService
	// ProcessFiles serves /v1/processes/{id}/files (the workspaces of
	// processes started with their own sandbox); nil answers it with 503.
	ProcessFiles FilesService
	// Heartbeat is the interval of the comment lines that keep idle event
	// streams open through proxies (default 15s).
	Heartbeat time.Duration
	// Retry is the reconnection delay suggested to SSE clients (default 3s).
	Retry time.Duration
	// WriteTimeout bounds each write to an event stream, so a client that
	// stops reading is dropped instead of holding the stream (default 10s).
	WriteTimeout time.Duration
	// Version is the daemon version reported by GET /v1/health.
	Version string
	// Started is when the daemon started, for the uptime in GET /v1/health;
	// zero means when New was called.
	Started time.Time
	// Exec serves /v1/exec and /v1/processes; nil answers them with 503.
	Exec ExecService
	// Secrets serves /v1/secrets; nil answers it with 503.
	Secrets Secrets
	// Providers are the sandbox providers GET /v1/providers lists, and
	// DefaultProvider the one of sessions created without one; nil: none.
	Providers       *provider.Registry
	DefaultProvider string
	// ACP, when set, serves GET /v1/acp (ACP over an upgraded connection;
	// see package acpserver), behind the same authentication as the API.
	ACP http.Handler
	// UI, when set, serves the inspector's page and assets at GET /ui and
	// GET /ui/... (package inspector). They are public, like GET /v1/health:
	// the page carries no data and calls the API with the bearer token;
	// the Host and Origin checks apply to them as to everything else.
	UI http.Handler
	// Tracer, when set, makes a server span per request (tracing.go);
	// nil costs nothing.
	Tracer *tracing.Tracer
}

func (c Config) withDefaults() Config {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.MaxFileBytes <= 0 {
		c.MaxFileBytes = files.DefaultMaxFileBytes
	}
	if c.MaxArchiveBytes <= 0 {
		c.MaxArchiveBytes = files.DefaultMaxArchiveBytes + 16<<20
	}
	if c.MaxUploadBytes <= 0 {
		c.MaxUploadBytes = DefaultMaxUploadBytes
	}
	c.MaxUploadBytes = max(c.MaxUploadBytes, c.MaxFileBytes+1, c.MaxArchiveBytes+1)
	if c.Heartbeat <= 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.Retry <= 0 {
		c.Retry = DefaultRetry
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.Started.IsZero() {
		c.Started = time.Now()
	}
	return c
}

// RequireToken reports whether a daemon listening on addr must require a
// bearer token, that is whether addr can be reached from other hosts.
//
// Loopback addresses ("127.0.0.1:8080", "[::1]:0", "localhost:7000") and unix
// socket paths ("unix:/run/agentbox.sock", "/run/agentbox.sock") do not; an
// empty or unspecified host (":8080", "0.0.0.0:80", "[::]:80"), any other IP
// and any other host name do, since a name may resolve to anything.
func RequireToken(addr string) bool {
	if strings.HasPrefix(addr, "unix:") || strings.HasPrefix(addr, "/") || strings.HasPrefix(addr, "@") {
		return false
	}
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "" {
		return true
	}
	if strings.EqualFold(host, "localhost") {
		return false
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return true
	}
	return !ip.Unmap().IsLoopback()
}

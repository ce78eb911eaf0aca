// Package e2b is the E2B sandbox provider: a thin client of E2B's control
// plane (api.e2b.app) and of envd, the daemon in every E2B sandbox, written
// from their public documents (testdata/SOURCE names them). It creates a
// sandbox from a template, uploads agentbox's static binary and the inner
// daemon's token through envd's file endpoint, starts `agentbox serve`
// through envd's process service, and reaches it through E2B's sandbox
// host naming (https://<port>-<sandboxID>.<domain>).
package e2b

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/vendorapi"
)

// Name is the provider's name in the registry.
const Name = "e2b"

// The environment the provider's settings come from.
const (
	// EnvAPIKey is the E2B API key (required). It is sent to the control
	// plane only: never to a sandbox, never logged.
	EnvAPIKey = "E2B_API_KEY"
	// EnvAPIURL overrides the control plane's base URL.
	EnvAPIURL = "E2B_API_URL"
	// EnvDomain overrides the sandbox domain (self-hosted E2B).
	EnvDomain = "E2B_DOMAIN"
)

// Defaults of the documents and of the SDKs.
const (
	DefaultAPIURL = "https://api.e2b.app"
	DefaultDomain = "e2b.app"
	// EnvdPort is the port envd listens on in every sandbox.
	EnvdPort = 49983
	// DaemonPort is the port the inner agentbox daemon listens on.
	DaemonPort = vendorapi.DaemonPort
	// DefaultTemplate is E2B's base template.
	DefaultTemplate = "base"
	// DefaultTimeout is the sandbox's life when Spec.Timeout is zero (the
	// API's own default, 15 s, is too short for a session).
	DefaultTimeout = time.Hour
	// MaxTimeout bounds Spec.Timeout (the document's int32 seconds).
	MaxTimeout = 24 * time.Hour
	// OwnerKey is the metadata key holding Spec.Owner.
	OwnerKey = vendorapi.OwnerKey
)

// Config is the provider's configuration.
type Config struct {
	// APIKey authenticates to the control plane (X-API-Key).
	APIKey string
	// APIURL is the control plane; DefaultAPIURL when empty.
	APIURL string
	// Domain is the sandbox domain when the API's answer names none;
	// DefaultDomain when empty.
	Domain string
	// SandboxURL gives the base URL of port of a sandbox; when nil,
	// https://<port>-<sandboxID>.<domain> (E2B's host naming). Tests
	// point it at the fake's loopback ports.
	SandboxURL func(port int, sandboxID, domain string) string
	// HTTPClient makes every request; a plain client when nil.
	HTTPClient *http.Client
	// RequestTimeout bounds each control-plane and envd request; 30 s when
	// zero.
	RequestTimeout time.Duration
	// StartTimeout bounds the wait for the inner daemon to answer; 60 s
	// when zero.
	StartTimeout time.Duration
}

// FromEnv reads the configuration from the environment (EnvAPIKey,
// EnvAPIURL, EnvDomain). A missing key is ErrCredentials naming the variable.
func FromEnv(getenv func(string) string) (Config, error) {
	return vendorapi.FromEnv(getenv, func(env func(string) string) Config {
		return Config{APIKey: env(EnvAPIKey), APIURL: env(EnvAPIURL), Domain: env(EnvDomain)}
	}, Config.check)
}

// check names the required setting if it is missing.
func (c Config) check() error {
	return vendorapi.Require(vendorapi.Setting{Name: EnvAPIKey, Value: c.APIKey})
}

// Provider is the E2B provider: vendorapi's, with E2B's endpoints.
type Provider struct {
	*vendorapi.Provider[newSandbox, sandboxInfo]
}

// New returns the provider for cfg. An empty APIKey is ErrCredentials.
func New(cfg Config) (*Provider, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	c, err := vendorapi.NewClient(Name, vendorapi.Settings{
		APIURL: cfg.APIURL, DefaultAPIURL: DefaultAPIURL, HTTPClient: cfg.HTTPClient,
		RequestTimeout: cfg.RequestTimeout, StartTimeout: cfg.StartTimeout, DefaultStartTimeout: 60 * time.Second,
	}, http.Header{"X-Api-Key": {cfg.APIKey}, "Accept": {"application/json"}})
	if err != nil {
		return nil, err
	}
	if cfg.Domain == "" {
		cfg.Domain = DefaultDomain
	}
	if cfg.SandboxURL == nil {
		cfg.SandboxURL = func(port int, id, domain string) string {
			return "https://" + strconv.Itoa(port) + "-" + id + "." + domain
		}
	}
	return &Provider{vendorapi.NewProvider(c, &api{c: c, cfg: cfg}, 100)}, nil
}

// api is E2B's part of the provider (vendorapi.Vendor).
type api struct {
	c   *vendorapi.Client
	cfg Config
}

// newSandbox is the document's NewSandbox, the fields this client sets.
type newSandbox struct {
	TemplateID string            `json:"templateID"`
	Timeout    int32             `json:"timeout"`
	Secure     bool              `json:"secure"`
	Metadata   map[string]string `json:"metadata,omitempty"`
}

// sandboxInfo holds the fields of the document's Sandbox, SandboxDetail
// and ListedSandbox this client reads.
type sandboxInfo struct {
	SandboxID       string            `json:"sandboxID"`
	TemplateID      string            `json:"templateID"`
	EnvdAccessToken string            `json:"envdAccessToken"`
	Domain          *string           `json:"domain"`
	State           string            `json:"state"`
	Metadata        map[string]string `json:"metadata"`
}

// Request checks spec and makes the NewSandbox body. What E2B cannot do
// for a Spec is refused naming the field: resources come with the
// template.
func (a *api) Request(spec provider.Spec) (newSandbox, error) {
	req := newSandbox{TemplateID: DefaultTemplate, Secure: true, Metadata: map[string]string{}}
	for k, v := range spec.Options {
		switch {
		case k != "template":
			return req, fmt.Errorf("%w: option %q (e2b knows: template)", provider.ErrUnsupported, k)
		case v == "":
			return req, fmt.Errorf("%w: option template is empty", provider.ErrUnsupported)
		}
		req.TemplateID = v
	}
	switch {
	case spec.CPUs != 0:
		return req, fmt.Errorf("%w: cpus: an E2B sandbox has its template's CPUs (choose the template)", provider.ErrUnsupported)
	case spec.MemoryBytes != 0:
		return req, fmt.Errorf("%w: memory_bytes: an E2B sandbox has its template's memory (choose the template)", provider.ErrUnsupported)
	case spec.Timeout < 0 || spec.Timeout > MaxTimeout || (spec.Timeout != 0 && spec.Timeout < time.Second):
		return req, fmt.Errorf("%w: timeout %s: between 1s and %s", provider.ErrUnsupported, spec.Timeout, MaxTimeout)
	}
	timeout := spec.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	req.Timeout = int32(timeout / time.Second)
	for k, v := range spec.Labels {
		req.Metadata[k] = v
	}
	req.Metadata[OwnerKey] = spec.Owner
	return req, nil
}

// Create is POST /sandboxes.
func (a *api) Create(ctx context.Context, req newSandbox) (string, sandboxInfo, error) {
	var sb sandboxInfo
	if err := a.c.Do(ctx, vendorapi.Request{Method: http.MethodPost, Path: "/sandboxes", JSON: req, Want: http.StatusCreated, Out: &sb}); err != nil {
		return "", sb, err
	}
	if sb.SandboxID == "" {
		return "", sb, fmt.Errorf("%w: the answer names no sandboxID", provider.ErrUnavailable)
	}
	return sb.SandboxID, sb, nil
}

// Start uploads the binary and the token through envd, starts the inner
// daemon through envd's process service and waits until it answers.
func (a *api) Start(ctx context.Context, sb sandboxInfo, bin []byte, token string) (string, error) {
	domain := a.domain(sb)
	envd := newEnvd(a.c, a.cfg.SandboxURL(EnvdPort, sb.SandboxID, domain), sb.EnvdAccessToken)
	if err := envd.upload(ctx, vendorapi.BinaryPath, bin); err != nil {
		return "", fmt.Errorf("upload the agentbox binary: %w", err)
	}
	if err := envd.upload(ctx, vendorapi.TokenPath, []byte(token+"\n")); err != nil {
		return "", fmt.Errorf("upload the token: %w", err)
	}
	// envd starts a process in the default user's home, or not: the
	// script changes into it.
	script := vendorapi.Serve{Dir: "$HOME", Cd: true, Listen: "127.0.0.1"}.Script()
	if _, err := envd.startDetached(ctx, "/bin/sh", []string{"-c", script}); err != nil {
		return "", fmt.Errorf("start agentbox serve: %w", err)
	}
	addr := a.address(sb.SandboxID, domain)
	return addr, a.c.WaitHealthy(ctx, addr, token)
}

// domain is the sandbox domain of sb: its own, else the configured one.
func (a *api) domain(sb sandboxInfo) string {
	if sb.Domain != nil && *sb.Domain != "" {
		return *sb.Domain
	}
	return a.cfg.Domain
}

func (a *api) address(id, domain string) string {
	return strings.TrimRight(a.cfg.SandboxURL(DaemonPort, id, domain), "/")
}

// Address is GET /sandboxes/{id}: a sandbox that is not running is gone.
func (a *api) Address(ctx context.Context, id string) (string, error) {
	var sb sandboxInfo
	if err := a.c.Do(ctx, vendorapi.Request{Method: http.MethodGet, Path: "/sandboxes/" + url.PathEscape(id), Want: http.StatusOK, Out: &sb}); err != nil {
		return "", err
	}
	if sb.State != "" && sb.State != "running" {
		return "", fmt.Errorf("%w: it is %s", provider.ErrGone, vendorapi.Clean(sb.State))
	}
	return a.address(id, a.domain(sb)), nil
}

// Delete is DELETE /sandboxes/{id} (E2B's kill).
func (a *api) Delete(ctx context.Context, id string) error {
	return a.c.Do(ctx, vendorapi.Request{Method: http.MethodDelete, Path: "/sandboxes/" + url.PathEscape(id), Want: http.StatusNoContent})
}

// ListPage is GET /v2/sandboxes (running or paused) filtered by the
// owner's metadata, paged by X-Next-Token.
func (a *api) ListPage(ctx context.Context, owner, next string, limit int) ([]string, string, error) {
	q := map[string]string{"limit": strconv.Itoa(limit), "state": "running,paused"}
	if owner != "" {
		q["metadata"] = url.Values{OwnerKey: {owner}}.Encode()
	}
	if next != "" {
		q["nextToken"] = next
	}
	var page []sandboxInfo
	var hdr http.Header
	if err := a.c.Do(ctx, vendorapi.Request{Method: http.MethodGet, Path: "/v2/sandboxes", Query: q, Want: http.StatusOK, Out: &page, OutHeader: &hdr}); err != nil {
		return nil, "", err
	}
	var ids []string
	for _, s := range page {
		if s.Metadata[OwnerKey] == owner || owner == "" { // the filter is the server's; this is a check
			ids = append(ids, s.SandboxID)
		}
	}
	return ids, hdr.Get("X-Next-Token"), nil
}

// Package e2b is the E2B sandbox provider: a thin client of E2B's control
// plane (api.e2b.app) and of envd, the daemon in every E2B sandbox, written
// from their public documents (testdata/SOURCE names them). It creates a
// sandbox from a template, uploads agentbox's static binary and the inner
// daemon's token through envd's file endpoint, starts `agentbox serve`
// through envd's process service, and reaches it through E2B's sandbox
// host naming (https://<port>-<sandboxID>.<domain>).
package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
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
	DaemonPort = 49999
	// DefaultTemplate is E2B's base template.
	DefaultTemplate = "base"
	// DefaultTimeout is the sandbox's life when Spec.Timeout is zero (the
	// API's own default, 15 s, is too short for a session).
	DefaultTimeout = time.Hour
	// MaxTimeout bounds Spec.Timeout (the document's int32 seconds).
	MaxTimeout = 24 * time.Hour
	// OwnerKey is the metadata key holding Spec.Owner.
	OwnerKey = "agentbox-owner"
)

// Paths inside the sandbox, relative to the default user's home (envd
// resolves a relative path there, and starts a process there).
const (
	binaryPath = "agentbox"
	dataDir    = ".agentbox"
	tokenPath  = dataDir + "/" + client.TokenFileName
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
	// HTTPClient makes every request; a client with RequestTimeout when nil.
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
	if getenv == nil {
		getenv = os.Getenv
	}
	key := getenv(EnvAPIKey)
	if key == "" {
		return Config{}, fmt.Errorf("%w: %s is not set", provider.ErrCredentials, EnvAPIKey)
	}
	return Config{APIKey: key, APIURL: getenv(EnvAPIURL), Domain: getenv(EnvDomain)}, nil
}

// Provider is the E2B provider.
type Provider struct {
	cfg Config
	hc  *http.Client
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Lister   = (*Provider)(nil)
)

// New returns the provider for cfg. An empty APIKey is ErrCredentials.
func New(cfg Config) (*Provider, error) {
	if cfg.APIKey == "" {
		return nil, fmt.Errorf("%w: %s is not set", provider.ErrCredentials, EnvAPIKey)
	}
	var err error
	if cfg.APIURL, err = vendorapi.BaseURL(Name, cfg.APIURL, DefaultAPIURL); err != nil {
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
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	return &Provider{cfg: cfg, hc: hc}, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// Capabilities implements provider.Provider. E2B pauses, snapshots and
// enforces egress rules, but this client does not drive those yet: only
// what it implements is reported.
func (p *Provider) Capabilities() provider.Capabilities {
	return provider.Capabilities{PreviewURLs: true}
}

// Health implements provider.Provider: an authenticated list of one.
func (p *Provider) Health(ctx context.Context) error {
	_, _, err := p.listPage(ctx, "", "", 1)
	return err
}

// options are the Spec.Options this provider knows.
type options struct {
	template string
}

func parseOptions(m map[string]string) (options, error) {
	o := options{template: DefaultTemplate}
	for k, v := range m {
		switch k {
		case "template":
			if v == "" {
				return o, fmt.Errorf("%w: option template is empty", provider.ErrUnsupported)
			}
			o.template = v
		default:
			return o, fmt.Errorf("%w: option %q (e2b knows: template)", provider.ErrUnsupported, k)
		}
	}
	return o, nil
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

// Create implements provider.Provider.
func (p *Provider) Create(ctx context.Context, spec provider.Spec) (provider.Sandbox, error) {
	o, err := parseOptions(spec.Options)
	if err != nil {
		return provider.Sandbox{}, err
	}
	if err := checkSpec(spec); err != nil {
		return provider.Sandbox{}, err
	}
	bin, err := os.ReadFile(spec.Binary)
	if err != nil {
		return provider.Sandbox{}, fmt.Errorf("e2b: the agentbox binary: %w", err)
	}
	timeout := spec.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	meta := map[string]string{}
	for k, v := range spec.Labels {
		meta[k] = v
	}
	meta[OwnerKey] = spec.Owner
	var sb sandboxInfo
	if err := p.do(ctx, http.MethodPost, p.cfg.APIURL+"/sandboxes", newSandbox{
		TemplateID: o.template,
		Timeout:    int32(timeout / time.Second),
		Secure:     true,
		Metadata:   meta,
	}, http.StatusCreated, &sb); err != nil {
		return provider.Sandbox{}, fmt.Errorf("e2b: create sandbox: %w", err)
	}
	if sb.SandboxID == "" {
		return provider.Sandbox{}, fmt.Errorf("%w: e2b: create sandbox: the answer names no sandboxID", provider.ErrUnavailable)
	}
	out, err := p.start(ctx, sb, bin, spec.Token)
	if err != nil {
		// Never a half-created sandbox: kill it on a context of its own,
		// since ctx may be what failed.
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.RequestTimeout)
		defer cancel()
		if kerr := p.Destroy(kctx, sb.SandboxID); kerr != nil {
			return provider.Sandbox{}, fmt.Errorf("%w (and removing sandbox %s failed: %w; the next start's reconciliation removes it)", err, sb.SandboxID, kerr)
		}
		return provider.Sandbox{}, err
	}
	return out, nil
}

// checkSpec refuses what E2B cannot do for a Spec, naming the field:
// resources come with the template.
func checkSpec(spec provider.Spec) error {
	switch {
	case spec.Owner == "":
		return fmt.Errorf("e2b: spec: owner is empty")
	case spec.Token == "":
		return fmt.Errorf("e2b: spec: token is empty")
	case spec.CPUs != 0:
		return fmt.Errorf("%w: cpus: an E2B sandbox has its template's CPUs (choose the template)", provider.ErrUnsupported)
	case spec.MemoryBytes != 0:
		return fmt.Errorf("%w: memory_bytes: an E2B sandbox has its template's memory (choose the template)", provider.ErrUnsupported)
	case spec.Timeout < 0 || spec.Timeout > MaxTimeout:
		return fmt.Errorf("%w: timeout %s: between 1s and %s", provider.ErrUnsupported, spec.Timeout, MaxTimeout)
	case spec.Timeout != 0 && spec.Timeout < time.Second:
		return fmt.Errorf("%w: timeout %s: between 1s and %s", provider.ErrUnsupported, spec.Timeout, MaxTimeout)
	}
	if _, ok := spec.Labels[OwnerKey]; ok {
		return fmt.Errorf("e2b: label %q is the provider's own", OwnerKey)
	}
	return nil
}

// start uploads the binary and the token into the sandbox, starts the
// inner daemon and waits until it answers.
func (p *Provider) start(ctx context.Context, sb sandboxInfo, bin []byte, token string) (provider.Sandbox, error) {
	domain := p.cfg.Domain
	if sb.Domain != nil && *sb.Domain != "" {
		domain = *sb.Domain
	}
	envd := envdClient{hc: p.hc, base: strings.TrimRight(p.cfg.SandboxURL(EnvdPort, sb.SandboxID, domain), "/"), token: sb.EnvdAccessToken, timeout: p.cfg.RequestTimeout}
	if err := envd.upload(ctx, binaryPath, bin); err != nil {
		return provider.Sandbox{}, fmt.Errorf("e2b: upload the agentbox binary to %s: %w", sb.SandboxID, err)
	}
	if err := envd.upload(ctx, tokenPath, []byte(token+"\n")); err != nil {
		return provider.Sandbox{}, fmt.Errorf("e2b: upload the token to %s: %w", sb.SandboxID, err)
	}
	// The token is read from the data directory, never passed as an
	// argument; the modes are the ones the daemon insists on; the data
	// directory is absolute (the process starts in the home directory).
	// The binary is executable by all: the inner daemon's own sandboxes
	// run it again as their users.
	script := "cd \"$HOME\" && chmod 755 " + binaryPath + " && chmod 700 " + dataDir + " && chmod 600 " + tokenPath +
		" && exec ./" + binaryPath + " serve --listen 127.0.0.1:" + strconv.Itoa(DaemonPort) + " --allowed-hosts '*' --data-dir \"$HOME/" + dataDir + "\""
	if _, err := envd.startDetached(ctx, "/bin/sh", []string{"-c", script}); err != nil {
		return provider.Sandbox{}, fmt.Errorf("e2b: start agentbox serve in %s: %w", sb.SandboxID, err)
	}
	out := provider.Sandbox{ID: sb.SandboxID, Address: strings.TrimRight(p.cfg.SandboxURL(DaemonPort, sb.SandboxID, domain), "/"), Token: token}
	if err := p.waitHealthy(ctx, out); err != nil {
		return provider.Sandbox{}, fmt.Errorf("e2b: sandbox %s: %w", sb.SandboxID, err)
	}
	return out, nil
}

// waitHealthy polls the inner daemon's health with its token.
func (p *Provider) waitHealthy(ctx context.Context, sb provider.Sandbox) error {
	c, err := client.New(sb.Address, client.WithToken(sb.Token), client.WithHTTPClient(p.hc))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	defer cancel()
	for {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.Health(rctx)
		rcancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: the inner daemon did not answer within %s: %w", provider.ErrUnavailable, p.cfg.StartTimeout, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Connect implements provider.Provider.
func (p *Provider) Connect(ctx context.Context, id, token string) (provider.Sandbox, error) {
	var sb sandboxInfo
	if err := p.do(ctx, http.MethodGet, p.cfg.APIURL+"/sandboxes/"+url.PathEscape(id), nil, http.StatusOK, &sb); err != nil {
		return provider.Sandbox{}, fmt.Errorf("e2b: sandbox %s: %w", id, err)
	}
	if sb.State != "" && sb.State != "running" {
		return provider.Sandbox{}, fmt.Errorf("%w: e2b: sandbox %s is %s", provider.ErrGone, id, sb.State)
	}
	domain := p.cfg.Domain
	if sb.Domain != nil && *sb.Domain != "" {
		domain = *sb.Domain
	}
	return provider.Sandbox{ID: id, Address: strings.TrimRight(p.cfg.SandboxURL(DaemonPort, id, domain), "/"), Token: token}, nil
}

// Destroy implements provider.Provider: kill the sandbox; gone is no error.
func (p *Provider) Destroy(ctx context.Context, id string) error {
	err := p.do(ctx, http.MethodDelete, p.cfg.APIURL+"/sandboxes/"+url.PathEscape(id), nil, http.StatusNoContent, nil)
	if err != nil && !errors.Is(err, provider.ErrGone) {
		return fmt.Errorf("e2b: kill sandbox %s: %w", id, err)
	}
	return nil
}

// List implements provider.Lister: every sandbox (running or paused)
// whose metadata names owner.
func (p *Provider) List(ctx context.Context, owner string) ([]string, error) {
	q := url.Values{OwnerKey: {owner}}.Encode()
	var ids []string
	next := ""
	for range 1000 { // a bound on pages: 100 000 sandboxes
		page, tok, err := p.listPage(ctx, q, next, 100)
		if err != nil {
			return nil, err
		}
		for _, s := range page {
			if s.Metadata[OwnerKey] == owner { // the filter is the server's; this is a check
				ids = append(ids, s.SandboxID)
			}
		}
		if tok == "" {
			return ids, nil
		}
		next = tok
	}
	return nil, fmt.Errorf("%w: e2b: list: more than 1000 pages", provider.ErrUnavailable)
}

func (p *Provider) listPage(ctx context.Context, metadata, next string, limit int) ([]sandboxInfo, string, error) {
	v := url.Values{"limit": {strconv.Itoa(limit)}, "state": {"running,paused"}}
	if metadata != "" {
		v.Set("metadata", metadata)
	}
	if next != "" {
		v.Set("nextToken", next)
	}
	var page []sandboxInfo
	var hdr http.Header
	if err := p.doHeader(ctx, http.MethodGet, p.cfg.APIURL+"/v2/sandboxes?"+v.Encode(), nil, http.StatusOK, &page, &hdr); err != nil {
		return nil, "", fmt.Errorf("e2b: list sandboxes: %w", err)
	}
	return page, hdr.Get("X-Next-Token"), nil
}

func (p *Provider) do(ctx context.Context, method, u string, in any, want int, out any) error {
	return p.doHeader(ctx, method, u, in, want, out, nil)
}

// doHeader makes one control-plane request: JSON in, JSON out, the
// status checked, an error answer mapped to the contract's sentinels.
func (p *Provider) doHeader(ctx context.Context, method, u string, in any, want int, out any, hdr *http.Header) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	req.Header.Set("X-API-Key", p.cfg.APIKey)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return vendorapi.TransportError(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, vendorapi.MaxAnswer+1))
	if err != nil {
		return vendorapi.TransportError(err)
	}
	if len(b) > vendorapi.MaxAnswer {
		return fmt.Errorf("%w: answer larger than %d bytes", provider.ErrUnavailable, vendorapi.MaxAnswer)
	}
	if resp.StatusCode != want {
		return vendorapi.StatusError("e2b", resp.StatusCode, b)
	}
	if hdr != nil {
		*hdr = resp.Header
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%w: an answer that is not the documented JSON: %w", provider.ErrUnavailable, err)
	}
	return nil
}

// Package daytona is the Daytona sandbox provider: a thin client of
// Daytona's control plane (app.daytona.io/api) and of the toolbox in each
// sandbox (reached through the sandbox's toolboxProxyUrl), written from
// their public documents (testdata/SOURCE names them). It creates a
// sandbox from a snapshot with labels and resources, uploads agentbox's
// static binary and the inner daemon's token through the toolbox's file
// endpoint, starts `agentbox serve` as an asynchronous command of a
// toolbox session, and reaches it through the port's preview URL.
package daytona

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime/multipart"
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
const Name = "daytona"

// The environment the provider's settings come from.
const (
	// EnvAPIKey is the Daytona API key (required). It is sent to the
	// control plane and the toolbox proxy only: never into a sandbox,
	// never logged.
	EnvAPIKey = "DAYTONA_API_KEY"
	// EnvAPIURL overrides the control plane's base URL.
	EnvAPIURL = "DAYTONA_API_URL"
	// EnvTarget is the default target (region) of new sandboxes.
	EnvTarget = "DAYTONA_TARGET"
)

const (
	DefaultAPIURL = "https://app.daytona.io/api"
	// DaemonPort is the port the inner agentbox daemon listens on.
	DaemonPort = 49999
	// OwnerKey is the label holding Spec.Owner.
	OwnerKey = "agentbox-owner"
	// sessionID is the toolbox session the inner daemon runs in.
	sessionID = "agentbox"
)

// Paths inside the sandbox, relative to the user's home.
const (
	binaryPath = "agentbox"
	dataDir    = ".agentbox"
	tokenPath  = dataDir + "/" + client.TokenFileName
)

// Config is the provider's configuration.
type Config struct {
	APIKey string
	// APIURL is the control plane; DefaultAPIURL when empty.
	APIURL string
	// Target is the default target (region); Daytona's default when empty.
	Target string
	// HTTPClient makes every request; a plain client when nil.
	HTTPClient *http.Client
	// RequestTimeout bounds each request; 30 s when zero.
	RequestTimeout time.Duration
	// StartTimeout bounds the wait for the sandbox to start and the inner
	// daemon to answer; 120 s when zero.
	StartTimeout time.Duration
}

// FromEnv reads the configuration from the environment. A missing key is
// ErrCredentials naming the variable.
func FromEnv(getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	key := getenv(EnvAPIKey)
	if key == "" {
		return Config{}, fmt.Errorf("%w: %s is not set", provider.ErrCredentials, EnvAPIKey)
	}
	return Config{APIKey: key, APIURL: getenv(EnvAPIURL), Target: getenv(EnvTarget)}, nil
}

// Provider is the Daytona provider.
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
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 120 * time.Second
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	return &Provider{cfg: cfg, hc: hc}, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// Capabilities implements provider.Provider: only what this client drives.
func (p *Provider) Capabilities() provider.Capabilities {
	return provider.Capabilities{PreviewURLs: true}
}

// Health implements provider.Provider: an authenticated list of one.
func (p *Provider) Health(ctx context.Context) error {
	_, _, err := p.listPage(ctx, "", "", 1)
	return err
}

// createSandbox is the document's CreateSandbox, the fields set.
type createSandbox struct {
	Snapshot         string            `json:"snapshot,omitempty"`
	Target           string            `json:"target,omitempty"`
	Labels           map[string]string `json:"labels"`
	Public           bool              `json:"public"`
	CPU              int               `json:"cpu,omitempty"`
	Memory           int               `json:"memory,omitempty"`
	AutoStopInterval int               `json:"autoStopInterval"`
}

// sandboxInfo holds the fields of Sandbox and SandboxListItem read.
type sandboxInfo struct {
	ID              string            `json:"id"`
	State           string            `json:"state"`
	ErrorReason     string            `json:"errorReason"`
	Labels          map[string]string `json:"labels"`
	ToolboxProxyURL string            `json:"toolboxProxyUrl"`
}

// Create implements provider.Provider.
func (p *Provider) Create(ctx context.Context, spec provider.Spec) (provider.Sandbox, error) {
	req, err := p.createRequest(spec)
	if err != nil {
		return provider.Sandbox{}, err
	}
	bin, err := os.ReadFile(spec.Binary)
	if err != nil {
		return provider.Sandbox{}, fmt.Errorf("daytona: the agentbox binary: %w", err)
	}
	var sb sandboxInfo
	if err := p.do(ctx, http.MethodPost, p.cfg.APIURL+"/sandbox", req, &sb); err != nil {
		return provider.Sandbox{}, fmt.Errorf("daytona: create sandbox: %w", err)
	}
	if sb.ID == "" {
		return provider.Sandbox{}, fmt.Errorf("%w: daytona: create sandbox: the answer names no id", provider.ErrUnavailable)
	}
	out, err := p.start(ctx, sb, bin, spec.Token)
	if err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.RequestTimeout)
		defer cancel()
		if derr := p.Destroy(dctx, sb.ID); derr != nil {
			return provider.Sandbox{}, fmt.Errorf("%w (and deleting sandbox %s failed: %w; the next start's reconciliation removes it)", err, sb.ID, derr)
		}
		return provider.Sandbox{}, err
	}
	return out, nil
}

// createRequest checks spec and makes the CreateSandbox body; what
// Daytona cannot do is refused naming the field.
func (p *Provider) createRequest(spec provider.Spec) (createSandbox, error) {
	req := createSandbox{Target: p.cfg.Target, Labels: map[string]string{}, Public: true}
	for k, v := range spec.Options {
		switch k {
		case "snapshot":
			req.Snapshot = v
		case "target":
			req.Target = v
		default:
			return req, fmt.Errorf("%w: option %q (daytona knows: snapshot, target)", provider.ErrUnsupported, k)
		}
	}
	switch {
	case spec.Owner == "":
		return req, errors.New("daytona: spec: owner is empty")
	case spec.Token == "":
		return req, errors.New("daytona: spec: token is empty")
	case spec.CPUs < 0 || spec.CPUs != math.Trunc(spec.CPUs) || spec.CPUs > 64:
		return req, fmt.Errorf("%w: cpus %g: Daytona sizes sandboxes in whole CPUs", provider.ErrUnsupported, spec.CPUs)
	case spec.MemoryBytes < 0 || spec.MemoryBytes%(1<<30) != 0 || spec.MemoryBytes > 1<<40:
		return req, fmt.Errorf("%w: memory_bytes %d: Daytona sizes memory in whole GiB", provider.ErrUnsupported, spec.MemoryBytes)
	case spec.Timeout != 0:
		return req, fmt.Errorf("%w: timeout: Daytona bounds a sandbox's idleness (auto-stop), not its life; this provider turns auto-stop off", provider.ErrUnsupported)
	}
	req.CPU = int(spec.CPUs)
	req.Memory = int(spec.MemoryBytes >> 30)
	for k, v := range spec.Labels {
		if k == OwnerKey {
			return req, fmt.Errorf("daytona: label %q is the provider's own", OwnerKey)
		}
		req.Labels[k] = v
	}
	req.Labels[OwnerKey] = spec.Owner
	return req, nil
}

// start waits for the sandbox to be started, uploads the binary and the
// token, starts the inner daemon and waits until it answers.
func (p *Provider) start(ctx context.Context, sb sandboxInfo, bin []byte, token string) (provider.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	defer cancel()
	for sb.State != "started" {
		switch sb.State {
		case "error", "build_failed", "destroyed", "destroying":
			return provider.Sandbox{}, fmt.Errorf("%w: daytona: sandbox %s is %s: %s", provider.ErrUnavailable, sb.ID, sb.State, vendorapi.Clean(sb.ErrorReason))
		}
		select {
		case <-ctx.Done():
			return provider.Sandbox{}, fmt.Errorf("%w: daytona: sandbox %s not started within %s (state %s)", provider.ErrUnavailable, sb.ID, p.cfg.StartTimeout, sb.State)
		case <-time.After(200 * time.Millisecond):
		}
		if err := p.do(ctx, http.MethodGet, p.cfg.APIURL+"/sandbox/"+url.PathEscape(sb.ID), nil, &sb); err != nil {
			return provider.Sandbox{}, fmt.Errorf("daytona: sandbox %s: %w", sb.ID, err)
		}
	}
	tb := strings.TrimRight(sb.ToolboxProxyURL, "/") + "/" + url.PathEscape(sb.ID)
	if err := p.upload(ctx, tb, binaryPath, bin); err != nil {
		return provider.Sandbox{}, fmt.Errorf("daytona: upload the agentbox binary to %s: %w", sb.ID, err)
	}
	if err := p.upload(ctx, tb, tokenPath, []byte(token+"\n")); err != nil {
		return provider.Sandbox{}, fmt.Errorf("daytona: upload the token to %s: %w", sb.ID, err)
	}
	if err := p.do(ctx, http.MethodPost, tb+"/process/session", map[string]string{"sessionId": sessionID}, nil); err != nil {
		return provider.Sandbox{}, fmt.Errorf("daytona: toolbox session in %s: %w", sb.ID, err)
	}
	// The token is read from the data directory, never an argument.
	// The binary is executable by all: the inner daemon's own sandboxes
	// run it again as their users.
	script := "cd \"$HOME\" && chmod 755 " + binaryPath + " && chmod 700 " + dataDir + " && chmod 600 " + tokenPath +
		" && exec ./" + binaryPath + " serve --listen 127.0.0.1:" + strconv.Itoa(DaemonPort) + " --allowed-hosts '*' --data-dir \"$HOME/" + dataDir + "\""
	var ex struct {
		CmdID string `json:"cmdId"`
	}
	if err := p.do(ctx, http.MethodPost, tb+"/process/session/"+sessionID+"/exec", map[string]any{"command": script, "runAsync": true}, &ex); err != nil {
		return provider.Sandbox{}, fmt.Errorf("daytona: start agentbox serve in %s: %w", sb.ID, err)
	}
	addr, err := p.previewURL(ctx, sb.ID)
	if err != nil {
		return provider.Sandbox{}, err
	}
	out := provider.Sandbox{ID: sb.ID, Address: addr, Token: token}
	c, err := client.New(addr, client.WithToken(token), client.WithHTTPClient(p.hc))
	if err != nil {
		return provider.Sandbox{}, err
	}
	for {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		_, herr := c.Health(rctx)
		rcancel()
		if herr == nil {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return provider.Sandbox{}, fmt.Errorf("%w: daytona: sandbox %s: the inner daemon did not answer within %s: %w", provider.ErrUnavailable, sb.ID, p.cfg.StartTimeout, herr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// previewURL is the URL of the inner daemon's port.
func (p *Provider) previewURL(ctx context.Context, id string) (string, error) {
	var pv struct {
		URL string `json:"url"`
	}
	if err := p.do(ctx, http.MethodGet, p.cfg.APIURL+"/sandbox/"+url.PathEscape(id)+"/ports/"+strconv.Itoa(DaemonPort)+"/preview-url", nil, &pv); err != nil {
		return "", fmt.Errorf("daytona: preview URL of %s: %w", id, err)
	}
	u, err := url.Parse(pv.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("%w: daytona: preview URL %q of %s", provider.ErrUnavailable, vendorapi.Clean(pv.URL), id)
	}
	return strings.TrimRight(pv.URL, "/"), nil
}

// upload writes data to path (relative to the user's home) with the
// toolbox's POST /files/upload (multipart, field "file").
func (p *Provider) upload(ctx context.Context, toolbox, path string, data []byte) error {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, err := mw.CreateFormFile("file", "file")
	if err != nil {
		return err
	}
	if _, err := fw.Write(data); err != nil {
		return err
	}
	if err := mw.Close(); err != nil {
		return err
	}
	return p.send(ctx, http.MethodPost, toolbox+"/files/upload?"+url.Values{"path": {path}}.Encode(), mw.FormDataContentType(), &body, nil)
}

// Connect implements provider.Provider.
func (p *Provider) Connect(ctx context.Context, id, token string) (provider.Sandbox, error) {
	var sb sandboxInfo
	if err := p.do(ctx, http.MethodGet, p.cfg.APIURL+"/sandbox/"+url.PathEscape(id), nil, &sb); err != nil {
		return provider.Sandbox{}, fmt.Errorf("daytona: sandbox %s: %w", id, err)
	}
	if sb.State != "started" {
		return provider.Sandbox{}, fmt.Errorf("%w: daytona: sandbox %s is %s", provider.ErrGone, id, sb.State)
	}
	addr, err := p.previewURL(ctx, id)
	if err != nil {
		return provider.Sandbox{}, err
	}
	return provider.Sandbox{ID: id, Address: addr, Token: token}, nil
}

// Destroy implements provider.Provider; gone is no error.
func (p *Provider) Destroy(ctx context.Context, id string) error {
	err := p.do(ctx, http.MethodDelete, p.cfg.APIURL+"/sandbox/"+url.PathEscape(id), nil, nil)
	if err != nil && !errors.Is(err, provider.ErrGone) {
		return fmt.Errorf("daytona: delete sandbox %s: %w", id, err)
	}
	return nil
}

// List implements provider.Lister: the sandboxes labelled with owner.
func (p *Provider) List(ctx context.Context, owner string) ([]string, error) {
	labels, err := json.Marshal(map[string]string{OwnerKey: owner})
	if err != nil {
		return nil, err
	}
	var ids []string
	cursor := ""
	for range 1000 {
		page, next, err := p.listPage(ctx, string(labels), cursor, 200)
		if err != nil {
			return nil, err
		}
		for _, s := range page {
			if s.Labels[OwnerKey] == owner && s.State != "destroyed" {
				ids = append(ids, s.ID)
			}
		}
		if next == "" {
			return ids, nil
		}
		cursor = next
	}
	return nil, fmt.Errorf("%w: daytona: list: more than 1000 pages", provider.ErrUnavailable)
}

func (p *Provider) listPage(ctx context.Context, labels, cursor string, limit int) ([]sandboxInfo, string, error) {
	v := url.Values{"limit": {strconv.Itoa(limit)}}
	if labels != "" {
		v.Set("labels", labels)
	}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	var page struct {
		Items      []sandboxInfo `json:"items"`
		NextCursor *string       `json:"nextCursor"`
	}
	if err := p.do(ctx, http.MethodGet, p.cfg.APIURL+"/sandbox?"+v.Encode(), nil, &page); err != nil {
		return nil, "", fmt.Errorf("daytona: list sandboxes: %w", err)
	}
	next := ""
	if page.NextCursor != nil {
		next = *page.NextCursor
	}
	return page.Items, next, nil
}

// do makes one JSON request.
func (p *Provider) do(ctx context.Context, method, u string, in, out any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ct = bytes.NewReader(b), "application/json"
	}
	return p.send(ctx, method, u, ct, body, out)
}

// send makes one request with the API key, any 2xx is success, and maps
// an error answer to the contract's sentinels with Daytona's message.
func (p *Provider) send(ctx context.Context, method, u, contentType string, body io.Reader, out any) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+p.cfg.APIKey)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
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
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return vendorapi.StatusError("daytona", resp.StatusCode, b)
	}
	if out == nil || len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%w: an answer that is not the documented JSON: %w", provider.ErrUnavailable, err)
	}
	return nil
}

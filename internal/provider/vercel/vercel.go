// Package vercel is the Vercel Sandbox provider: a thin client of Vercel's
// Sandbox REST API, written from a document derived from the public
// @vercel/sandbox SDK (testdata/README.md, testdata/SOURCE). It creates a
// named, non-persistent sandbox with the inner daemon's port routed, uploads
// agentbox's static binary and the inner daemon's token as a gzipped tar
// through the session's file endpoint, starts `agentbox serve` as a detached
// command of the session, and reaches it through the port's route
// (https://<subdomain>.vercel.run).
package vercel

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/vendorapi"
)

// Name is the provider's name in the registry.
const Name = "vercel"

// The environment the provider's settings come from.
const (
	// EnvToken is the Vercel access token (required). It is sent to the
	// API only: never into a sandbox, never logged.
	EnvToken = "VERCEL_TOKEN"
	// EnvTeamID is the team the sandboxes belong to (required, as the SDK
	// requires it with a token).
	EnvTeamID = "VERCEL_TEAM_ID"
	// EnvProjectID is the project the sandboxes belong to (required).
	EnvProjectID = "VERCEL_PROJECT_ID"
	// EnvAPIURL overrides the API's base URL.
	EnvAPIURL = "VERCEL_API_URL"
)

const (
	DefaultAPIURL = "https://api.vercel.com"
	// DaemonPort is the port the inner agentbox daemon listens on, and
	// the one port routed to the sandbox.
	DaemonPort = 49999
	// DefaultTimeout is the session's life when Spec.Timeout is zero
	// (Vercel's own default, 5 minutes, is too short for a session; 45
	// minutes is the Hobby plan's maximum).
	DefaultTimeout = 45 * time.Minute
	// MaxTimeout bounds Spec.Timeout (Vercel's largest plan maximum; a
	// plan with less refuses with its own message).
	MaxTimeout = 24 * time.Hour
	// MaxVCPUs bounds Spec.CPUs (Vercel's per-sandbox maximum).
	MaxVCPUs = 8
	// MemoryPerVCPU is the memory Vercel gives each vCPU.
	MemoryPerVCPU = 2048 << 20
	// defaultVCPUs is Vercel's default size.
	defaultVCPUs = 2
	// maxTags is Vercel's bound on a sandbox's tags.
	maxTags = 5
	// OwnerKey is the tag holding Spec.Owner.
	OwnerKey = "agentbox-owner"
)

// Paths inside the sandbox, relative to the session's working directory
// (the API's session.cwd, /vercel/sandbox).
const (
	binaryPath = "agentbox"
	dataDir    = ".agentbox"
	tokenPath  = dataDir + "/" + client.TokenFileName
)

// Config is the provider's configuration.
type Config struct {
	// Token authenticates to the API (Authorization: Bearer).
	Token string
	// TeamID and ProjectID scope every request.
	TeamID    string
	ProjectID string
	// APIURL is the API; DefaultAPIURL when empty.
	APIURL string
	// HTTPClient makes every request; a plain client when nil.
	HTTPClient *http.Client
	// RequestTimeout bounds each request; 30 s when zero.
	RequestTimeout time.Duration
	// StartTimeout bounds the wait for the session to run and the inner
	// daemon to answer; 120 s when zero.
	StartTimeout time.Duration
}

// FromEnv reads the configuration from the environment. Each missing
// required variable is named in an ErrCredentials.
func FromEnv(getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	cfg := Config{Token: getenv(EnvToken), TeamID: getenv(EnvTeamID), ProjectID: getenv(EnvProjectID), APIURL: getenv(EnvAPIURL)}
	if err := cfg.check(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// check names the required settings that are missing.
func (c Config) check() error {
	var missing []string
	for _, v := range []struct{ name, val string }{{EnvToken, c.Token}, {EnvTeamID, c.TeamID}, {EnvProjectID, c.ProjectID}} {
		if v.val == "" {
			missing = append(missing, v.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s not set", provider.ErrCredentials, strings.Join(missing, ", "))
	}
	return nil
}

// Provider is the Vercel Sandbox provider.
type Provider struct {
	cfg Config
	hc  *http.Client
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Lister   = (*Provider)(nil)
)

// New returns the provider for cfg; a missing token, team or project is
// ErrCredentials naming the variable.
func New(cfg Config) (*Provider, error) {
	if err := cfg.check(); err != nil {
		return nil, err
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

// Capabilities implements provider.Provider. Vercel snapshots, forks and
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

// createRequest is the document's CreateSandboxRequest, the fields set.
type createRequest struct {
	ProjectID  string            `json:"projectId"`
	Ports      []int             `json:"ports"`
	Timeout    int64             `json:"timeout"`
	Resources  *resources        `json:"resources,omitempty"`
	Persistent bool              `json:"persistent"`
	Image      string            `json:"image,omitempty"`
	Region     string            `json:"region,omitempty"`
	Tags       map[string]string `json:"tags"`
}

type resources struct {
	VCPUs int `json:"vcpus"`
}

// The answers' fields this client reads.
type (
	session struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Cwd    string `json:"cwd"`
	}
	route struct {
		URL  string  `json:"url"`
		Port float64 `json:"port"`
	}
	sandboxInfo struct {
		Name             string            `json:"name"`
		Status           string            `json:"status"`
		CurrentSessionID string            `json:"currentSessionId"`
		Tags             map[string]string `json:"tags"`
	}
	sandboxAndSession struct {
		Sandbox sandboxInfo `json:"sandbox"`
		Session session     `json:"session"`
		Routes  []route     `json:"routes"`
	}
)

// Create implements provider.Provider.
func (p *Provider) Create(ctx context.Context, spec provider.Spec) (provider.Sandbox, error) {
	req, err := p.createRequest(spec)
	if err != nil {
		return provider.Sandbox{}, err
	}
	bin, err := os.ReadFile(spec.Binary)
	if err != nil {
		return provider.Sandbox{}, fmt.Errorf("vercel: the agentbox binary: %w", err)
	}
	var created sandboxAndSession
	if err := p.do(ctx, http.MethodPost, "/v3/sandboxes", nil, req, &created); err != nil {
		return provider.Sandbox{}, fmt.Errorf("vercel: create sandbox: %w", err)
	}
	name := created.Sandbox.Name
	if name == "" || created.Session.ID == "" {
		return provider.Sandbox{}, fmt.Errorf("%w: vercel: create sandbox: the answer names no sandbox or session", provider.ErrUnavailable)
	}
	out, err := p.start(ctx, created, bin, spec.Token)
	if err != nil {
		// Never a half-created sandbox: delete it on a context of its
		// own, since ctx may be what failed.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.RequestTimeout)
		defer cancel()
		if derr := p.Destroy(dctx, name); derr != nil {
			return provider.Sandbox{}, fmt.Errorf("%w (and deleting sandbox %s failed: %w; the next start's reconciliation removes it)", err, name, derr)
		}
		return provider.Sandbox{}, err
	}
	return out, nil
}

// createRequest checks spec and makes the create body; what Vercel cannot
// do is refused naming the field.
func (p *Provider) createRequest(spec provider.Spec) (createRequest, error) {
	req := createRequest{ProjectID: p.cfg.ProjectID, Ports: []int{DaemonPort}, Tags: map[string]string{}}
	for k, v := range spec.Options {
		switch k {
		case "image":
			req.Image = v
		case "region":
			req.Region = v
		default:
			return req, fmt.Errorf("%w: option %q (vercel knows: image, region)", provider.ErrUnsupported, k)
		}
		if v == "" {
			return req, fmt.Errorf("%w: option %s is empty", provider.ErrUnsupported, k)
		}
	}
	vcpus := defaultVCPUs
	if spec.CPUs != 0 {
		vcpus = int(spec.CPUs)
	}
	switch {
	case spec.Owner == "":
		return req, errors.New("vercel: spec: owner is empty")
	case spec.Token == "":
		return req, errors.New("vercel: spec: token is empty")
	case spec.CPUs < 0 || spec.CPUs != math.Trunc(spec.CPUs) || spec.CPUs > MaxVCPUs || (vcpus > 1 && vcpus%2 != 0):
		return req, fmt.Errorf("%w: cpus %g: Vercel sizes sandboxes in 1 or an even number of vCPUs, at most %d", provider.ErrUnsupported, spec.CPUs, MaxVCPUs)
	case spec.MemoryBytes != 0 && spec.MemoryBytes != int64(vcpus)*MemoryPerVCPU:
		return req, fmt.Errorf("%w: memory_bytes %d: Vercel gives 2048 MiB per vCPU (%d bytes for %d vCPUs); choose cpus", provider.ErrUnsupported, spec.MemoryBytes, int64(vcpus)*MemoryPerVCPU, vcpus)
	case spec.Timeout < 0 || spec.Timeout > MaxTimeout || (spec.Timeout != 0 && spec.Timeout < time.Second):
		return req, fmt.Errorf("%w: timeout %s: between 1s and %s", provider.ErrUnsupported, spec.Timeout, MaxTimeout)
	case len(spec.Labels) >= maxTags:
		return req, fmt.Errorf("%w: labels: Vercel keeps %d tags on a sandbox, one of them the owner's; %d labels given", provider.ErrUnsupported, maxTags, len(spec.Labels))
	}
	if spec.CPUs != 0 {
		req.Resources = &resources{VCPUs: vcpus}
	}
	timeout := spec.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	req.Timeout = timeout.Milliseconds()
	for k, v := range spec.Labels {
		if k == OwnerKey {
			return req, fmt.Errorf("vercel: label %q is the provider's own", OwnerKey)
		}
		if k == "" || strings.Contains(k, ":") {
			return req, fmt.Errorf("%w: label %q: a Vercel tag key is not empty and has no ':'", provider.ErrUnsupported, k)
		}
		req.Tags[k] = v
	}
	req.Tags[OwnerKey] = spec.Owner
	return req, nil
}

// start waits for the session to run, uploads the binary and the token,
// starts the inner daemon and waits until it answers.
func (p *Provider) start(ctx context.Context, sb sandboxAndSession, bin []byte, token string) (provider.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	defer cancel()
	name, sess, routes := sb.Sandbox.Name, sb.Session, sb.Routes
	for sess.Status != "running" {
		if sess.Status != "pending" {
			return provider.Sandbox{}, fmt.Errorf("%w: vercel: sandbox %s: session %s is %s", provider.ErrUnavailable, name, sess.ID, vendorapi.Clean(sess.Status))
		}
		select {
		case <-ctx.Done():
			return provider.Sandbox{}, fmt.Errorf("%w: vercel: sandbox %s: session not running within %s", provider.ErrUnavailable, name, p.cfg.StartTimeout)
		case <-time.After(200 * time.Millisecond):
		}
		var got struct {
			Session session `json:"session"`
			Routes  []route `json:"routes"`
		}
		if err := p.do(ctx, http.MethodGet, "/v2/sandboxes/sessions/"+url.PathEscape(sess.ID), nil, nil, &got); err != nil {
			return provider.Sandbox{}, fmt.Errorf("vercel: sandbox %s: session %s: %w", name, sess.ID, err)
		}
		sess, routes = got.Session, got.Routes
	}
	addr, err := daemonURL(name, routes)
	if err != nil {
		return provider.Sandbox{}, err
	}
	cwd := sess.Cwd
	if !path.IsAbs(cwd) {
		return provider.Sandbox{}, fmt.Errorf("%w: vercel: sandbox %s: session cwd %q is not absolute", provider.ErrUnavailable, name, vendorapi.Clean(cwd))
	}
	archive, err := tarball([]tarFile{
		{name: binaryPath, data: bin, mode: 0o755},
		{name: tokenPath, data: []byte(token + "\n"), mode: 0o600},
	})
	if err != nil {
		return provider.Sandbox{}, err
	}
	if err := p.send(ctx, http.MethodPost, "/v2/sandboxes/sessions/"+url.PathEscape(sess.ID)+"/fs/write", nil,
		http.Header{"Content-Type": {"application/gzip"}, "X-Cwd": {cwd}}, bytes.NewReader(archive), nil); err != nil {
		return provider.Sandbox{}, fmt.Errorf("vercel: upload the agentbox binary and token to %s: %w", name, err)
	}
	// The token is read from its file into the daemon's environment (a
	// non-loopback listener needs it given; the route reaches the port on
	// the VM's interface), never on a command line or in the API's
	// command record; the modes are the ones the daemon insists on.
	// The binary is executable by all: the inner daemon's own sandboxes
	// run it again as their users (as for e2b and daytona).
	script := "chmod 755 " + binaryPath + " && chmod 700 " + dataDir + " && chmod 600 " + tokenPath +
		" && AGENTBOX_TOKEN=\"$(cat " + tokenPath + ")\" exec ./" + binaryPath + " serve --listen 0.0.0.0:" + strconv.Itoa(DaemonPort) +
		" --allowed-hosts '*' --data-dir \"$PWD/" + dataDir + "\""
	cmd := map[string]any{"command": "/bin/sh", "args": []string{"-c", script}, "cwd": cwd, "env": map[string]string{}, "sudo": false}
	if err := p.do(ctx, http.MethodPost, "/v2/sandboxes/sessions/"+url.PathEscape(sess.ID)+"/cmd", nil, cmd, nil); err != nil {
		return provider.Sandbox{}, fmt.Errorf("vercel: start agentbox serve in %s: %w", name, err)
	}
	out := provider.Sandbox{ID: name, Address: addr, Token: token}
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
			return provider.Sandbox{}, fmt.Errorf("%w: vercel: sandbox %s: the inner daemon did not answer within %s: %w", provider.ErrUnavailable, name, p.cfg.StartTimeout, herr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// daemonURL is the route of DaemonPort.
func daemonURL(name string, routes []route) (string, error) {
	for _, r := range routes {
		if r.Port != DaemonPort {
			continue
		}
		u, err := url.Parse(r.URL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return "", fmt.Errorf("%w: vercel: sandbox %s: route %q of port %d", provider.ErrUnavailable, name, vendorapi.Clean(r.URL), DaemonPort)
		}
		return strings.TrimRight(r.URL, "/"), nil
	}
	return "", fmt.Errorf("%w: vercel: sandbox %s has no route for port %d", provider.ErrUnavailable, name, DaemonPort)
}

type tarFile struct {
	name string
	data []byte
	mode int64
}

// tarball is files as the gzipped tar fs/write extracts (file-writer.ts).
func tarball(files []tarFile) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Size: int64(len(f.data)), Mode: f.mode, ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Connect implements provider.Provider: the sandbox must have a running
// session (it is never resumed: a new session would have no inner daemon).
func (p *Provider) Connect(ctx context.Context, id, token string) (provider.Sandbox, error) {
	var sb sandboxAndSession
	q := url.Values{"projectId": {p.cfg.ProjectID}, "resume": {"false"}}
	if err := p.do(ctx, http.MethodGet, "/v2/sandboxes/"+url.PathEscape(id), q, nil, &sb); err != nil {
		return provider.Sandbox{}, fmt.Errorf("vercel: sandbox %s: %w", id, err)
	}
	if sb.Sandbox.Status != "running" || sb.Session.Status != "running" {
		return provider.Sandbox{}, fmt.Errorf("%w: vercel: sandbox %s is %s", provider.ErrGone, id, vendorapi.Clean(sb.Sandbox.Status))
	}
	addr, err := daemonURL(id, sb.Routes)
	if err != nil {
		return provider.Sandbox{}, err
	}
	return provider.Sandbox{ID: id, Address: addr, Token: token}, nil
}

// Destroy implements provider.Provider: delete the sandbox (its sessions
// end with it; it is not persistent, so nothing is snapshotted); gone is
// no error.
func (p *Provider) Destroy(ctx context.Context, id string) error {
	err := p.do(ctx, http.MethodDelete, "/v2/sandboxes/"+url.PathEscape(id), url.Values{"projectId": {p.cfg.ProjectID}}, nil, nil)
	if err != nil && !errors.Is(err, provider.ErrGone) {
		return fmt.Errorf("vercel: delete sandbox %s: %w", id, err)
	}
	return nil
}

// List implements provider.Lister: every sandbox of the project tagged
// with owner, whatever its state (Destroy deletes stopped ones too).
func (p *Provider) List(ctx context.Context, owner string) ([]string, error) {
	var ids []string
	cursor := ""
	for range 1000 { // a bound on pages
		page, next, err := p.listPage(ctx, OwnerKey+":"+owner, cursor, 100)
		if err != nil {
			return nil, err
		}
		for _, s := range page {
			if s.Tags[OwnerKey] == owner { // the filter is the server's; this is a check
				ids = append(ids, s.Name)
			}
		}
		if next == "" {
			return ids, nil
		}
		cursor = next
	}
	return nil, fmt.Errorf("%w: vercel: list: more than 1000 pages", provider.ErrUnavailable)
}

func (p *Provider) listPage(ctx context.Context, tag, cursor string, limit int) ([]sandboxInfo, string, error) {
	q := url.Values{"project": {p.cfg.ProjectID}, "limit": {strconv.Itoa(limit)}}
	if tag != "" {
		q.Set("tags", tag)
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var page struct {
		Sandboxes  []sandboxInfo `json:"sandboxes"`
		Pagination struct {
			Next *string `json:"next"`
		} `json:"pagination"`
	}
	if err := p.do(ctx, http.MethodGet, "/v2/sandboxes", q, nil, &page); err != nil {
		return nil, "", fmt.Errorf("vercel: list sandboxes: %w", err)
	}
	next := ""
	if page.Pagination.Next != nil {
		next = *page.Pagination.Next
	}
	return page.Sandboxes, next, nil
}

// do makes one JSON request.
func (p *Provider) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	var hdr http.Header
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, hdr = bytes.NewReader(b), http.Header{"Content-Type": {"application/json"}}
	}
	return p.send(ctx, method, path, q, hdr, body, out)
}

// send makes one request to path with the token and the team, any 2xx is
// success, and maps an error answer to the contract's sentinels with
// Vercel's message.
func (p *Provider) send(ctx context.Context, method, path string, q url.Values, hdr http.Header, body io.Reader, out any) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	if q == nil {
		q = url.Values{}
	}
	q.Set("teamId", p.cfg.TeamID)
	req, err := http.NewRequestWithContext(ctx, method, p.cfg.APIURL+path+"?"+q.Encode(), body)
	if err != nil {
		return err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+p.cfg.Token)
	req.Header.Set("Accept", "application/json")
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
		return vendorapi.StatusError(Name, resp.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%w: an answer that is not the documented JSON: %w", provider.ErrUnavailable, err)
	}
	return nil
}

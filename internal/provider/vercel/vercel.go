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
	"fmt"
	"math"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

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
	DaemonPort = vendorapi.DaemonPort
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
	OwnerKey = vendorapi.OwnerKey
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
	return vendorapi.FromEnv(getenv, func(env func(string) string) Config {
		return Config{Token: env(EnvToken), TeamID: env(EnvTeamID), ProjectID: env(EnvProjectID), APIURL: env(EnvAPIURL)}
	}, Config.check)
}

// check names the required settings that are missing.
func (c Config) check() error {
	return vendorapi.Require(vendorapi.Setting{Name: EnvToken, Value: c.Token}, vendorapi.Setting{Name: EnvTeamID, Value: c.TeamID},
		vendorapi.Setting{Name: EnvProjectID, Value: c.ProjectID})
}

// Provider is the Vercel Sandbox provider: vendorapi's, with Vercel's
// endpoints.
type Provider struct {
	*vendorapi.Provider[createRequest, sandboxAndSession]
}

// New returns the provider for cfg; a missing token, team or project is
// ErrCredentials naming the variable.
func New(cfg Config) (*Provider, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	c, err := vendorapi.NewClient(Name, vendorapi.Settings{
		APIURL: cfg.APIURL, DefaultAPIURL: DefaultAPIURL, HTTPClient: cfg.HTTPClient,
		RequestTimeout: cfg.RequestTimeout, StartTimeout: cfg.StartTimeout, DefaultStartTimeout: 120 * time.Second,
	}, http.Header{"Authorization": {"Bearer " + cfg.Token}, "Accept": {"application/json"}})
	if err != nil {
		return nil, err
	}
	c.Query = map[string]string{"teamId": cfg.TeamID}
	return &Provider{vendorapi.NewProvider(c, &api{c: c, cfg: cfg}, 100)}, nil
}

// api is Vercel's part of the provider (vendorapi.Vendor).
type api struct {
	c   *vendorapi.Client
	cfg Config
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

// Request checks spec and makes the create body; what Vercel cannot do
// is refused naming the field.
func (a *api) Request(spec provider.Spec) (createRequest, error) {
	req := createRequest{ProjectID: a.cfg.ProjectID, Ports: []int{DaemonPort}, Tags: map[string]string{}}
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
		if k == "" || strings.Contains(k, ":") {
			return req, fmt.Errorf("%w: label %q: a Vercel tag key is not empty and has no ':'", provider.ErrUnsupported, k)
		}
		req.Tags[k] = v
	}
	req.Tags[OwnerKey] = spec.Owner
	return req, nil
}

// Create is POST /v3/sandboxes: a named sandbox and its first session.
func (a *api) Create(ctx context.Context, req createRequest) (string, sandboxAndSession, error) {
	var created sandboxAndSession
	if err := a.c.Do(ctx, vendorapi.Request{Method: http.MethodPost, Path: "/v3/sandboxes", JSON: req, Out: &created}); err != nil {
		return "", created, err
	}
	if created.Sandbox.Name == "" || created.Session.ID == "" {
		return "", created, fmt.Errorf("%w: the answer names no sandbox or session", provider.ErrUnavailable)
	}
	return created.Sandbox.Name, created, nil
}

// Start waits for the session to run, uploads the binary and the token
// as one gzipped tar, starts the inner daemon as a detached command and
// waits until it answers, all within the StartTimeout.
func (a *api) Start(ctx context.Context, sb sandboxAndSession, bin []byte, token string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, a.c.StartTimeout)
	defer cancel()
	sess, routes := sb.Session, sb.Routes
	err := a.c.Poll(ctx, 200*time.Millisecond, func() (bool, error) {
		switch sess.Status {
		case "running":
			return true, nil
		case "pending":
			return false, nil
		}
		return false, fmt.Errorf("%w: session %s is %s", provider.ErrUnavailable, sess.ID, vendorapi.Clean(sess.Status))
	}, func(ctx context.Context) error {
		var got struct {
			Session session `json:"session"`
			Routes  []route `json:"routes"`
		}
		if err := a.c.Do(ctx, vendorapi.Request{Method: http.MethodGet, Path: "/v2/sandboxes/sessions/" + url.PathEscape(sess.ID), Out: &got}); err != nil {
			return fmt.Errorf("session %s: %w", sess.ID, err)
		}
		sess, routes = got.Session, got.Routes
		return nil
	}, func() string { return "session not running" })
	if err != nil {
		return "", err
	}
	addr, err := daemonURL(routes)
	if err != nil {
		return "", err
	}
	cwd := sess.Cwd
	if !path.IsAbs(cwd) {
		return "", fmt.Errorf("%w: session cwd %q is not absolute", provider.ErrUnavailable, vendorapi.Clean(cwd))
	}
	archive, err := tarball([]tarFile{
		{name: vendorapi.BinaryPath, data: bin, mode: 0o755},
		{name: vendorapi.TokenPath, data: []byte(token + "\n"), mode: 0o600},
	})
	if err != nil {
		return "", err
	}
	if err := a.c.Do(ctx, vendorapi.Request{Method: http.MethodPost, Path: "/v2/sandboxes/sessions/" + url.PathEscape(sess.ID) + "/fs/write",
		Header: http.Header{"Content-Type": {"application/gzip"}, "X-Cwd": {cwd}}, Body: bytes.NewReader(archive)}); err != nil {
		return "", fmt.Errorf("upload the agentbox binary and token: %w", err)
	}
	// The command starts in the session's working directory. The daemon
	// listens on the VM's interface, which the route reaches, so its token
	// is given (from its file, never on a command line or in the API's
	// command record).
	script := vendorapi.Serve{Dir: "$PWD", Listen: "0.0.0.0", TokenEnv: true}.Script()
	cmd := map[string]any{"command": "/bin/sh", "args": []string{"-c", script}, "cwd": cwd, "env": map[string]string{}, "sudo": false}
	if err := a.c.Do(ctx, vendorapi.Request{Method: http.MethodPost, Path: "/v2/sandboxes/sessions/" + url.PathEscape(sess.ID) + "/cmd", JSON: cmd}); err != nil {
		return "", fmt.Errorf("start agentbox serve: %w", err)
	}
	return addr, a.c.WaitHealthy(ctx, addr, token)
}

// daemonURL is the route of DaemonPort.
func daemonURL(routes []route) (string, error) {
	for _, r := range routes {
		if r.Port != DaemonPort {
			continue
		}
		u, err := url.Parse(r.URL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return "", fmt.Errorf("%w: route %q of port %d", provider.ErrUnavailable, vendorapi.Clean(r.URL), DaemonPort)
		}
		return strings.TrimRight(r.URL, "/"), nil
	}
	return "", fmt.Errorf("%w: no route for port %d", provider.ErrUnavailable, DaemonPort)
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

// Address is GET /v2/sandboxes/{name}: the sandbox must have a running
// session (it is never resumed: a new session would have no inner
// daemon).
func (a *api) Address(ctx context.Context, id string) (string, error) {
	var sb sandboxAndSession
	q := map[string]string{"projectId": a.cfg.ProjectID, "resume": "false"}
	if err := a.c.Do(ctx, vendorapi.Request{Method: http.MethodGet, Path: "/v2/sandboxes/" + url.PathEscape(id), Query: q, Out: &sb}); err != nil {
		return "", err
	}
	if sb.Sandbox.Status != "running" || sb.Session.Status != "running" {
		return "", fmt.Errorf("%w: it is %s", provider.ErrGone, vendorapi.Clean(sb.Sandbox.Status))
	}
	return daemonURL(sb.Routes)
}

// Delete is DELETE /v2/sandboxes/{name}: its sessions end with it; it is
// not persistent, so nothing is snapshotted.
func (a *api) Delete(ctx context.Context, id string) error {
	return a.c.Do(ctx, vendorapi.Request{Method: http.MethodDelete, Path: "/v2/sandboxes/" + url.PathEscape(id), Query: map[string]string{"projectId": a.cfg.ProjectID}})
}

// ListPage is GET /v2/sandboxes of the project, whatever their state
// (Destroy deletes stopped ones too), filtered by the owner's tag, paged
// by cursor.
func (a *api) ListPage(ctx context.Context, owner, cursor string, limit int) ([]string, string, error) {
	q := map[string]string{"project": a.cfg.ProjectID, "limit": strconv.Itoa(limit)}
	if owner != "" {
		q["tags"] = OwnerKey + ":" + owner
	}
	if cursor != "" {
		q["cursor"] = cursor
	}
	var page struct {
		Sandboxes  []sandboxInfo `json:"sandboxes"`
		Pagination struct {
			Next *string `json:"next"`
		} `json:"pagination"`
	}
	if err := a.c.Do(ctx, vendorapi.Request{Method: http.MethodGet, Path: "/v2/sandboxes", Query: q, Out: &page}); err != nil {
		return nil, "", err
	}
	var ids []string
	for _, s := range page.Sandboxes {
		if s.Tags[OwnerKey] == owner || owner == "" { // the filter is the server's; this is a check
			ids = append(ids, s.Name)
		}
	}
	next := ""
	if page.Pagination.Next != nil {
		next = *page.Pagination.Next
	}
	return ids, next, nil
}

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
	"fmt"
	"math"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

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
	DaemonPort = vendorapi.DaemonPort
	// OwnerKey is the label holding Spec.Owner.
	OwnerKey = vendorapi.OwnerKey
	// sessionID is the toolbox session the inner daemon runs in.
	sessionID = "agentbox"
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
	return vendorapi.FromEnv(getenv, func(env func(string) string) Config {
		return Config{APIKey: env(EnvAPIKey), APIURL: env(EnvAPIURL), Target: env(EnvTarget)}
	}, Config.check)
}

// check names the required setting if it is missing.
func (c Config) check() error {
	return vendorapi.Require(vendorapi.Setting{Name: EnvAPIKey, Value: c.APIKey})
}

// Provider is the Daytona provider: vendorapi's, with Daytona's endpoints.
type Provider struct {
	*vendorapi.Provider[createSandbox, sandboxInfo]
}

// New returns the provider for cfg. An empty APIKey is ErrCredentials.
func New(cfg Config) (*Provider, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	c, err := vendorapi.NewClient(Name, vendorapi.Settings{
		APIURL: cfg.APIURL, DefaultAPIURL: DefaultAPIURL, HTTPClient: cfg.HTTPClient,
		RequestTimeout: cfg.RequestTimeout, StartTimeout: cfg.StartTimeout, DefaultStartTimeout: 120 * time.Second,
	}, http.Header{"Authorization": {"Bearer " + cfg.APIKey}})
	if err != nil {
		return nil, err
	}
	c.EmptyAnswer = true
	return &Provider{vendorapi.NewProvider(c, &api{c: c, cfg: cfg}, 200)}, nil
}

// api is Daytona's part of the provider (vendorapi.Vendor).
type api struct {
	c   *vendorapi.Client
	cfg Config
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

// Request checks spec and makes the CreateSandbox body; what Daytona
// cannot do is refused naming the field.
func (a *api) Request(spec provider.Spec) (createSandbox, error) {
	req := createSandbox{Target: a.cfg.Target, Labels: map[string]string{}, Public: true}
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
		req.Labels[k] = v
	}
	req.Labels[OwnerKey] = spec.Owner
	return req, nil
}

// Create is POST /sandbox.
func (a *api) Create(ctx context.Context, req createSandbox) (string, sandboxInfo, error) {
	var sb sandboxInfo
	if err := a.c.Do(ctx, vendorapi.Request{Method: http.MethodPost, Path: "/sandbox", JSON: req, Out: &sb}); err != nil {
		return "", sb, err
	}
	if sb.ID == "" {
		return "", sb, fmt.Errorf("%w: the answer names no id", provider.ErrUnavailable)
	}
	return sb.ID, sb, nil
}

// Start waits for the sandbox to be started, uploads the binary and the
// token through the toolbox, starts the inner daemon as an asynchronous
// command of a toolbox session and waits until it answers, all within
// the StartTimeout.
func (a *api) Start(ctx context.Context, sb sandboxInfo, bin []byte, token string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, a.c.StartTimeout)
	defer cancel()
	err := a.c.Poll(ctx, 200*time.Millisecond, func() (bool, error) {
		switch sb.State {
		case "started":
			return true, nil
		case "error", "build_failed", "destroyed", "destroying":
			return false, fmt.Errorf("%w: it is %s: %s", provider.ErrUnavailable, sb.State, vendorapi.Clean(sb.ErrorReason))
		}
		return false, nil
	}, func(ctx context.Context) error {
		return a.c.Do(ctx, vendorapi.Request{Method: http.MethodGet, Path: "/sandbox/" + url.PathEscape(sb.ID), Out: &sb})
	}, func() string { return "not started (state " + sb.State + ")" })
	if err != nil {
		return "", err
	}
	// The toolbox proxy takes the API key as the control plane does.
	tb := a.c.Endpoint(Name, strings.TrimRight(sb.ToolboxProxyURL, "/")+"/"+url.PathEscape(sb.ID), a.c.Header)
	tb.EmptyAnswer = true
	if err := upload(ctx, tb, vendorapi.BinaryPath, bin); err != nil {
		return "", fmt.Errorf("upload the agentbox binary: %w", err)
	}
	if err := upload(ctx, tb, vendorapi.TokenPath, []byte(token+"\n")); err != nil {
		return "", fmt.Errorf("upload the token: %w", err)
	}
	if err := tb.Do(ctx, vendorapi.Request{Method: http.MethodPost, Path: "/process/session", JSON: map[string]string{"sessionId": sessionID}}); err != nil {
		return "", fmt.Errorf("toolbox session: %w", err)
	}
	// A session's command starts in the user's home, or not: the script
	// changes into it.
	script := vendorapi.Serve{Dir: "$HOME", Cd: true, Listen: "127.0.0.1"}.Script()
	var ex struct {
		CmdID string `json:"cmdId"`
	}
	if err := tb.Do(ctx, vendorapi.Request{Method: http.MethodPost, Path: "/process/session/" + sessionID + "/exec", JSON: map[string]any{"command": script, "runAsync": true}, Out: &ex}); err != nil {
		return "", fmt.Errorf("start agentbox serve: %w", err)
	}
	addr, err := a.previewURL(ctx, sb.ID)
	if err != nil {
		return "", err
	}
	return addr, a.c.WaitHealthy(ctx, addr, token)
}

// previewURL is the URL of the inner daemon's port.
func (a *api) previewURL(ctx context.Context, id string) (string, error) {
	var pv struct {
		URL string `json:"url"`
	}
	if err := a.c.Do(ctx, vendorapi.Request{Method: http.MethodGet, Path: "/sandbox/" + url.PathEscape(id) + "/ports/" + strconv.Itoa(DaemonPort) + "/preview-url", Out: &pv}); err != nil {
		return "", fmt.Errorf("preview URL: %w", err)
	}
	u, err := url.Parse(pv.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("%w: preview URL %q", provider.ErrUnavailable, vendorapi.Clean(pv.URL))
	}
	return strings.TrimRight(pv.URL, "/"), nil
}

// upload writes data to path (relative to the user's home) with the
// toolbox's POST /files/upload (multipart, field "file").
func upload(ctx context.Context, toolbox *vendorapi.Client, path string, data []byte) error {
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
	return toolbox.Do(ctx, vendorapi.Request{Method: http.MethodPost, Path: "/files/upload", Query: map[string]string{"path": path},
		Header: http.Header{"Content-Type": {mw.FormDataContentType()}}, Body: &body})
}

// Address is GET /sandbox/{id} and the port's preview URL: a sandbox that
// is not started is gone.
func (a *api) Address(ctx context.Context, id string) (string, error) {
	var sb sandboxInfo
	if err := a.c.Do(ctx, vendorapi.Request{Method: http.MethodGet, Path: "/sandbox/" + url.PathEscape(id), Out: &sb}); err != nil {
		return "", err
	}
	if sb.State != "started" {
		return "", fmt.Errorf("%w: it is %s", provider.ErrGone, vendorapi.Clean(sb.State))
	}
	return a.previewURL(ctx, id)
}

// Delete is DELETE /sandbox/{id}.
func (a *api) Delete(ctx context.Context, id string) error {
	return a.c.Do(ctx, vendorapi.Request{Method: http.MethodDelete, Path: "/sandbox/" + url.PathEscape(id)})
}

// ListPage is GET /sandbox filtered by the owner's label, paged by
// cursor; a destroyed sandbox is not listed.
func (a *api) ListPage(ctx context.Context, owner, cursor string, limit int) ([]string, string, error) {
	q := map[string]string{"limit": strconv.Itoa(limit)}
	if owner != "" {
		labels, err := json.Marshal(map[string]string{OwnerKey: owner})
		if err != nil {
			return nil, "", err
		}
		q["labels"] = string(labels)
	}
	if cursor != "" {
		q["cursor"] = cursor
	}
	var page struct {
		Items      []sandboxInfo `json:"items"`
		NextCursor *string       `json:"nextCursor"`
	}
	if err := a.c.Do(ctx, vendorapi.Request{Method: http.MethodGet, Path: "/sandbox", Query: q, Out: &page}); err != nil {
		return nil, "", err
	}
	var ids []string
	for _, s := range page.Items {
		if (s.Labels[OwnerKey] == owner || owner == "") && s.State != "destroyed" {
			ids = append(ids, s.ID)
		}
	}
	next := ""
	if page.NextCursor != nil {
		next = *page.NextCursor
	}
	return ids, next, nil
}

package providertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/reexec"
)

// This file runs a host daemon as a process of its own, so the suite can
// kill it with SIGKILL: no shutdown path of the daemon, the engine or the
// store runs, exactly as in a crash. The process is this test binary
// re-executed as the helper hostArg0 (Main runs it). The provider under
// test stays in the test process (it may be an in-process fake, and the
// suite's proxies are there): the host process reaches it through
// providerRPC, a small JSON-over-HTTP forwarding of the provider
// contract on a loopback port, with a token of its own.

const (
	hostArg0 = "agentbox-providertest-host"
	// hostEnv carries the host process's hostConfig.
	hostEnv = "AGENTBOX_PROVIDERTEST_HOST"
)

func init() { reexec.Register(hostArg0, hostMain) }

// hostConfig is what the host process is given.
type hostConfig struct {
	ProviderURL   string                       `json:"provider_url"`
	ProviderToken string                       `json:"provider_token"`
	Name          string                       `json:"name"`
	Capabilities  provider.Capabilities        `json:"capabilities"`
	Lister        bool                         `json:"lister"`
	DataDir       string                       `json:"data_dir"`
	Binary        string                       `json:"binary"`
	Options       map[string]map[string]string `json:"options"`
	StartTimeout  time.Duration                `json:"start_timeout"`
}

// hostReady is the host process's first line on stdout.
type hostReady struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

// hostMain is the host process: a daemon on a loopback port with the
// forwarded provider, serving until SIGTERM (or SIGKILL).
func hostMain() int {
	var cfg hostConfig
	if err := json.Unmarshal([]byte(os.Getenv(hostEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "providertest host:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var p provider.Provider = &rpcProvider{url: cfg.ProviderURL, token: cfg.ProviderToken, name: cfg.Name, caps: cfg.Capabilities}
	if cfg.Lister {
		p = rpcLister{p.(*rpcProvider)}
	}
	reg := provider.NewRegistry()
	reg.Register(p)
	d, err := daemon.New(ctx, daemon.Config{
		Listen: "127.0.0.1:0", DataDir: cfg.DataDir, Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Providers: reg, ProviderOptions: cfg.Options, ProviderBinary: cfg.Binary,
		StartTimeout: cfg.StartTimeout, RelayLostAfter: time.Minute,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "providertest host:", err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(hostReady{URL: d.URL(), Token: d.Token()}); err != nil {
		return 1
	}
	if err := d.Serve(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "providertest host:", err)
		return 1
	}
	return 0
}

// startHostProcess starts a host daemon as a process of its own on
// dataDir, with p (served to it by providerRPC).
func (s *suite) startHostProcess(t *testing.T, dataDir string, p provider.Provider) *host {
	t.Helper()
	if err := reexec.Check(hostArg0); err != nil {
		t.Fatalf("providertest: the host process: %v (the test package's TestMain must be providertest.Main)", err)
	}
	rpcURL, rpcToken := serveProviderRPC(t, p)
	_, lister := p.(provider.Lister)
	opts := map[string]map[string]string{}
	if len(s.Options) > 0 {
		opts[p.Name()] = s.Options
	}
	cfg, err := json.Marshal(hostConfig{
		ProviderURL: rpcURL, ProviderToken: rpcToken, Name: p.Name(), Capabilities: p.Capabilities(), Lister: lister,
		DataDir: dataDir, Binary: s.Binary, Options: opts, StartTimeout: s.Timeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := &exec.Cmd{Path: self, Args: []string{hostArg0}, Env: append(os.Environ(), hostEnv+"="+string(cfg))}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the host process: %v", err)
	}
	exited := make(chan struct{})
	h := &host{proc: cmd, exited: exited}
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		h.kill(t)
		if t.Failed() {
			t.Logf("host process stderr:\n%s", stderr.String())
		}
	})
	line, err := bufio.NewReader(out).ReadBytes('\n')
	var ready hostReady
	if err != nil || json.Unmarshal(line, &ready) != nil {
		h.kill(t)
		t.Fatalf("the host process did not start (%v):\n%s", err, stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if h.c, err = client.New(ready.URL, client.WithToken(ready.Token)); err != nil {
		t.Fatal(err)
	}
	return h
}

// kill kills a host process with SIGKILL and waits for it to be gone.
func (h *host) kill(t *testing.T) {
	t.Helper()
	if h.proc == nil {
		t.Fatal("providertest: kill of an in-process host")
	}
	if h.c != nil {
		h.c.CloseIdleConnections()
	}
	select {
	case <-h.exited:
		return
	default:
	}
	if err := h.proc.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("SIGKILL the host process: %v", err)
	}
	<-h.exited
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// rpcCall and rpcAnswer are providerRPC's request and answer.
type rpcCall struct {
	Spec  provider.Spec `json:"spec"`
	ID    string        `json:"id,omitempty"`
	Token string        `json:"token,omitempty"`
	Owner string        `json:"owner,omitempty"`
}

type rpcAnswer struct {
	Sandbox provider.Sandbox `json:"sandbox"`
	IDs     []string         `json:"ids,omitempty"`
	Error   string           `json:"error,omitempty"`
	Kind    string           `json:"kind,omitempty"` // the sentinel the error wraps (rpcKinds)
}

// rpcKinds are the contract's sentinels, by the name they cross with.
var rpcKinds = map[string]error{
	"unknown": provider.ErrUnknown, "credentials": provider.ErrCredentials, "quota": provider.ErrQuota,
	"unavailable": provider.ErrUnavailable, "gone": provider.ErrGone, "unsupported": provider.ErrUnsupported,
}

// serveProviderRPC serves p's contract to a host process: POST /{op}
// with an rpcCall, the bearer token returned.
func serveProviderRPC(t *testing.T, p provider.Provider) (url, token string) {
	token = randomToken(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token || r.Method != http.MethodPost {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		var call rpcCall
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&call); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ctx := r.Context()
		var ans rpcAnswer
		var err error
		switch r.URL.Path {
		case "/health":
			err = p.Health(ctx)
		case "/create":
			ans.Sandbox, err = p.Create(ctx, call.Spec)
		case "/connect":
			ans.Sandbox, err = p.Connect(ctx, call.ID, call.Token)
		case "/destroy":
			err = p.Destroy(ctx, call.ID)
		case "/list":
			l, ok := p.(provider.Lister)
			if !ok {
				http.Error(w, "no Lister", http.StatusNotFound)
				return
			}
			ans.IDs, err = l.List(ctx, call.Owner)
		default:
			http.NotFound(w, r)
			return
		}
		if err != nil {
			ans.Error = err.Error()
			for k, sentinel := range rpcKinds {
				if errors.Is(err, sentinel) {
					ans.Kind = k
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(ans)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, token
}

// rpcProvider is the provider under test as the host process sees it.
type rpcProvider struct {
	url, token, name string
	caps             provider.Capabilities
}

// rpcLister is an rpcProvider whose provider lists.
type rpcLister struct{ *rpcProvider }

func (l rpcLister) List(ctx context.Context, owner string) ([]string, error) {
	ans, err := l.call(ctx, "list", rpcCall{Owner: owner})
	return ans.IDs, err
}

// rpcError is an error of the provider under test, wrapping its sentinel.
type rpcError struct {
	msg  string
	kind error
}

func (e *rpcError) Error() string { return e.msg }
func (e *rpcError) Unwrap() error { return e.kind }

func (p *rpcProvider) call(ctx context.Context, op string, c rpcCall) (rpcAnswer, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return rpcAnswer{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url+"/"+op, bytes.NewReader(b))
	if err != nil {
		return rpcAnswer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return rpcAnswer{}, fmt.Errorf("%w: the test's provider: %w", provider.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	var ans rpcAnswer
	if resp.StatusCode != http.StatusOK {
		return ans, fmt.Errorf("%w: the test's provider answered %s", provider.ErrUnavailable, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&ans); err != nil {
		return ans, fmt.Errorf("%w: the test's provider: %w", provider.ErrUnavailable, err)
	}
	if ans.Error != "" {
		return ans, &rpcError{msg: ans.Error, kind: rpcKinds[ans.Kind]}
	}
	return ans, nil
}

func (p *rpcProvider) Name() string                        { return p.name }
func (p *rpcProvider) Capabilities() provider.Capabilities { return p.caps }

func (p *rpcProvider) Health(ctx context.Context) error {
	_, err := p.call(ctx, "health", rpcCall{})
	return err
}

func (p *rpcProvider) Create(ctx context.Context, spec provider.Spec) (provider.Sandbox, error) {
	ans, err := p.call(ctx, "create", rpcCall{Spec: spec})
	return ans.Sandbox, err
}

func (p *rpcProvider) Connect(ctx context.Context, id, token string) (provider.Sandbox, error) {
	ans, err := p.call(ctx, "connect", rpcCall{ID: id, Token: token})
	return ans.Sandbox, err
}

func (p *rpcProvider) Destroy(ctx context.Context, id string) error {
	_, err := p.call(ctx, "destroy", rpcCall{ID: id})
	return err
}

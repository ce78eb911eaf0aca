package opencode

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

// serverKey says which sessions can share one `opencode serve`: those with
// the same provider (base URL, key, model) and the same extra environment.
type serverKey struct {
	baseURL, apiKey, model, env string
}

// server is one running `opencode serve`.
type server struct {
	key      serverKey
	url      string // http://127.0.0.1:PORT
	password string
	tree     *agent.Tree  // a shared server on the host (agent.StartTree)
	proc     *agent.Proc  // a session's own server in its sandbox (sandboxed.go)
	http     *http.Client // a sandboxed server's dials go through relays

	done   chan struct{} // closed when the process has exited
	exit   event.SessionEnded
	stderr *agent.TailBuffer

	refs int // sessions using it; guarded by adapter.mu
}

var listenRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`listening on (http://[0-9A-Za-z.:\[\]]+)`) })

// startServer runs `opencode serve` for key and waits until it answers.
func (a *adapter) startServer(ctx context.Context, key serverKey) (*server, error) {
	bin, _, err := a.opts.Binary()
	if err != nil || bin == "" {
		if err == nil {
			err = errors.New("no path")
		}
		return nil, fmt.Errorf("opencode: the CLI is not installed (run `agentbox agents install opencode`): %w", err)
	}
	home, err := a.home.Make()
	if err != nil {
		return nil, fmt.Errorf("opencode: home directory: %w", err)
	}
	cfgPath, err := writeConfig(home, key, a.opts.Models)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 { // the free port can be taken before OpenCode binds it
		port, err := freePort(ctx)
		if err != nil {
			return nil, fmt.Errorf("opencode: %w", err)
		}
		s, err := a.spawn(ctx, bin, home, cfgPath, key, port)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func freePort(ctx context.Context) (int, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// writeConfig writes the OpenCode config of a server key. The API key is
// not in it: the config refers to the environment variable that holds it.
func writeConfig(home string, key serverKey, models []string) (string, error) {
	b, err := configJSON(key.baseURL, key.model, models)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(home, "configs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("opencode: %w", err)
	}
	f, err := os.CreateTemp(dir, "opencode-*.json")
	if err != nil {
		return "", fmt.Errorf("opencode: %w", err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("opencode: write config: %w", err)
	}
	return f.Name(), nil
}

// Models is the "models" of an OpenCode provider that serves model and
// more: each with tool calls, attachments and image and PDF input (else
// OpenCode turns the image and PDF parts of a prompt into an error text).
func Models(model string, more []string) map[string]any {
	declare := func(name string) map[string]any {
		return map[string]any{"name": name, "tool_call": true, "attachment": true,
			"modalities": map[string]any{"input": []string{"text", "image", "pdf"}, "output": []string{"text"}}}
	}
	models := map[string]any{model: declare(model)}
	for _, m := range more {
		models[m] = declare(m)
	}
	return models
}

// configJSON is an OpenCode config: the provider "agentbox" at baseURL
// (which may be an {env:…} reference), its key read from apiKeyEnv, and
// model.
func configJSON(baseURL, model string, more []string) ([]byte, error) {
	models := Models(model, more)
	cfg := map[string]any{
		"$schema": "https://opencode.ai/config.json",
		"provider": map[string]any{
			providerID: map[string]any{
				"npm":  "@ai-sdk/openai-compatible",
				"name": "agentbox",
				"options": map[string]any{
					"baseURL": baseURL,
					"apiKey":  "{env:" + apiKeyEnv + "}",
				},
				"models": models,
			},
		},
		"model":       providerID + "/" + model,
		"small_model": providerID + "/" + model,
		"autoupdate":  false,
		"share":       "disabled",
		// The baseline; each session adds the rules of its permission
		// mode (sessionRules), which win.
		"permission": map[string]any{"bash": "ask", "edit": "ask"},
	}
	return json.MarshalIndent(cfg, "", "  ")
}

// environ builds the server's environment from scratch.
func (a *adapter) environ(bin, home, cfgPath string, key serverKey, password string) []string {
	env := map[string]string{
		"PATH":                             filepath.Dir(bin) + string(os.PathListSeparator) + "/usr/local/bin:/usr/bin:/bin",
		"HOME":                             filepath.Join(home, "home"),
		"XDG_CONFIG_HOME":                  filepath.Join(home, "config"),
		"XDG_DATA_HOME":                    filepath.Join(home, "data"),
		"XDG_CACHE_HOME":                   filepath.Join(home, "cache"),
		"XDG_STATE_HOME":                   filepath.Join(home, "state"),
		"OPENCODE_CONFIG":                  cfgPath,
		"OPENCODE_SERVER_PASSWORD":         password,
		"OPENCODE_DISABLE_MODELS_FETCH":    "1",
		"OPENCODE_DISABLE_AUTOUPDATE":      "1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD":    "1",
		"OPENCODE_DISABLE_SHARE":           "1",
		"OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
		"OPENCODE_DISABLE_CLAUDE_CODE":     "1",
		"OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
		"OPENCODE_DISABLE_PROJECT_CONFIG":  "1",
		"OPENCODE_DISABLE_EMBEDDED_WEB_UI": "1",
		apiKeyEnv:                          key.apiKey,
		baseURLEnv:                         key.baseURL,
		"npm_config_registry":              registryFor(key.baseURL),
	}
	if key.env != "" {
		var extra map[string]string
		_ = json.Unmarshal([]byte(key.env), &extra)
		for k, v := range extra {
			if _, fixed := env[k]; !fixed {
				env[k] = v
			}
		}
	}
	list := make([]string, 0, len(env))
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	return list
}

// registryFor points npm at the provider's host, so the plugin lookups
// OpenCode makes at start reach no other host (and fail fast there).
func registryFor(baseURL string) string {
	if i := strings.Index(baseURL, "://"); i >= 0 {
		if j := strings.IndexByte(baseURL[i+3:], '/'); j >= 0 {
			return baseURL[:i+3+j] + "/"
		}
		return strings.TrimSuffix(baseURL, "/") + "/"
	}
	return "http://127.0.0.1:9/"
}

func (a *adapter) spawn(ctx context.Context, bin, home, cfgPath string, key serverKey, port int) (*server, error) {
	for _, d := range homeDirs {
		if err := os.MkdirAll(filepath.Join(home, d), 0o700); err != nil {
			return nil, fmt.Errorf("opencode: %w", err)
		}
	}
	s := newServer(key)
	s.http = &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true}}
	// The server outlives the start request: stop() ends it, not ctx.
	cmd := exec.CommandContext(context.WithoutCancel(ctx), bin, "serve", "--hostname", "127.0.0.1", "--port", fmt.Sprint(port))
	cmd.Dir = filepath.Join(home, "work")
	cmd.Env = a.environ(bin, home, cfgPath, key, s.password)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = s.stderr
	start := time.Now()
	tree, err := agent.StartTree(cmd)
	if err != nil {
		return nil, fmt.Errorf("opencode: start %s: %w", bin, err)
	}
	s.tree = tree
	urlc := s.scanListening(stdout)
	go func() {
		err := tree.Wait()
		s.exit = exitInfo(err, s.stderr.String())
		close(s.done)
	}()
	return a.ready(ctx, s, urlc, start)
}

// homeDirs are the directories of a server's home: HOME, the XDG
// directories and its working directory.
var homeDirs = []string{"home", "config", "data", "cache", "state", "work"}

// newServer is a server for key with a fresh password, not started yet.
func newServer(key serverKey) *server {
	var pw [16]byte
	_, _ = rand.Read(pw[:])
	return &server{key: key, password: hex.EncodeToString(pw[:]), done: make(chan struct{}), stderr: agent.NewTailBuffer(stderrTail)}
}

// scanListening copies the server's stdout to its output tail and sends
// the URL of its "listening on" line, once.
func (s *server) scanListening(stdout io.Reader) <-chan string {
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			_, _ = s.stderr.Write([]byte(line + "\n"))
			if m := listenRe().FindStringSubmatch(line); m != nil && !sent {
				urlc <- m[1]
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	return urlc
}

// ready waits for the started server s to say where it listens (urlc) and
// to answer its health check; a server that does not is stopped.
func (a *adapter) ready(ctx context.Context, s *server, urlc <-chan string, start time.Time) (*server, error) {
	fail := func(err error) (*server, error) {
		s.stop(a.opts.CloseGrace)
		return nil, err
	}
	select {
	case u := <-urlc:
		s.url = u
	case <-s.done:
		return nil, fmt.Errorf("opencode: the server exited before listening: %s%s", s.exit.Message, tailSuffix(s.stderr))
	case <-ctx.Done():
		return fail(fmt.Errorf("opencode: the server did not start: %w%s", ctx.Err(), tailSuffix(s.stderr)))
	}
	// Health check: the listening line comes before routes are ready.
	for {
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var health struct {
			Healthy bool `json:"healthy"`
		}
		err := s.call(hctx, http.MethodGet, "/global/health", "", nil, &health)
		cancel()
		if err == nil && health.Healthy {
			break
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("opencode: the server exited: %s%s", s.exit.Message, tailSuffix(s.stderr))
		case <-ctx.Done():
			return fail(fmt.Errorf("opencode: the server is not healthy (%w): %w%s", err, ctx.Err(), tailSuffix(s.stderr)))
		case <-time.After(50 * time.Millisecond):
		}
	}
	a.logStart(time.Since(start))
	return s, nil
}

// tailSuffix is ": " and the end of a server's output, or "".
func tailSuffix(b *agent.TailBuffer) string {
	if t := b.Summary(); t != "" {
		return ": " + t
	}
	return ""
}

// call makes one request to the server's API; dir selects the project
// instance (the session's working directory).
func (s *server) call(ctx context.Context, method, path, dir string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, rd)
	if err != nil {
		return err
	}
	s.auth(req, dir)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("opencode: %s %s: %s: %s", method, path, resp.Status, agent.Clip(string(b), 500))
	}
	if out != nil && len(bytes.TrimSpace(b)) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("opencode: %s %s: %w", method, path, err)
		}
	}
	return nil
}

func (s *server) auth(req *http.Request, dir string) {
	req.SetBasicAuth("opencode", s.password)
	if dir != "" {
		q := req.URL.Query()
		q.Set("directory", dir)
		req.URL.RawQuery = q.Encode()
	}
}

func (s *server) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// stop ends the server's process tree: SIGTERM, then SIGKILL after grace.
func (s *server) stop(grace time.Duration) {
	if s.proc == nil && s.tree == nil {
		return
	}
	_ = s.signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(grace):
		_ = s.signal(syscall.SIGKILL)
		select {
		case <-s.done:
		case <-time.After(grace):
		}
	}
	// Children that outlived the leader.
	_ = s.signal(syscall.SIGKILL)
	if t, ok := s.http.Transport.(*http.Transport); ok {
		t.CloseIdleConnections() // a sandboxed server's relays
	}
}

// signal sends sig to the server's process tree: under its supervisor on
// the host, or in its sandbox.
func (s *server) signal(sig syscall.Signal) error {
	if s.proc != nil {
		if sig == syscall.SIGKILL {
			return s.proc.Kill()
		}
		return s.proc.Terminate()
	}
	return s.tree.Signal(sig)
}

// exitInfo describes how the process ended.
func exitInfo(err error, tail string) event.SessionEnded {
	end := event.SessionEnded{Reason: event.EndError, StderrTail: tail}
	code := 0
	var ee *exec.ExitError
	switch {
	case err == nil:
		end.Message = "the opencode server exited"
	case errors.As(err, &ee):
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
			end.Message = fmt.Sprintf("the opencode server was killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
		} else {
			end.Message = fmt.Sprintf("the opencode server exited with code %d", code)
		}
	default:
		end.Message = "the opencode server failed: " + err.Error()
		code = -1
	}
	end.ExitCode = &code
	return end
}

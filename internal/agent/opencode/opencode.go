package opencode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/agent"
)

// Name is the adapter's registry name.
const Name = "opencode"

// Defaults of Options.
const (
	DefaultModel            = "gpt-4.1"
	DefaultInterruptTimeout = 5 * time.Second
	DefaultCloseGrace       = 2 * time.Second
	DefaultMaxRetries       = 2
	DefaultMaxEvent         = 32 << 20
	stderrTail              = 8 << 10

	providerID = "agentbox"
	apiKeyEnv  = "AGENTBOX_OPENCODE_API_KEY"
	baseURLEnv = "AGENTBOX_OPENCODE_BASE_URL"
)

// Options configure the adapter. The composition root fills them in.
type Options struct {
	// Binary finds the CLI: its path and version, or an error when it is
	// not installed (e.g. install.Lookup("opencode")). Nil means looking
	// up "opencode" in PATH.
	Binary func() (path, version string, err error)
	// Home is the adapter's own directory: OpenCode's HOME, XDG config,
	// data, cache and state directories and the generated configs live
	// under it. Empty means a temporary directory made once per adapter.
	Home string
	// BaseURL and APIKey are the daemon's defaults for the OpenAI-compatible
	// provider (the base URL ends in /v1); a session's Env OPENAI_BASE_URL
	// and OPENAI_API_KEY override them.
	BaseURL, APIKey string
	// Model is the model id used when a session names none (DefaultModel).
	Model string
	// Models are more model ids the provider declares, which a session
	// may select or switch to; OpenCode lists them itself
	// (GET /config/providers).
	Models []string
	// Raw keeps OpenCode's original event in each universal event.
	Raw bool
	// InterruptTimeout is how long an interrupt waits for the session to go
	// idle after the abort (DefaultInterruptTimeout).
	InterruptTimeout time.Duration
	// CloseGrace is how long stopping a server waits after SIGTERM before
	// SIGKILL (DefaultCloseGrace).
	CloseGrace time.Duration
	// MaxRetries is how many times OpenCode may retry a failed model
	// request in one turn before the adapter aborts the turn with an error
	// (DefaultMaxRetries; negative means 0). OpenCode alone retries
	// forever, with backoff.
	MaxRetries int
	// Logf, if set, gets a line per server start.
	Logf func(format string, args ...any)
}

// New returns the OpenCode adapter. It also implements io.Closer: Close
// stops every server it runs.
func New(opts Options) agent.Adapter {
	if opts.InterruptTimeout <= 0 {
		opts.InterruptTimeout = DefaultInterruptTimeout
	}
	if opts.CloseGrace <= 0 {
		opts.CloseGrace = DefaultCloseGrace
	}
	if opts.MaxRetries == 0 {
		opts.MaxRetries = DefaultMaxRetries
	} else if opts.MaxRetries < 0 {
		opts.MaxRetries = 0
	}
	if opts.Model == "" {
		opts.Model = DefaultModel
	}
	if opts.Binary == nil {
		opts.Binary = func() (string, string, error) {
			p, err := exec.LookPath("opencode")
			return p, "", err
		}
	}
	return &adapter{opts: opts, servers: map[serverKey]*server{}, starting: map[serverKey]*sync.Mutex{}, own: map[*server]struct{}{},
		home: &agent.Dir{Path: opts.Home, Prefix: "agentbox-opencode-"}}
}

type adapter struct {
	opts Options

	// home is the adapter's directory, made on first use.
	home *agent.Dir

	mu       sync.Mutex
	servers  map[serverKey]*server
	starting map[serverKey]*sync.Mutex // one start at a time per key
	own      map[*server]struct{}      // sandboxed sessions' servers, one each
	closed   bool

	tap func(cwd string, data []byte) // tests: sees every event's data
}

var _ agent.Adapter = (*adapter)(nil)

// capabilities: each flag is backed by a test with the real CLI
// (e2e_test.go) and by golden transcripts: text, deltas, usage
// (TestE2E/write), tool calls and file changes with diffs (TestE2E/write),
// command output and permissions (TestE2E/permission-*), interrupt
// (TestE2E/interrupt). Reasoning parts are mapped but not claimed until a
// test covers them; questions, plans and resume are not supported. Images
// and files reach OpenCode as its file parts (promptParts; the generated
// model declares attachments, else OpenCode answers them with an error
// text): the conformance suite's content subtest checks both at the
// model. Models and modes (its primary agents) are listed by the server
// and go with each prompt, so they switch between turns
// (TestE2EModelSwitch).
var capabilities = agent.Capabilities{
	Text: true, Deltas: true, ToolCalls: true, CommandOutput: true,
	FileChanges: true, Diffs: true, Permissions: true, Images: true, Files: true, Usage: true, Interrupt: true,
	ModelList: true, ModelSwitch: true, ModeSwitch: true, MCP: true,
}

// Info implements agent.Adapter.
func (a *adapter) Info(context.Context) agent.Info {
	path, version, err := a.opts.Binary()
	return agent.Info{Name: Name, Title: "OpenCode", Capabilities: capabilities}.Located(path, version, err,
		"the opencode CLI is not installed (run `agentbox agents install opencode`)")
}

func (a *adapter) logStart(d time.Duration) {
	if a.opts.Logf != nil {
		a.opts.Logf("opencode: server ready in %s", d.Round(time.Millisecond))
	}
}

// keyFor computes which server a session needs.
func (a *adapter) keyFor(cfg agent.Config) serverKey {
	k := serverKey{baseURL: a.opts.BaseURL, apiKey: a.opts.APIKey, model: cfg.Model}
	if k.model == "" {
		k.model = a.opts.Model
	}
	extra := map[string]string{}
	for n, v := range cfg.Env {
		switch n {
		case "OPENAI_BASE_URL":
			k.baseURL = v
		case "OPENAI_API_KEY":
			k.apiKey = v
		default:
			extra[n] = v
		}
	}
	if len(extra) > 0 {
		b, _ := json.Marshal(extra) // map keys are marshalled sorted
		k.env = string(b)
	}
	return k
}

// acquire returns a running server for key, starting one if needed, and
// counts the caller as one of its users.
func (a *adapter) acquire(ctx context.Context, key serverKey) (*server, error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, fmt.Errorf("opencode: the adapter is closed")
	}
	lock := a.starting[key]
	if lock == nil {
		lock = &sync.Mutex{}
		a.starting[key] = lock
	}
	a.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()

	a.mu.Lock()
	if s := a.servers[key]; s != nil && s.alive() {
		s.refs++
		a.mu.Unlock()
		return s, nil
	}
	delete(a.servers, key)
	a.mu.Unlock()

	s, err := a.startServer(ctx, key)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		go s.stop(a.opts.CloseGrace)
		return nil, fmt.Errorf("opencode: the adapter is closed")
	}
	s.refs = 1
	a.servers[key] = s
	return s, nil
}

// release drops one user of s; the last one stops it.
func (a *adapter) release(s *server) {
	a.mu.Lock()
	s.refs--
	last := s.refs <= 0
	if last && a.servers[s.key] == s {
		delete(a.servers, s.key)
	}
	if last {
		delete(a.own, s)
	}
	a.mu.Unlock()
	if last {
		s.stop(a.opts.CloseGrace)
	}
}

// Close stops every server of the adapter (daemon shutdown).
func (a *adapter) Close() error {
	a.mu.Lock()
	a.closed = true
	all := make([]*server, 0, len(a.servers))
	for _, s := range a.servers {
		all = append(all, s)
	}
	for s := range a.own {
		all = append(all, s)
	}
	a.servers, a.own = map[serverKey]*server{}, map[*server]struct{}{}
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Go(func() { s.stop(a.opts.CloseGrace) })
	}
	wg.Wait()
	return nil
}

// Permission modes → the rules added to each OpenCode session (the last
// matching rule wins, and session rules come after the config's).
var sessionRules = map[string][]rule{
	"":             {{"bash", "*", "ask"}, {"edit", "*", "ask"}},
	"default":      {{"bash", "*", "ask"}, {"edit", "*", "ask"}},
	"accept_edits": {{"bash", "*", "ask"}, {"edit", "*", "allow"}},
	"bypass":       {{"*", "*", "allow"}},
	"plan":         {{"bash", "*", "deny"}, {"edit", "*", "deny"}},
}

type rule struct {
	Permission string `json:"permission"`
	Pattern    string `json:"pattern"`
	Action     string `json:"action"`
}

// Start implements agent.Adapter: it gets (or starts) the server for the
// session's provider (a sandboxed session: a server of its own inside its
// sandbox, sandboxed.go), subscribes to its events and creates an OpenCode
// session in the session's directory.
func (a *adapter) Start(ctx context.Context, cfg agent.Config, host agent.Host) (agent.Session, error) {
	if !filepath.IsAbs(cfg.Cwd) {
		return nil, fmt.Errorf("opencode: the working directory %q is not an absolute path", cfg.Cwd)
	}
	if fi, err := os.Stat(cfg.Cwd); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("opencode: the working directory %q is not a directory", cfg.Cwd)
	}
	rules, ok := sessionRules[cfg.PermissionMode]
	if !ok {
		return nil, fmt.Errorf("opencode: unknown permission mode %q", cfg.PermissionMode)
	}
	if cfg.NativeSessionID != "" {
		return nil, fmt.Errorf("opencode: resuming a session is not supported")
	}
	if cfg.Sandbox != nil {
		return a.startOwn(ctx, cfg, host, rules)
	}
	key, err := withMCP(a.keyFor(cfg), cfg.MCPServers)
	if err != nil {
		return nil, err
	}
	if key.baseURL == "" {
		return nil, fmt.Errorf("opencode: no provider base URL (set the daemon's default or the session's OPENAI_BASE_URL)")
	}
	srv, err := a.acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	s, err := startSession(ctx, a, srv, cfg, host, rules)
	if err != nil {
		a.release(srv)
		return nil, err
	}
	return s, nil
}

package codex

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/agent"
)

// Name is the adapter's registry name.
const Name = "codex"

// Defaults of Options.
const (
	DefaultMaxLine          = 32 << 20
	DefaultStartTimeout     = 30 * time.Second
	DefaultInterruptTimeout = 5 * time.Second
	DefaultCloseGrace       = 2 * time.Second
	// DefaultBaseURL is the provider's base URL when neither the daemon nor
	// the session sets one.
	DefaultBaseURL = "https://api.openai.com/v1"

	stderrTail   = 8 << 10
	writeTimeout = 30 * time.Second
	drainWait    = 2 * time.Second
	// providerID is the model provider agentbox defines in config.toml.
	providerID = "agentbox"
	// keyEnv is the variable the provider reads its API key from.
	keyEnv = "OPENAI_API_KEY"
)

// Session environment variables that select the provider.
const (
	EnvBaseURL = "OPENAI_BASE_URL"
	EnvAPIKey  = "OPENAI_API_KEY"
)

// Options configure the adapter. The composition root fills them in.
type Options struct {
	// Binary finds the native CLI: its path and version, or an error when
	// it is not installed (install.Lookup("codex")). Nil means "codex" in
	// PATH.
	Binary func() (path, version string, err error)
	// Home is CODEX_HOME: config.toml (generated) and the threads'
	// rollouts, which resume needs. One per daemon. It must not be under
	// /tmp (Codex then refuses to set up its sandbox helper). Empty means
	// a directory made once per adapter under /var/tmp.
	Home string
	// BaseURL and APIKey are the daemon's defaults for the OpenAI-compatible
	// provider (a Responses API base URL ending in /v1); a session's Env
	// OPENAI_BASE_URL / OPENAI_API_KEY override them.
	BaseURL, APIKey string
	// Model is the default model written into config.toml (empty: Codex's
	// own default). A session's Config.Model overrides it.
	Model string
	// Retries, when set, is the provider's request_max_retries (nil:
	// Codex's default, which retries an upstream 5xx for about 25 s).
	Retries *int
	// StreamRetries, when set, is the provider's stream_max_retries: how
	// often a stream that broke off is tried again (nil: Codex's default).
	StreamRetries *int
	// Raw keeps the server's original message in each event.
	Raw bool
	// MaxLine bounds one line from the server (DefaultMaxLine).
	MaxLine int
	// StartTimeout bounds starting the server and a thread.
	StartTimeout time.Duration
	// InterruptTimeout is how long an interrupt waits for the turn to end.
	InterruptTimeout time.Duration
	// CloseGrace is how long stopping the server waits after closing its
	// stdin, and again after SIGTERM.
	CloseGrace time.Duration
}

// New returns the Codex adapter.
func New(opts Options) agent.Adapter {
	if opts.MaxLine <= 0 {
		opts.MaxLine = DefaultMaxLine
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.InterruptTimeout <= 0 {
		opts.InterruptTimeout = DefaultInterruptTimeout
	}
	if opts.CloseGrace <= 0 {
		opts.CloseGrace = DefaultCloseGrace
	}
	if opts.Binary == nil {
		opts.Binary = func() (string, string, error) {
			p, err := exec.LookPath("codex")
			return p, "", err
		}
	}
	return &adapter{opts: opts, servers: map[string]*serverRef{}}
}

type adapter struct {
	opts Options

	homeOnce sync.Once
	home     string
	homeErr  error

	mu      sync.Mutex
	servers map[string]*serverRef // by API key
}

// serverRef counts a server's sessions; the last one to close stops it.
type serverRef struct {
	srv   *server
	users int
}

var _ agent.Adapter = (*adapter)(nil)

// capabilities: each flag is backed by the goldens (mapper_test.go) and
// the end-to-end tests with the real CLI (e2e_test.go): text, deltas,
// usage, file changes and diffs (TestE2EWriteFile), command output and
// permissions (TestE2EPermission), resume (TestE2EResume), interrupt
// (TestE2EInterrupt). Reasoning, plans and MCP/web-search items are mapped
// (goldens) but not produced by the fake LLM through the real CLI, so
// Reasoning and Plans are claimed on the goldens only; questions and
// images are not supported.
var capabilities = agent.Capabilities{
	Text: true, Deltas: true, Reasoning: true, ToolCalls: true,
	CommandOutput: true, FileChanges: true, Diffs: true,
	Permissions: true, Plans: true, Usage: true, Resume: true, Interrupt: true,
}

// Info implements agent.Adapter.
func (a *adapter) Info(context.Context) agent.Info {
	path, version, err := a.opts.Binary()
	info := agent.Info{Name: Name, Title: "Codex", Capabilities: capabilities}.Located(path, version, err,
		"the codex CLI is not installed (run `agentbox agents install codex`)")
	if info.Installed && underTemp(a.opts.Home) {
		// Codex refuses to create its sandbox helper under the temp dir,
		// and its shell tool then fails inside every turn.
		info.Available = false
		info.Reason = fmt.Sprintf("codex's home %s is under the temp dir %s, where codex cannot create its sandbox helper: run the daemon with a --data-dir outside it", a.opts.Home, os.TempDir())
	}
	return info
}

// underTemp reports whether dir is inside the system temp dir.
func underTemp(dir string) bool {
	if dir == "" {
		return false
	}
	tmp, err := filepath.EvalSymlinks(os.TempDir())
	if err != nil {
		tmp = os.TempDir()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	rel, err := filepath.Rel(tmp, abs)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// policy is how a permission mode maps onto Codex's thread settings.
type policy struct {
	approval string // approvalPolicy
	sandbox  string // sandbox mode
	// autoAcceptEdits answers file-change approvals without asking.
	autoAcceptEdits bool
}

// policies maps agentbox permission modes. "untrusted" is the policy under
// which Codex asks both for commands and for file changes (verified with
// 0.171.0: "on-request" runs both inside the workspace sandbox without
// asking). Codex has no policy that asks for commands only, so
// accept_edits is "untrusted" with file-change approvals accepted by the
// adapter.
var policies = map[string]policy{
	"":             {approval: "untrusted", sandbox: "workspace-write"},
	"default":      {approval: "untrusted", sandbox: "workspace-write"},
	"accept_edits": {approval: "untrusted", sandbox: "workspace-write", autoAcceptEdits: true},
	"bypass":       {approval: "never", sandbox: "workspace-write"},
	"plan":         {approval: "never", sandbox: "read-only"},
}

// homeDir returns CODEX_HOME with a fresh config.toml.
func (a *adapter) homeDir() (string, error) {
	a.homeOnce.Do(func() {
		home := a.opts.Home
		if home == "" {
			base := "/var/tmp"
			if fi, err := os.Stat(base); err != nil || !fi.IsDir() {
				base = ""
			}
			home, a.homeErr = os.MkdirTemp(base, "agentbox-codex-home-")
			if a.homeErr != nil {
				return
			}
		}
		if a.homeErr = os.MkdirAll(home, 0o700); a.homeErr != nil {
			return
		}
		a.home = home
		a.homeErr = os.WriteFile(filepath.Join(home, "config.toml"), []byte(configTOML(a.opts)), 0o600)
	})
	return a.home, a.homeErr
}

// configTOML is the generated config: the agentbox provider (Responses
// API, key from OPENAI_API_KEY), no plugins (they look up github.com and
// chatgpt.com), no analytics.
func configTOML(opts Options) string {
	base := opts.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	var b strings.Builder
	b.WriteString("# Generated by agentbox; rewritten when the daemon starts.\n")
	if opts.Model != "" {
		fmt.Fprintf(&b, "model = %s\n", strconv.Quote(opts.Model))
	}
	fmt.Fprintf(&b, "model_provider = %q\n", providerID)
	b.WriteString("\n[features]\nplugins = false\n")
	b.WriteString("\n[analytics]\nenabled = false\n")
	fmt.Fprintf(&b, "\n[model_providers.%s]\nname = %q\nbase_url = %s\nenv_key = %q\nwire_api = \"responses\"\n",
		providerID, providerID, strconv.Quote(base), keyEnv)
	if opts.Retries != nil {
		fmt.Fprintf(&b, "request_max_retries = %d\n", *opts.Retries)
	}
	if opts.StreamRetries != nil {
		fmt.Fprintf(&b, "stream_max_retries = %d\n", *opts.StreamRetries)
	}
	return b.String()
}

// helperEnv is added to the server's environment by tests only.
var helperEnv []string

// command is how the server process is started.
type command struct {
	path string
	args []string
	env  []string
	dir  string
}

// serverCommand builds the app-server's command line and environment, from
// scratch: PATH, HOME and CODEX_HOME, and the API key.
func serverCommand(bin, home, key string) command {
	env := map[string]string{
		"PATH":       filepath.Dir(bin) + string(os.PathListSeparator) + "/usr/local/bin:/usr/bin:/bin",
		"HOME":       home,
		"CODEX_HOME": home,
	}
	if key != "" {
		env[keyEnv] = key
	}
	list := make([]string, 0, len(env)+len(helperEnv))
	list = append(list, helperEnv...)
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	return command{path: bin, args: []string{"app-server"}, env: list, dir: home}
}

// acquire returns a running server for key, starting one if needed, and
// counts the caller as a user.
func (a *adapter) acquire(ctx context.Context, bin, home, key string) (*server, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ref := a.servers[key]; ref != nil {
		select {
		case <-ref.srv.done:
			delete(a.servers, key)
		default:
			ref.users++
			return ref.srv, nil
		}
	}
	srv, err := startServer(ctx, a.opts, serverCommand(bin, home, key), key)
	if err != nil {
		return nil, err
	}
	a.servers[key] = &serverRef{srv: srv, users: 1}
	return srv, nil
}

// release drops a user; the last one stops the server.
func (a *adapter) release(ctx context.Context, srv *server) {
	a.mu.Lock()
	ref := a.servers[srv.key]
	last := false
	if ref != nil && ref.srv == srv {
		ref.users--
		if ref.users <= 0 {
			delete(a.servers, srv.key)
			last = true
		}
	}
	a.mu.Unlock()
	if last {
		srv.stop(ctx, a.opts.CloseGrace)
	}
}

// Start implements agent.Adapter: it starts (or resumes) a thread on the
// shared server.
func (a *adapter) Start(ctx context.Context, cfg agent.Config, host agent.Host) (agent.Session, error) {
	if cfg.Sandbox != nil {
		// Fail closed rather than run the agent outside the sandbox the
		// session asked for.
		return nil, fmt.Errorf("codex: %w: one app-server process serves all of its sessions; use the codex-acp agent for sandboxed sessions", agent.ErrNoSandbox)
	}
	if !filepath.IsAbs(cfg.Cwd) {
		return nil, fmt.Errorf("codex: the working directory %q is not an absolute path", cfg.Cwd)
	}
	if fi, err := os.Stat(cfg.Cwd); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("codex: the working directory %q is not a directory", cfg.Cwd)
	}
	pol, ok := policies[cfg.PermissionMode]
	if !ok {
		return nil, fmt.Errorf("codex: unknown permission mode %q", cfg.PermissionMode)
	}
	bin, _, err := a.opts.Binary()
	if err != nil || bin == "" {
		if err == nil {
			err = errors.New("no path")
		}
		return nil, fmt.Errorf("codex: the CLI is not installed (run `agentbox agents install codex`): %w", err)
	}
	home, err := a.homeDir()
	if err != nil {
		return nil, fmt.Errorf("codex: CODEX_HOME: %w", err)
	}
	key := a.opts.APIKey
	if k, ok := cfg.Env[EnvAPIKey]; ok {
		key = k
	}
	srv, err := a.acquire(ctx, bin, home, key)
	if err != nil {
		return nil, err
	}
	s, err := startThread(ctx, a, srv, cfg, host, pol)
	if err != nil {
		a.release(context.Background(), srv)
		return nil, err
	}
	return s, nil
}

// threadParams are the thread/start and thread/resume parameters for cfg.
func threadParams(cfg agent.Config, pol policy) map[string]any {
	p := map[string]any{
		"cwd":            cfg.Cwd,
		"approvalPolicy": pol.approval,
		"sandbox":        pol.sandbox,
	}
	if cfg.Model != "" {
		p["model"] = cfg.Model
	}
	if u := cfg.Env[EnvBaseURL]; u != "" {
		p["config"] = map[string]any{"model_providers." + providerID + ".base_url": u}
	}
	if cfg.NativeSessionID != "" {
		p["threadId"] = cfg.NativeSessionID
	}
	return p
}

package codex

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
// Reasoning and Plans are claimed on the goldens only; questions are not
// supported. Images reach codex as its image inputs (userInput), files as
// their text (agent.FileText: codex has no file input): the conformance
// suite's content subtest checks both at the model. The model list is
// model/list's; the model is switched between turns by sending it with the
// next turn/start, which keeps it for the thread (TestE2EModelSwitch).
var capabilities = agent.Capabilities{
	Text: true, Deltas: true, Reasoning: true, ToolCalls: true,
	CommandOutput: true, FileChanges: true, Diffs: true,
	Permissions: true, Images: true, Files: true, Plans: true, Usage: true, Resume: true, Interrupt: true,
	ModelList: true, ModelSwitch: true, MCP: true,
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
		a.mu.Lock() // RemoveState reads it
		a.home = home
		a.mu.Unlock()
		base := a.opts.BaseURL
		if base == "" {
			base = DefaultBaseURL
		}
		a.homeErr = os.WriteFile(filepath.Join(home, "config.toml"), []byte(configTOML(a.opts, base)), 0o600)
	})
	return a.home, a.homeErr
}

// sandboxedDir is the directory below Options.Home that holds the homes of
// sandboxed sessions, one each (see sessionHome).
const sandboxedDir = "sandboxed"

// sessionHome is the CODEX_HOME of sandboxed session id: a home of its own
// (Home/sandboxed/id), so that its agent sees no other session's threads
// and a resumed session finds its own again. Its config.toml is rewritten
// each time, confined to Home (the agent may have left a symbolic link in
// its home), and names no base URL: the server is told the session's
// route on its command line (sandboxArgs).
func (a *adapter) sessionHome(id string) (string, error) {
	if !agent.PlainName(id) {
		return "", fmt.Errorf("codex: %q is not a session id", id)
	}
	home, err := a.homeDir()
	if err != nil {
		return "", err
	}
	root, err := os.OpenRoot(home)
	if err != nil {
		return "", err
	}
	defer root.Close()
	rel := filepath.Join(sandboxedDir, id)
	if err := root.MkdirAll(rel, 0o700); err != nil {
		return "", err
	}
	if err := root.WriteFile(filepath.Join(rel, "config.toml"), []byte(configTOML(a.opts, "")), 0o600); err != nil {
		return "", err
	}
	return filepath.Join(home, rel), nil
}

// RemoveState implements agent.SandboxNeeder: the home of a sandboxed
// session, where sessionHome makes it; nothing is made or written.
func (a *adapter) RemoveState(sessionID string) error {
	home := a.opts.Home
	if home == "" {
		a.mu.Lock() // homeOnce has run when a.home is set
		home = a.home
		a.mu.Unlock()
	}
	if home != "" {
		home = filepath.Join(home, sandboxedDir)
	}
	return agent.RemoveSessionDir(home, sessionID)
}

// Providers implements agent.ProviderUser: the OpenAI-compatible API, as
// the session's Env or the adapter's defaults configure it. A sandboxed
// session's server is configured from it (in a sandbox: the route and the
// placeholder); the shared server's config.toml takes the defaults.
func (a *adapter) Providers(cfg agent.Config) []agent.Provider {
	return []agent.Provider{a.provider(cfg)}
}

func (a *adapter) provider(cfg agent.Config) agent.Provider {
	p := agent.OpenAI(cfg.Env, a.opts.BaseURL, a.opts.APIKey)
	p.DefaultURL = DefaultBaseURL
	return p
}

// SandboxPaths implements agent.SandboxNeeder: the installed CLI (read)
// and the session's own CODEX_HOME (write).
func (a *adapter) SandboxPaths(cfg agent.Config) (read, write []string) {
	if home, err := a.sessionHome(cfg.SessionID); err == nil {
		write = append(write, home)
	}
	if bin, _, err := a.opts.Binary(); err == nil && bin != "" {
		read = append(read, agent.InstallRoot(bin))
	}
	return read, write
}

// configTOML is the generated config: the agentbox provider (Responses
// API, key from OPENAI_API_KEY, base URL base unless ""), no plugins
// (they look up github.com and chatgpt.com), no analytics.
func configTOML(opts Options, base string) string {
	var b strings.Builder
	b.WriteString("# Generated by agentbox; rewritten when the daemon starts.\n")
	if opts.Model != "" {
		fmt.Fprintf(&b, "model = %s\n", strconv.Quote(opts.Model))
	}
	fmt.Fprintf(&b, "model_provider = %q\n", providerID)
	b.WriteString("\n[features]\nplugins = false\n")
	b.WriteString("\n[analytics]\nenabled = false\n")
	fmt.Fprintf(&b, "\n[model_providers.%s]\nname = %q\n", providerID, providerID)
	if base != "" {
		fmt.Fprintf(&b, "base_url = %s\n", strconv.Quote(base))
	}
	fmt.Fprintf(&b, "env_key = %q\nwire_api = \"responses\"\n", keyEnv)
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
	return ownCommand(bin, home, key, nil, nil)
}

// ownCommand is serverCommand with more variables (the session's, for a
// server of its own; PATH, the homes and the key win over them) and
// arguments.
func ownCommand(bin, home, key string, extra map[string]string, args []string) command {
	env := maps.Clone(extra)
	if env == nil {
		env = map[string]string{}
	}
	env["PATH"] = filepath.Dir(bin) + string(os.PathListSeparator) + "/usr/local/bin:/usr/bin:/bin"
	env["HOME"], env["CODEX_HOME"] = home, home
	if key != "" {
		env[keyEnv] = key
	}
	list := make([]string, 0, len(env)+len(helperEnv))
	list = append(list, helperEnv...)
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	return command{path: bin, args: append([]string{"app-server"}, args...), env: list, dir: home}
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
	srv, err := startServer(ctx, a.opts, serverCommand(bin, home, key), key, nil)
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
	if cfg.Sandbox != nil {
		return a.startOwn(ctx, cfg, host, bin, sandboxed(cfg.PermissionMode, pol))
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

// sandboxed is pol for a session in agentbox's sandbox. Codex's own
// sandbox (bubblewrap on Linux) needs user and mount namespaces, which
// agentbox's sandbox does not grant the processes inside it: every command
// would fail. So the thread runs with "danger-full-access" there, and
// agentbox's sandbox is the boundary (its filesystem, network and resource
// policy apply to every command). Codex has no read-only mode without its
// own sandbox, so plan mode asks for every command and file change that is
// not known to be read-only ("untrusted") instead of refusing them.
func sandboxed(mode string, pol policy) policy {
	pol.sandbox = "danger-full-access"
	if mode == "plan" {
		pol.approval = "untrusted"
	}
	return pol
}

// startOwn starts a sandboxed session: an app-server of its own inside the
// session's sandbox, with a CODEX_HOME of its own, and its thread on it.
// The server's environment holds the session's Env (in a sandbox: the
// route and the placeholder of the key, and any placeholders the policy
// declares); the provider's base URL is given on its command line, from
// the session's provider (Providers), so that no file of the home names
// the upstream or holds a key. The server lives as long as the session.
func (a *adapter) startOwn(ctx context.Context, cfg agent.Config, host agent.Host, bin string, pol policy) (agent.Session, error) {
	home, err := a.sessionHome(cfg.SessionID)
	if err != nil {
		return nil, fmt.Errorf("codex: CODEX_HOME: %w", err)
	}
	p := a.provider(cfg)
	args := []string{"-c", "model_providers." + providerID + ".base_url=" + strconv.Quote(p.Upstream())}
	srv, err := startServer(ctx, a.opts, ownCommand(bin, home, p.Key(), cfg.Env, args), p.Key(), cfg.Sandbox)
	if err != nil {
		return nil, err
	}
	s, err := startThread(ctx, a, srv, cfg, host, pol)
	if err != nil {
		srv.stop(context.WithoutCancel(ctx), a.opts.CloseGrace)
		return nil, err
	}
	s.own = true
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
	conf := map[string]any{}
	if u := cfg.Env[EnvBaseURL]; u != "" {
		conf["model_providers."+providerID+".base_url"] = u
	}
	maps.Copy(conf, mcpConfig(cfg.MCPServers, cfg.PermissionMode))
	// The workspace is the agent's (a hostile repository's): its
	// .codex/config.toml must not configure the thread (e.g. start the MCP
	// servers it names). Codex reads a project's config layer only when
	// the project is trusted; the approval policy above is explicit.
	conf["projects"] = map[string]any{cfg.Cwd: map[string]any{"trust_level": "untrusted"}}
	p["config"] = conf
	if cfg.NativeSessionID != "" {
		p["threadId"] = cfg.NativeSessionID
	}
	return p
}

// Package daemon is the composition root: it builds every subsystem (store,
// agent registry, session engine, HTTP API, metrics), owns their start-up and
// shutdown order, and is imported only by cmd/agentbox and the embeddable
// server package. Nothing below it may import it.
package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/acpserver"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/acp"
	"github.com/agentbox/agentbox/internal/agent/amp"
	"github.com/agentbox/agentbox/internal/agent/claude"
	"github.com/agentbox/agentbox/internal/agent/codex"
	"github.com/agentbox/agentbox/internal/agent/install"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/agent/opencode"
	"github.com/agentbox/agentbox/internal/agent/pi"
	"github.com/agentbox/agentbox/internal/audit"
	"github.com/agentbox/agentbox/internal/credential"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/errkind"
	"github.com/agentbox/agentbox/internal/execution"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/inspector"
	"github.com/agentbox/agentbox/internal/logging"
	"github.com/agentbox/agentbox/internal/metrics"
	"github.com/agentbox/agentbox/internal/procs"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/relay"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/boundary"
	"github.com/agentbox/agentbox/internal/sandbox/cgroup"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
	"github.com/agentbox/agentbox/internal/sandbox/gvisor"
	"github.com/agentbox/agentbox/internal/sandbox/microvm"
	"github.com/agentbox/agentbox/internal/sandbox/owner"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
	"github.com/agentbox/agentbox/internal/sandbox/probe"
	"github.com/agentbox/agentbox/internal/sandbox/process"
	"github.com/agentbox/agentbox/internal/snapshot"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlite"
	"github.com/agentbox/agentbox/internal/tracing"
	"github.com/agentbox/agentbox/internal/version"
)

// Defaults.
const (
	DefaultListen          = "127.0.0.1:7777"
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultMaxPendingRequests bounds the requests waiting per session.
	DefaultMaxPendingRequests = engine.DefaultMaxPendingRequests
	// DefaultMaxLiveSessions bounds the sessions with a live agent
	// process: agents are large (a Node agent is ~200 MB), and a daemon
	// must never pile them up without bound.
	DefaultMaxLiveSessions = 64
	// DefaultIdleTimeout is how long an agent process may sit idle
	// before it is stopped (its session resumes on its next message).
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultStartTimeout bounds starting a session's agent.
	DefaultStartTimeout = engine.DefaultStartTimeout
	// DefaultSandboxSpares is how many sandbox inits the process runtime
	// starts ahead of need (process.Options.Spares).
	DefaultSandboxSpares = 1
)

// Config is the daemon's configuration; the zero value of each field means
// its documented default.
type Config struct {
	// Listen is host:port, or unix:/path/to.sock. Default DefaultListen.
	Listen string
	// DataDir holds the database and session workspaces. Default: the
	// directory of sqlite.DefaultPath().
	DataDir string
	// DBPath overrides the database file. Default DataDir/agentbox.db.
	DBPath string
	// Store selects the store: empty (or "sqlite") is SQLite at DBPath;
	// a PostgreSQL DSN (postgres://...) is the PostgreSQL store, which
	// several daemons may share (storeopen.go). Its password is never
	// logged.
	Store string
	// Advertise is the URL other daemons sharing the store reach this one
	// at, to forward the requests of the sessions it drives (see
	// docs/postgres.md); empty: none (they answer 409 for them). An
	// http or https URL with a host.
	Advertise string
	// LeaseTTL is how long a session's lease lasts unrenewed: how soon
	// another daemon takes over the sessions of one that died. Zero
	// means engine.DefaultLeaseTTL.
	LeaseTTL time.Duration
	// Token is the bearer token clients must send. Without one, the daemon
	// uses (making it if needed) the token in DATA_DIR/token, mode 0600,
	// which the CLI reads; a non-loopback Listen needs Token set. With
	// InsecureNoAuth there is no authentication at all.
	Token          string
	InsecureNoAuth bool
	// AllowedHosts are names (or name:port) a request's Host header may
	// give besides loopback addresses, localhost and the listener's own
	// address; "*" turns the Host check off (see httpapi.Config).
	AllowedHosts []string
	// CORSOrigins enables CORS for these origins ("*" for any); browser
	// requests from other origins are refused.
	CORSOrigins []string
	// PermissionTimeout denies unanswered permission requests.
	PermissionTimeout time.Duration
	// MaxPendingRequests bounds the permission requests and questions of
	// one session waiting at once; further ones are denied by the daemon
	// (default engine.DefaultMaxPendingRequests).
	MaxPendingRequests int
	// MaxLiveSessions bounds the sessions with a live agent process; a
	// create, resume or message past it answers 429 (default
	// DefaultMaxLiveSessions; negative: no cap).
	MaxLiveSessions int
	// IdleTimeout stops an agent process idle that long, keeping its
	// session resumable: the next message resumes it (default
	// DefaultIdleTimeout; negative: never).
	IdleTimeout time.Duration
	// StartTimeout bounds starting a session's agent, its sandbox
	// included (default engine.DefaultStartTimeout). Agents under gVisor
	// on its ptrace platform start several times slower than on the host.
	StartTimeout time.Duration
	// ShutdownTimeout bounds graceful shutdown; agents still running then
	// are killed.
	ShutdownTimeout time.Duration
	// Heartbeat is the SSE keep-alive interval.
	Heartbeat time.Duration
	// GovernProcs says the daemon is its process's only work, as in
	// agentbox serve: once its start is done it sizes the Go scheduler's
	// parallelism to its load (package procs: one P while the load fits
	// in one). A program that embeds the daemon keeps its own GOMAXPROCS.
	GovernProcs bool
	// SyncNormal trades the durability of the last commits on power loss
	// (never on a process crash) for throughput.
	SyncNormal bool
	Log        *slog.Logger
	// Agents, when set, replaces the built-in agent registry (tests).
	Agents *agent.Registry
	// AgentsFile adds agents by configuration (ACP agent binaries; see
	// agentsfile.go for the format). Empty: the built-in agents only.
	AgentsFile string
	// AgentModels are more models, by agent, that the built-in agents
	// whose provider configuration agentbox generates declare there (pi,
	// opencode, opencode-acp; ParseAgentModels reads serve
	// --agent-models). Unused when Agents is set.
	AgentModels map[string][]string
	// GlobalPolicy is the operator's sandbox policy file: every session's
	// and execution's policy is intersected with it and can never be
	// looser, and every session's working directory lies inside its
	// filesystem.workspace_roots (default DataDir/workspaces). Empty: the
	// built-in default-global-policy.yaml.
	GlobalPolicy string
	// SessionPolicy is the policy preset of sessions created without one;
	// empty runs those sessions' agents on the host.
	SessionPolicy string
	// Runtimes, when set, replaces the built-in isolation runtimes (tests).
	Runtimes *sandbox.Registry
	// SandboxSpares is how many sandbox inits the process runtime keeps
	// started ahead of need, at most process.MaxSpares (default
	// DefaultSandboxSpares; negative: none). Unused with Runtimes.
	SandboxSpares int
	// ExecPool is the number of warm sandboxes kept per execution policy
	// (0: none) and MaxProcesses the limit of concurrent executions and
	// processes (0: the default, 16).
	ExecPool     int
	MaxProcesses int
	// SecretsFile names the secrets the egress proxy adds to requests for
	// their hosts (see egress.go for the format); empty: none until some
	// are added through the API. Values are kept in memory only.
	SecretsFile string
	// NetworkAskTimeout bounds a per-connection network approval; then
	// the connection is denied (default DefaultNetworkAskTimeout).
	NetworkAskTimeout time.Duration
	// EgressCAFile adds PEM roots the proxy trusts for the TLS upstreams
	// of its model-API routes (an internal gateway, a test server).
	EgressCAFile string
	// Getenv reads the daemon's environment (secrets' value_env); nil
	// means os.LookupEnv.
	Getenv func(string) (string, bool)
	// KeepAgentHomes keeps a sandboxed session's agent home when the
	// session is purged (by default it goes with the session).
	KeepAgentHomes bool
	// OTLPEndpoint, when set, exports traces to this OTLP/HTTP base
	// endpoint (spans go to its /v1/traces), winning over
	// OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT; the other OTEL_* variables
	// apply (tracing.FromEnv, read through Getenv). Without either, no
	// traces are made.
	OTLPEndpoint string
	// Started is when the process started (cmd/agentbox sets it first
	// thing in main), the beginning of the start-up trace; zero: when New
	// was called.
	Started time.Time
	// Providers are the sandbox providers sessions may be placed on
	// (provider.go); nil or empty: every session runs on this host.
	Providers *provider.Registry
	// DefaultProvider is the provider of sessions created without one
	// (serve --provider); empty: this host.
	DefaultProvider string
	// ProviderOptions are each provider's Spec.Options, by name.
	ProviderOptions map[string]map[string]string
	// ProviderConfig is the file of serve --provider-config: the
	// providers to configure and their options (providers.go). Unused
	// when Providers is set.
	ProviderConfig string
	// ProviderBinary is the static agentbox binary uploaded to sandboxes;
	// empty: this daemon's own executable.
	ProviderBinary string
	// EgressSocket, when set, is the unix socket the host carries this
	// daemon's egress on: it is the inner daemon of a provider's sandbox
	// that has no network (provider.EgressCarrier). The daemon answers
	// the egress proxy's address inside (127.0.0.1:provider.EgressPort)
	// and hands each connection, unread, to the host's proxy there,
	// which decides it.
	EgressSocket string
	// Boundary, when set, declares the daemon's outer boundary: only
	// boundary.Container, set by a provider that runs this daemon as the
	// inner daemon of its container (serve --boundary container; no API
	// request can set it). The daemon then builds no sandbox of its own:
	// its one runtime (internal/sandbox/boundary) runs each process
	// directly in the container, under the policy the host mapped onto it,
	// refusing what neither enforces. It refuses to start unless it is in
	// such a boundary (not root, no capabilities, no privilege gain, a
	// read-only root).
	Boundary string
	// RelayLostAfter bounds reconnecting to an unreachable sandbox before
	// its session ends (default relay.DefaultLostAfter).
	RelayLostAfter time.Duration
	// ProviderIdlePause pauses the sandbox of a session on a provider
	// that pauses sandboxes once the session has been idle that long
	// (serve --provider-idle-pause; it is then not stopped after
	// IdleTimeout); its next message resumes it. Zero: off.
	ProviderIdlePause time.Duration
}

// Runtimes returns the isolation runtimes: process (namespaces, Landlock,
// seccomp, cgroups), gvisor (runsc) and microvm (probe only). Sandboxes
// reading outside their workspace never see dataDir. The process runtime
// keeps spares sandbox inits started ahead of need (0: none), so a cold
// sandbox skips the start of its init; Shutdown ends them (see
// internal/sandbox/process/spare_linux.go).
func Runtimes(dataDir string, spares int) *sandbox.Registry {
	r := sandbox.NewRegistry()
	r.Register(process.New(process.Options{HideDirs: []string{dataDir}, Spares: spares}))
	r.Register(gvisor.New(gvisor.Options{StateDir: filepath.Join(dataDir, "gvisor"), HideDirs: []string{dataDir}}))
	r.Register(microvm.New(microvm.Options{}))
	return r
}

// newEgress builds the egress proxy every sandbox with network mode proxy
// goes through, and the in-memory secrets it adds to requests.
func newEgress(cfg Config, aud *audit.Log, m *metrics.Metrics) (*egress.Server, *egress.Secrets, error) {
	secrets, err := loadSecrets(cfg.SecretsFile, cfg.Getenv)
	if err != nil {
		return nil, nil, err
	}
	roots, err := rootCAs(cfg.EgressCAFile)
	if err != nil {
		return nil, nil, err
	}
	eg, err := egress.New(egress.Options{
		Secrets: secrets, RootCAs: roots, Audit: aud.Egress, Closed: aud.Settle, Registerer: m,
		Log: cfg.Log.With("component", "egress"), MaxConnections: egressConnectionCeiling(),
	})
	if err != nil {
		return nil, nil, err
	}
	return eg, secrets, nil
}

// Daemon is a running agentbox daemon.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	st      store.Store
	mgr     *engine.Manager
	ex      *execution.Service
	audit   *audit.Log
	egress  *egress.Server
	secrets *egress.Secrets
	metrics *metrics.Metrics
	relay   *relay.Relay // nil without providers
	srv     *http.Server
	ln      net.Listener
	url     string
	// tokenFile is where the token is, when the daemon made or read it
	// there (no Token in the configuration).
	tokenFile string

	// handlerCtx is the base context of every HTTP request; cancelling it
	// ends long-lived SSE streams at shutdown.
	handlerCtx    context.Context
	cancelHandler context.CancelFunc
	shutdownOnce  sync.Once
	shutdownErr   error
	// reaped is closed when the start's reapDead is over.
	reaped chan struct{}
	// deathwatch is the daemon's deathwatch (see deathwatch_linux.go),
	// started once the daemon serves; nil when it makes no sandboxes.
	deathwatch *deathwatchGate
	// unguard removes the deathwatch's guard on records (nil without
	// one).
	unguard func()
	// resolver resolves executions' policies (execution.PolicyResolver),
	// built on first use, or by Serve once the daemon serves.
	resolver func() execution.Resolver
	// warm is what Serve starts after the first answer (the deathwatch,
	// the resolver, the host probe); Shutdown waits for it.
	warm sync.WaitGroup
	// answered is closed once the daemon answered its first request
	// (connState); the start's background work waits for it (settled).
	answered     chan struct{}
	answeredOnce sync.Once
	// stopRecover stops the start's recovery when a full disk deferred it
	// (see buildServices); nil otherwise.
	stopRecover func()
	// tracer exports trace spans; nil when tracing is not configured.
	tracer *tracing.Tracer
	// trace times the steps of the start (starttrace.go).
	trace *startTrace
}

// Agents returns the registry of the agents this daemon runs. dataDir holds
// their private homes; env is how the daemon reads its own environment (for
// the LLM providers' default base URLs and keys — the only variables of the
// daemon an agent ever sees); models are more models the agents of
// modelDeclarers declare (Config.AgentModels).
func Agents(dataDir string, env func(string) string, models map[string][]string) *agent.Registry {
	r := agent.NewRegistry()
	r.Register("mock", mock.New())
	r.Register(claude.Name, claude.New(claude.Options{
		Binary:  install.Binary(claude.Name),
		BaseURL: env("ANTHROPIC_BASE_URL"),
		APIKey:  env("ANTHROPIC_API_KEY"),
		HomeDir: filepath.Join(dataDir, "agents", claude.Name, "home"),
	}))
	r.Register(codex.Name, codex.New(codex.Options{
		Binary:  install.Binary(codex.Name),
		Home:    filepath.Join(dataDir, "agents", codex.Name, "home"),
		BaseURL: env("OPENAI_BASE_URL"),
		APIKey:  env("OPENAI_API_KEY"),
	}))
	r.Register(opencode.Name, opencode.New(opencode.Options{
		Binary:  install.Binary(opencode.Name),
		Home:    filepath.Join(dataDir, "agents", opencode.Name),
		BaseURL: env("OPENAI_BASE_URL"),
		APIKey:  env("OPENAI_API_KEY"),
		Models:  models[opencode.Name],
	}))
	r.Register(pi.Name, pi.New(pi.Options{
		Binary:  install.Binary(pi.Name),
		Home:    filepath.Join(dataDir, "agents", pi.Name),
		BaseURL: env("OPENAI_BASE_URL"),
		APIKey:  env("OPENAI_API_KEY"),
		Models:  models[pi.Name],
	}))
	for name, a := range acp.Agents(acp.Config{
		DataDir:          dataDir,
		AnthropicBaseURL: env("ANTHROPIC_BASE_URL"), AnthropicAPIKey: env("ANTHROPIC_API_KEY"),
		OpenAIBaseURL: env("OPENAI_BASE_URL"), OpenAIAPIKey: env("OPENAI_API_KEY"),
		GeminiBaseURL: env("GOOGLE_GEMINI_BASE_URL"), GeminiAPIKey: env("GEMINI_API_KEY"),
		// Gemini's default of 10 attempts with backoff holds a failing
		// turn for minutes; retrying is the client's call.
		GeminiMaxAttempts: 2,
		OpenCodeModels:    models[acp.NameOpenCode],
	}) {
		r.Register(name, a)
	}
	r.Register(amp.Name, amp.New())
	return r
}

// New opens the store, settles sessions a previous run left live, and binds
// the listener. Call Serve to handle requests. It is built of steps, each
// of which pushes how to undo what it opened onto a cleanup stack: when a
// step fails, everything the steps before it opened is closed again, in
// reverse order, and the step's error is the one returned.
func New(ctx context.Context, cfg Config) (*Daemon, error) {
	trace := newStartTrace(cfg.Started)
	trace.step("main")
	cfg, tokenFile, err := configure(cfg)
	if err != nil {
		return nil, err
	}
	trace.step("configure")
	d := &Daemon{cfg: cfg, log: cfg.Log, tokenFile: tokenFile, reaped: make(chan struct{}), answered: make(chan struct{}), trace: trace}
	var cu cleanup
	defer cu.run() // a no-op once released
	// The store opens on another goroutine from here, beside every step
	// that does not need it (tracing, policy, audit, egress, execution,
	// the API's routes): opening it is the longest step of a start. The
	// engine is the first to need it, and waits for it (awaitStore).
	awaitStore, err := d.openStore(ctx, &cu)
	if err != nil {
		return nil, err
	}
	if err := d.buildTracing(&cu); err != nil {
		return nil, err
	}
	trace.step("tracing")
	sb, err := d.buildSandboxing(&cu)
	if err != nil {
		return nil, err
	}
	if err := d.buildExecution(&cu, sb); err != nil {
		return nil, err
	}
	// The API's routes are built on another goroutine while the store
	// opens (about 0.4 ms of CPU: the operation table's handlers; the
	// validator's schemas load on first use), and neither needs the
	// other. The API gets the engine once it exists, before it serves
	// anything (lateEngine).
	eng := &lateEngine{}
	api := make(chan http.Handler, 1)
	go func() { api <- d.newHandler(eng) }()
	cu.add(func() { <-api })
	if err := d.awaitStore(awaitStore); err != nil {
		return nil, err
	}
	trace.step("store")
	if err := d.buildEngine(ctx, &cu, sb); err != nil {
		return nil, err
	}
	eng.Engine = d.mgr
	if err := d.guardDeathwatch(&cu); err != nil {
		return nil, err
	}
	h := <-api
	api <- h // for the cleanup's receive
	trace.step("api")
	if err := d.listen(ctx, &cu, h); err != nil {
		return nil, err
	}
	cu.release()
	// What dead agentbox processes left is removed in the background,
	// once the listener is up: the start never waits for another
	// process's reaping (the turn is host-wide) nor for the kills and
	// removals of a crash's leftovers, and nothing here needs them gone
	// first (a dead process's uid slots are free already, and every
	// artefact has a name of its own). Detached from ctx on purpose: it
	// is the daemon's, and Shutdown waits for it. It begins after the
	// first answer (settled), or at once when the daemon shuts down first.
	go func() {
		defer close(d.reaped)
		d.settled()
		reapDead(cfg.Log)
	}()
	return d, nil
}

// configure fills cfg's defaults, adds the agents of the agents file and
// settles authentication (the token file, tokenFile, when the daemon
// keeps its token there). It opens nothing that needs closing.
func configure(cfg Config) (_ Config, tokenFile string, err error) {
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	// What the engine logs with a request's context names the request.
	cfg.Log = slog.New(logging.Handler(cfg.Log.Handler()))
	if cfg.DataDir == "" {
		p, err := sqlite.DefaultPath()
		if err != nil {
			return cfg, "", fmt.Errorf("data dir: %w (set --data-dir)", err)
		}
		cfg.DataDir = filepath.Dir(p)
	}
	if cfg.DBPath == "" {
		cfg.DBPath = filepath.Join(cfg.DataDir, "agentbox.db")
	}
	if cfg.Advertise != "" {
		u, err := url.Parse(cfg.Advertise)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			shown := cfg.Advertise
			if err == nil {
				shown = u.Redacted() // a password has no place there, nor in a log
			}
			return cfg, "", fmt.Errorf("--advertise %q: want the http or https base URL, without credentials, other daemons reach this one at, e.g. http://10.0.0.5:7777", shown)
		}
	}
	if cfg.LeaseTTL != 0 && cfg.LeaseTTL < time.Second {
		return cfg, "", fmt.Errorf("--lease-ttl %s: must be at least 1s (it is renewed every third of it)", cfg.LeaseTTL)
	}
	if cfg.Agents == nil {
		cfg.Agents = Agents(cfg.DataDir, os.Getenv, cfg.AgentModels)
	}
	if cfg.Boundary != "" {
		if cfg.Boundary != boundary.Container {
			return cfg, "", fmt.Errorf("--boundary %q: want %q (set by a provider for its container's inner daemon)", cfg.Boundary, boundary.Container)
		}
		if err := boundary.Verify(); err != nil {
			return cfg, "", err
		}
		if cfg.Runtimes == nil {
			cfg.Runtimes = sandbox.NewRegistry()
			cfg.Runtimes.Register(boundary.New())
		}
	}
	if cfg.Runtimes == nil {
		if cfg.SandboxSpares > process.MaxSpares {
			return cfg, "", fmt.Errorf("sandbox spares %d: at most %d", cfg.SandboxSpares, process.MaxSpares)
		}
		cfg.Runtimes = Runtimes(cfg.DataDir, orDefault(cfg.SandboxSpares, DefaultSandboxSpares))
	}
	if cfg.Getenv == nil {
		cfg.Getenv = os.LookupEnv
	}
	if cfg.NetworkAskTimeout <= 0 {
		cfg.NetworkAskTimeout = DefaultNetworkAskTimeout
	}
	custom, err := loadAgentsFile(cfg.AgentsFile)
	if err != nil {
		return cfg, "", err
	}
	if err := registerCustom(cfg.Agents, custom, cfg.DataDir); err != nil {
		return cfg, "", err
	}
	if cfg.Token == "" && !cfg.InsecureNoAuth && httpapi.RequireToken(cfg.Listen) {
		return cfg, "", fmt.Errorf("listening on %s (not loopback) needs a bearer token: set --token or AGENTBOX_TOKEN, or pass --insecure-no-auth", cfg.Listen)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return cfg, "", fmt.Errorf("data dir: %w", err)
	}
	if cfg.Token == "" && !cfg.InsecureNoAuth {
		if cfg.Token, tokenFile, err = localToken(cfg.DataDir); err != nil {
			return cfg, "", err
		}
	}
	if cfg.Providers == nil && (cfg.ProviderConfig != "" || cfg.DefaultProvider != "") {
		// Built before the API, which lists them (providers.go).
		if cfg.Providers, cfg.ProviderOptions, err = loadProviders(cfg); err != nil {
			return cfg, "", err
		}
	}
	return cfg, tokenFile, nil
}

// openedStore is the outcome of openStore's goroutine.
type openedStore struct {
	st   store.Store
	err  error
	took time.Duration
}

// openStore starts opening the store (openBackend) on another goroutine; await
// gives its outcome (awaitStore). The cleanup waits for the opening and
// closes what it opened.
func (d *Daemon) openStore(ctx context.Context, cu *cleanup) (await func() openedStore, err error) {
	if err := failStep("store"); err != nil {
		return nil, err
	}
	if _, err := storeKind(d.cfg.Store); err != nil {
		return nil, err
	}
	cfg := d.cfg
	c := make(chan openedStore, 1)
	go func() {
		start := time.Now()
		st, err := openBackend(ctx, cfg)
		c <- openedStore{st: st, err: err, took: time.Since(start)}
	}()
	await = sync.OnceValue(func() openedStore { return <-c })
	cu.add(func() {
		if o := await(); o.st != nil {
			_ = o.st.Close()
		}
	})
	return await, nil
}

// awaitStore waits for the store openStore opens, and keeps it.
func (d *Daemon) awaitStore(await func() openedStore) error {
	o := await()
	d.trace.beside("store_open", o.took)
	if o.err != nil {
		return o.err
	}
	d.st = o.st
	return nil
}

// sandboxing is what sessions and executions share to make sandboxes.
type sandboxing struct {
	global     func() *policy.Policy
	workspaces *workspaceRules
	// caDir holds the CA bundles of the sandboxes whose tunnels the
	// egress proxy terminates.
	caDir string
}

// buildSandboxing loads the global policy and the workspace rules, opens
// the audit log, builds the metrics and the egress proxy.
func (d *Daemon) buildSandboxing(cu *cleanup) (*sandboxing, error) {
	cfg := d.cfg
	if err := failStep("policy"); err != nil {
		return nil, err
	}
	global, err := loadGlobalPolicy(cfg.GlobalPolicy)
	if err != nil {
		return nil, err
	}
	ws, err := newWorkspaceRules(cfg.DataDir)
	if err == nil && cfg.GlobalPolicy != "" {
		// The built-in policy names no roots (so the default applies,
		// which newWorkspaceRules made): only an operator's is checked.
		err = ws.checkRoots(ws.roots(global()))
	}
	if err != nil {
		return nil, err
	}
	d.trace.step("policy")
	if err := failStep("audit"); err != nil {
		return nil, err
	}
	aud, err := audit.Open(filepath.Join(cfg.DataDir, "audit.jsonl"), cfg.Log.With("component", "audit"))
	if err != nil {
		return nil, err
	}
	cu.add(func() { _ = aud.Close() })
	d.audit = aud
	d.metrics = metrics.New()
	d.metrics.MustRegister(aud.Violations)
	// The CA bundles of a previous run's sandboxes: those sandboxes are
	// gone with it.
	sb := &sandboxing{global: global, workspaces: ws, caDir: filepath.Join(cfg.DataDir, "egress-ca")}
	_ = os.RemoveAll(sb.caDir)
	d.trace.step("audit")
	if err := failStep("egress"); err != nil {
		return nil, err
	}
	eg, secrets, err := newEgress(cfg, aud, d.metrics)
	if err != nil {
		return nil, err
	}
	cu.add(eg.Close)
	d.egress, d.secrets = eg, secrets
	d.trace.step("egress")
	return sb, nil
}

// buildEngine builds the session engine and settles the sessions a
// previous run left live.
func (d *Daemon) buildEngine(ctx context.Context, cu *cleanup, sb *sandboxing) error {
	cfg, aud := d.cfg, d.audit
	// The states of each session's workspace, for its diffs: on disk,
	// beside the store, so they outlive a restart.
	snaps, err := snapshot.New(filepath.Join(cfg.DataDir, "snapshots"), snapshot.Limits{})
	if err != nil {
		return err
	}
	// No credential a workspace holds is copied into the data directory:
	// a file that holds a known token format or the value of a secret the
	// daemon keeps is recorded by its hash only (its diff names it
	// without its text).
	snaps.Withhold = func(content []byte) bool {
		return credential.InContent(content) != "" || holdsSecret(d.secrets, content)
	}
	rl, err := d.buildRelay()
	if err != nil {
		return err
	}
	d.relay = rl
	var remote engine.Remote
	if rl != nil {
		remote = rl
	}
	d.mgr = engine.New(engine.Config{
		Remote: remote,
		Store:  d.st, Agents: cfg.Agents, Metrics: d.metrics, Log: cfg.Log.With("component", "session"),
		WorkspaceDir: filepath.Join(cfg.DataDir, "workspaces"), PermissionTimeout: cfg.PermissionTimeout,
		MaxPendingRequests: cfg.MaxPendingRequests,
		MaxLive:            orDefault(cfg.MaxLiveSessions, DefaultMaxLiveSessions),
		IdleTimeout:        orDefault(cfg.IdleTimeout, DefaultIdleTimeout),
		IdlePause:          cfg.ProviderIdlePause,
		StartTimeout:       cfg.StartTimeout,
		Sandboxes: &sessionSandboxes{global: sb.global, fallback: cfg.SessionPolicy, runtimes: cfg.Runtimes,
			egress: d.egress, askTimeout: cfg.NetworkAskTimeout, workspaces: sb.workspaces,
			secrets: d.secrets, hostRoots: sync.OnceValue(func() []byte { return egress.HostRoots(cfg.Getenv) }), caDir: sb.caDir},
		OnViolation:     func(id string, v sandbox.Violation) { aud.Violation("session", id, v) },
		OnNetworkUpdate: func(id string, prev, allow []string) { aud.NetworkUpdate("session", id, prev, allow) },
		KeepAgentState:  cfg.KeepAgentHomes,
		Tracer:          d.tracer,
		Snapshots:       snaps,
		Advertise:       cfg.Advertise,
		LeaseTTL:        cfg.LeaseTTL,
	})
	cu.add(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		_ = d.mgr.Shutdown(ctx)
	})
	d.trace.step("engine")
	if err := failStep("recover"); err != nil {
		return err
	}
	n, err := d.mgr.Recover(ctx)
	d.trace.step("recover")
	if errors.Is(err, errkind.StorageFull) {
		// A full disk does not keep the daemon from serving what it has:
		// reads work, writes answer storage-full, and the end of the
		// sessions the last run left live is recorded once space is
		// freed. Detached from ctx on purpose: the retry is the daemon's,
		// and Shutdown (or a later failure of New) stops it.
		cfg.Log.Warn("the disk is full: recording the end of the sessions the last run left live once space is freed; reads are served meanwhile", "err", err)
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go d.recoverLater(rctx, done)
		d.stopRecover = func() { cancel(); <-done }
		cu.add(d.stopRecover)
		return nil
	}
	if err != nil {
		return err
	}
	if n > 0 {
		cfg.Log.Warn("sessions left live by the previous run marked interrupted", "count", n)
	}
	d.reconcileSandboxes(ctx)
	return nil
}

// buildExecution builds the execution service.
func (d *Daemon) buildExecution(cu *cleanup, sb *sandboxing) error {
	cfg, aud := d.cfg, d.audit
	if err := failStep("execution"); err != nil {
		return err
	}
	d.resolver = sync.OnceValue(func() execution.Resolver { return execution.PolicyResolver(sb.global()) })
	ex, err := execution.New(execution.Options{
		Runtimes: cfg.Runtimes,
		// The global policy does not change while the daemon runs: one
		// resolver, with its hash computed once, serves every request.
		// Built on first use, or once the daemon serves (Serve), which is
		// when the built-in policy is parsed.
		Resolve: func(ref execution.PolicyRef) (execution.Policy, error) { return d.resolver()(ref) },
		WorkDir: filepath.Join(cfg.DataDir, "exec"), PoolSize: cfg.ExecPool, MaxConcurrent: cfg.MaxProcesses,
		Registerer: d.metrics, Violations: aud.Violations,
		OnViolation: func(task string, v sandbox.Violation) { aud.Record("exec", task, v) },
		Network:     egress.Tasks{Server: d.egress},
		Remote:      execRemote{d},
		Log:         cfg.Log.With("component", "exec"),
	})
	if err != nil {
		return err
	}
	cu.add(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		_ = ex.Close(ctx)
	})
	d.ex = ex
	d.trace.step("execution")
	return nil
}

// recoverTry is how often recoverLater tries again.
const recoverTry = 500 * time.Millisecond

// recoverLater runs the start's Recover again until the store takes it, and
// closes done when it returns (recovered, or ctx ended).
func (d *Daemon) recoverLater(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(recoverTry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := d.mgr.Recover(ctx)
		if errors.Is(err, errkind.StorageFull) || ctx.Err() != nil {
			continue
		}
		if err != nil {
			d.log.Error("recording the end of the sessions the last run left live", "err", err)
			return
		}
		d.log.Warn("space is back: sessions left live by the previous run marked interrupted", "count", n)
		return
	}
}

// guardDeathwatch gives a root daemon its deathwatch: a root daemon makes
// sandboxes, some of which (gVisor containers) are not its children, and
// its deathwatch removes them should it die without cleaning up. Starting
// it (a process) is not on the way to the daemon's first answer: Serve
// starts it once the daemon serves, and every record of an artefact
// (owner.Host.Record, which each comes after) waits for it to run, or
// fails if it could not be started. A daemon that is not root makes no
// sandboxes, and no deathwatch.
func (d *Daemon) guardDeathwatch(cu *cleanup) error {
	if os.Geteuid() != 0 {
		return nil
	}
	if err := failStep("deathwatch"); err != nil {
		return err
	}
	d.deathwatch = &deathwatchGate{}
	remove := owner.Default().Guard(d.deathwatch.start)
	cu.add(func() { remove(); _ = d.deathwatch.stop() })
	d.unguard = remove
	return nil
}

// deathwatchGate starts the deathwatch once, on first need.
type deathwatchGate struct {
	once sync.Once
	f    *os.File // the daemon's end of the deathwatch's socket
	err  error
}

// errStopped is the deathwatch's error once the daemon shut down.
var errStopped = errors.New("the daemon is shutting down")

// start starts the deathwatch, or waits for the start in progress, and
// returns its error.
func (g *deathwatchGate) start() error {
	if g == nil { // a daemon that makes no sandboxes
		return nil
	}
	g.once.Do(func() {
		if g.f, g.err = startDeathwatch(); g.err != nil {
			g.err = fmt.Errorf("%w (a daemon that makes sandboxes needs it, so that none outlives the daemon)", g.err)
		}
	})
	return g.err
}

// stop stops a deathwatch that started, after waiting for a start in
// progress; one that never started never will.
func (g *deathwatchGate) stop() error {
	if g == nil {
		return nil
	}
	g.once.Do(func() { g.err = errStopped })
	return stopDeathwatch(g.f)
}

// lateEngine is the session engine the API is built with before the engine
// exists (New sets it, before the daemon serves anything); the API only
// keeps it while its routes are built.
type lateEngine struct{ httpapi.Engine }

var _ httpapi.LiveSandboxes = (*lateEngine)(nil)

// LiveSandbox is the engine's optional ability (httpapi.LiveSandboxes),
// which embedding alone would hide.
func (e *lateEngine) LiveSandbox(id string) (event.SandboxInfo, bool) {
	if ls, ok := e.Engine.(httpapi.LiveSandboxes); ok {
		return ls.LiveSandbox(id)
	}
	return event.SandboxInfo{}, false
}

var _ httpapi.Owners = (*lateEngine)(nil)

// SessionOwner is the engine's optional ability (httpapi.Owners).
func (e *lateEngine) SessionOwner(ctx context.Context, id string) (engine.Owner, bool, error) {
	if o, ok := e.Engine.(httpapi.Owners); ok {
		return o.SessionOwner(ctx, id)
	}
	return engine.Owner{}, false, nil
}

var _ httpapi.SessionWorkspaces = (*lateEngine)(nil)

// errNoWorkspaces answers when the engine has no SessionWorkspaces (never
// with the daemon's engine).
var errNoWorkspaces = fmt.Errorf("%w: the session engine keeps no workspace states", engine.ErrUnavailable)

// Diff is the engine's optional ability (httpapi.SessionWorkspaces).
func (e *lateEngine) Diff(ctx context.Context, id, turn string) (snapshot.Diff, error) {
	if w, ok := e.Engine.(httpapi.SessionWorkspaces); ok {
		return w.Diff(ctx, id, turn)
	}
	return snapshot.Diff{}, errNoWorkspaces
}

// Exec is the engine's optional ability (httpapi.SessionWorkspaces).
func (e *lateEngine) Exec(ctx context.Context, id string, run func(ctx context.Context, sb sandbox.Sandbox, limits sandbox.Limits) error) error {
	if w, ok := e.Engine.(httpapi.SessionWorkspaces); ok {
		return w.Exec(ctx, id, run)
	}
	return errNoWorkspaces
}

// newHandler builds the HTTP API: the API's routes, the exec service's and
// the ACP endpoint. It runs beside the store's opening: it may use only
// what New built before that, and eng only once requests come.
func (d *Daemon) newHandler(eng *lateEngine) http.Handler {
	cfg := d.cfg
	return httpapi.New(httpapi.Config{
		Token: cfg.Token, AllowedHosts: cfg.AllowedHosts, CORSOrigins: cfg.CORSOrigins, Heartbeat: cfg.Heartbeat,
		Version: version.String(),
		Exec:    d.ex,
		Secrets: d.secrets,
		Files:   sessionFiles{eng: eng},
		// Every daemon has its execution service (buildExecution).
		ProcessFiles: processFiles{ex: d.ex},
		// The registry as configured: GET /v1/providers lists it.
		Providers: cfg.Providers, DefaultProvider: cfg.DefaultProvider,
		Tracer: d.tracer,
		UI:     inspector.Handler(),
		ACP: acpserver.Handler(acpserver.HandlerOptions{
			// Each ACP connection drives this daemon through its own API,
			// with the caller's credentials, so policy and approvals
			// apply exactly as for any other client.
			Backend: func(r *http.Request) (acpserver.Backend, error) {
				var opts []client.Option
				if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
					opts = append(opts, client.WithToken(tok))
				}
				return client.New(d.url, opts...) // set before the daemon serves
			},
			Config: acpserver.Config{Agent: "claude"}, // ?agent= picks another
		}),
	}, eng, d.metrics, cfg.Log.With("component", "http"))
}

// listen binds the listener and builds the HTTP server around h.
func (d *Daemon) listen(ctx context.Context, cu *cleanup, h http.Handler) error {
	if err := failStep("listen"); err != nil {
		return err
	}
	ln, url, err := listen(ctx, d.cfg.Listen)
	if err != nil {
		return err
	}
	cu.add(func() { _ = ln.Close() })
	d.ln, d.url = ln, url
	d.trace.step("listen")
	d.handlerCtx, d.cancelHandler = context.WithCancel(context.Background())
	cu.add(d.cancelHandler)
	if err := d.forwardEgress(d.handlerCtx, cu); err != nil {
		return err
	}
	d.srv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return d.handlerCtx },
		ConnState:         d.connState,
	}
	return nil
}

// reapDead removes what the sandboxes of agentbox processes that died
// without cleaning up (a daemon killed with SIGKILL, a crashed test) left
// on the host: gVisor containers (they outlive their daemon) with their
// cgroups, mounts and state directories, process-runtime cgroups with
// whatever still runs in them, and task workspaces. Package owner knows
// which process each belongs to and that it is dead; another live
// agentbox process's artefacts are never touched. Containers go first:
// a task workspace may be the lower layer of one's overlay.
func reapDead(log *slog.Logger) {
	rep, err := owner.Default().ReapDead(Reapers()...)
	if rep.Owners > 0 {
		log.Info("removed what dead agentbox processes left on the host", "processes", rep.Owners, "removed", len(rep.Removed), "kept", len(rep.Kept))
	}
	if err != nil {
		log.Warn("removing what dead agentbox processes left on the host", "err", err)
	}
	// Empty groups of agentbox versions that kept no records (an empty
	// group holds no work, whoever made it).
	if stale, err := cgroup.RemoveStale(time.Minute); err == nil && len(stale) > 0 {
		log.Info("removed stale sandbox cgroups", "count", len(stale))
	}
}

// Reapers are the reapers of every kind of artefact agentbox's sandboxes
// record (package owner), in the order they must go: gVisor containers
// first (a task workspace may be the lower layer of one's overlay), then
// process-runtime cgroups, then directories.
func Reapers() []owner.Reaper {
	return []owner.Reaper{
		{Kind: gvisor.KindSandbox, Reap: gvisor.Reap},
		{Kind: cgroup.KindCgroup, Reap: func(r owner.Record) error { return cgroup.Remove(r.Name) }},
		{Kind: owner.KindDir, Reap: owner.ReapDir},
	}
}

func listen(ctx context.Context, addr string) (net.Listener, string, error) {
	var lc net.ListenConfig
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		path = strings.TrimPrefix(path, "//")
		_ = os.Remove(path)
		ln, err := lc.Listen(ctx, "unix", path)
		if err != nil {
			return nil, "", fmt.Errorf("listen %s: %w", addr, err)
		}
		if err := os.Chmod(path, 0o600); err != nil && !privateDir(filepath.Dir(path)) {
			// A socket whose mode cannot be set (gVisor's host sockets,
			// the Docker provider's runsc) is private only in a private
			// directory.
			ln.Close()
			return nil, "", fmt.Errorf("chmod %s: %w", path, err)
		}
		return ln, "unix://" + path, nil
	}
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("listen %s: %w", addr, err)
	}
	return ln, "http://" + ln.Addr().String(), nil
}

// privateDir says whether dir is closed to group and others: a socket in it
// is reachable by its owner alone, whatever the socket's own mode.
func privateDir(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir() && fi.Mode().Perm()&0o077 == 0
}

// URL is the base URL clients use (http://host:port or unix:///path).
func (d *Daemon) URL() string { return d.url }

// Token is the bearer token clients must send: the configured one, or the
// one of the token file; "" with InsecureNoAuth.
func (d *Daemon) Token() string { return d.cfg.Token }

// TokenFile is the file the token is in when the daemon was given none
// ("" otherwise).
func (d *Daemon) TokenFile() string { return d.tokenFile }

// Serve handles requests until ctx ends, then shuts down gracefully.
func (d *Daemon) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- d.srv.Serve(d.ln) }()
	auth := "token"
	switch {
	case d.tokenFile != "":
		auth = "token in " + d.tokenFile
	case d.cfg.Token == "":
		auth = "none (--insecure-no-auth)"
	}
	d.trace.step("serve")
	d.log.Info("agentbox serving", "url", d.url, "db", storeName(d.cfg), "version", version.String(), "auth", auth,
		"daemon", d.mgr.DaemonID(), "start", d.trace.total().Round(10*time.Microsecond))
	d.log.Debug("start-up trace", d.trace.attrs()...)
	// What no request needs before the first sandbox starts now, beside
	// the first requests. The deathwatch: the first record of an
	// artefact waits for it (guardDeathwatch), and a daemon that cannot
	// start it stops, as it did when it started it before listening
	// (every sandbox is refused meanwhile). The host probe
	// (it takes a few hundred milliseconds with runsc) only logs: each
	// sandbox is still checked, and refused, on its own when the host
	// cannot enforce it. All of it begins once the first request is
	// answered (settled): on two cores, a start's first answer waited for
	// it, for about a hundred page faults and a few milliseconds.
	// Whatever needs one of them first starts it then (the deathwatch's
	// guard, the resolver's sync.OnceValue).
	watchErr := make(chan error, 1)
	d.warm.Add(1)
	go func() {
		defer d.warm.Done()
		if !d.settled() {
			return
		}
		if err := d.deathwatch.start(); err != nil && !errors.Is(err, errStopped) {
			watchErr <- err
		}
		// The global policy's parse (a few milliseconds for the
		// built-in one) and hash, now rather than in the first session
		// or execution that needs them.
		d.resolver()
		// The start is done: its garbage goes (memory.go).
		releaseStartGarbage(d.log)
	}()
	d.warm.Add(1)
	go func() {
		defer d.warm.Done()
		if !d.settled() {
			return
		}
		d.logProbe(ctx)
		// And the probe's, which runs for as long as runsc takes.
		releaseStartGarbage(d.log)
	}()
	if d.cfg.GovernProcs {
		// From the end of the start (which runs in parallel) until the
		// daemon stops serving; detached from requests on purpose.
		d.warm.Add(1)
		go func() {
			defer d.warm.Done()
			if !d.settled() {
				return
			}
			procs.Govern(d.handlerCtx, d.log)
		}()
	}
	select {
	case err := <-watchErr:
		_ = d.Shutdown(context.Background())
		return err
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			_ = d.Shutdown(context.Background())
			return fmt.Errorf("serve: %w", err)
		}
		return d.Shutdown(context.Background())
	case <-ctx.Done():
		return d.Shutdown(context.Background())
	}
}

// settleAfter bounds the wait of the start's background work for the
// daemon's first answer (settled).
const settleAfter = 100 * time.Millisecond

// settled waits until the daemon answered its first request, or for
// settleAfter, and says whether the daemon still runs (false once it
// shuts down, when the work it held back is not begun). What a start does
// in the background (reaping dead daemons' leftovers, the deathwatch, the
// policy's parse, the host probe, the collection of the start's garbage)
// so runs after the first answer, not beside it.
func (d *Daemon) settled() bool {
	t := time.NewTimer(settleAfter)
	defer t.Stop()
	select {
	case <-d.answered:
	case <-t.C:
	case <-d.handlerCtx.Done():
		return false
	}
	return d.handlerCtx.Err() == nil
}

// connState is the server's ConnState: a connection that is idle after a
// request, hijacked or closed means a first answer (settled).
func (d *Daemon) connState(_ net.Conn, s http.ConnState) {
	if s == http.StateIdle || s == http.StateHijacked || s == http.StateClosed {
		d.answeredOnce.Do(func() { close(d.answered) })
	}
}

// logProbe logs which isolation mechanisms and runtimes work on this host
// (agentbox doctor prints the same as a table).
func (d *Daemon) logProbe(ctx context.Context) {
	var missing []string
	for _, m := range probe.Host(ctx, probe.Options{Runsc: true}) {
		if !m.OK {
			missing = append(missing, m.Name+": "+m.Detail)
		}
	}
	var runtimes []string
	for _, rt := range d.cfg.Runtimes.All() {
		if rt.Name() == "microvm" {
			continue // its probe boots a guest: agentbox doctor runs it
		}
		pr := rt.Probe(ctx)
		state := "available"
		if !pr.Available {
			state = "unavailable (" + pr.Reason + ")"
		}
		runtimes = append(runtimes, rt.Name()+": "+state)
	}
	if len(missing) > 0 {
		d.log.Warn("sandbox mechanisms missing on this host; policies needing them are refused", "missing", missing, "runtimes", runtimes)
		return
	}
	d.log.Info("sandbox host probe", "runtimes", runtimes)
}

// Shutdown stops taking requests, ends live sessions as interrupted (agents
// get until the shutdown timeout, then are killed) and closes the store. It
// never blocks much past cfg.ShutdownTimeout.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.shutdownOnce.Do(func() {
		ctx, cancel := context.WithTimeout(ctx, d.cfg.ShutdownTimeout)
		defer cancel()
		d.log.Info("shutting down", "timeout", d.cfg.ShutdownTimeout)
		// Stop accepting; end SSE streams so Shutdown need not wait for
		// them.
		srvDone := make(chan error, 1)
		go func() { srvDone <- d.srv.Shutdown(ctx) }()
		d.cancelHandler()
		if d.stopRecover != nil {
			d.stopRecover()
		}
		errs := []error{d.mgr.Shutdown(ctx), d.ex.Close(ctx)}
		// Runtimes that keep processes of their own (the process
		// runtime's spare inits) end them once no sandbox is left.
		for _, rt := range d.cfg.Runtimes.All() {
			if c, ok := rt.(io.Closer); ok {
				errs = append(errs, c.Close())
			}
		}
		// Adapters that own shared processes (OpenCode's servers) stop them
		// once no session is left.
		for _, name := range d.cfg.Agents.Names() {
			if a, err := d.cfg.Agents.Get(name); err == nil {
				if c, ok := a.(io.Closer); ok {
					errs = append(errs, c.Close())
				}
			}
		}
		if err := <-srvDone; err != nil {
			errs = append(errs, err, d.srv.Close())
		}
		d.egress.Close()
		// The start's reaping is bounded (kills, rmdirs, removals); one
		// cut short by the timeout leaves the rest recorded for the next
		// start.
		select {
		case <-d.reaped:
		case <-ctx.Done():
			d.log.Warn("shutting down before the removal of dead processes' leftovers ended")
		}
		// Every sandbox is closed: the deathwatch has nothing to do.
		// Milliseconds: a process started, a policy parsed, the probe's
		// helpers run (a few hundred with runsc).
		warmed := make(chan struct{})
		go func() { d.warm.Wait(); close(warmed) }()
		select {
		case <-warmed:
		case <-ctx.Done():
		}
		if d.unguard != nil {
			d.unguard()
		}
		errs = append(errs, d.st.Close(), d.audit.Close(), d.deathwatch.stop())
		// The last spans (the shutdown's own requests and turns) are
		// sent within what is left of the deadline; a collector that
		// does not answer in time loses them, counted in the log.
		if err := d.tracer.Shutdown(ctx); err != nil {
			d.log.Warn("trace spans not all sent before the shutdown deadline", "err", err)
		}
		d.shutdownErr = errors.Join(errs...)
		if d.shutdownErr != nil {
			d.log.Warn("shutdown finished with errors", "err", d.shutdownErr)
		} else {
			d.log.Info("shut down cleanly")
		}
	})
	return d.shutdownErr
}

// failStep is a test's seam (export_test.go): New fails at the step it
// names, as if that step had failed. It is never set outside tests.
var failStep = func(string) error { return nil }

// orDefault is v, def when v is zero, and zero (none) when v is negative.
func orDefault[T int | time.Duration](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// holdsSecret reports whether content holds the value of one of the
// daemon's secrets (values shorter than 8 bytes are not looked for: they
// would match by chance, and are no secret worth the name).
func holdsSecret(secrets *egress.Secrets, content []byte) bool {
	if secrets == nil {
		return false
	}
	for _, info := range secrets.List() {
		if sec, ok := secrets.Secret(info.Name); ok && len(sec.Value) >= 8 && bytes.Contains(content, []byte(sec.Value)) {
			return true
		}
	}
	return false
}

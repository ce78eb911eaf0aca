//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/execution"
	"github.com/agentbox/agentbox/internal/flagfile"
	"github.com/agentbox/agentbox/internal/logging"
	"github.com/agentbox/agentbox/internal/prefault"
	"github.com/agentbox/agentbox/internal/sandbox/process"
)

// serveCommand maps flags, AGENTBOX_* environment variables and the
// --config file onto daemon.Config; flags win over the environment, which
// wins over the file (applySources).
func serveCommand() *cobra.Command {
	var (
		own          = map[string]bool{} // serve's own flags, not the client's global ones
		cfg          daemon.Config
		cors         string
		allowedHosts string
		agentModels  string
		logLevel     string
		logFormat    string
		maxLive      int
		idleTimeout  time.Duration
		spares       int
		configFile   string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the agentbox daemon",
		Long: `Run the agentbox daemon: the HTTP/SSE API, the session engine and the event store.

Every flag can also be set with an environment variable (shown in brackets),
and in the YAML file --config names (AGENTBOX_CONFIG), whose keys are the
flags' names (listen: 127.0.0.1:7777). A flag given on the command line wins
over the environment, which wins over the file, which wins over the default.

Clients must send a bearer token. Without --token, the daemon uses the one in
DATA_DIR/token (mode 0600), making it on first start; the CLI reads it from
there by itself. --insecure-no-auth turns authentication off. Listening on a
non-loopback address requires --token.

Requests whose Host header is not a loopback address, localhost, the address
the daemon listens on or a name given with --allowed-hosts are refused, and so
are browser requests from origins not given with --cors-origins: a web page
cannot drive the daemon through DNS rebinding or cross-site requests.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The client's global --url names no address of the daemon's.
			if f := cmd.Flags().Lookup("url"); f != nil && f.Changed {
				return errors.New("--url is the daemon address clients use; serve listens on --listen")
			}
			// --json (the client's global flag) asks for JSON lines
			// unless --log-format says otherwise; it wins over the
			// environment and the file, as a flag does.
			jsonFlag := false
			if f := cmd.Flags().Lookup("json"); f != nil && f.Changed && f.Value.String() == "true" {
				if cmd.Flags().Changed("log-format") && logFormat != "json" {
					return fmt.Errorf("--json asks for --log-format json, not %s", logFormat)
				}
				jsonFlag = true
			}
			if err := applySources(cmd.Flags(), own, configFile); err != nil {
				return err
			}
			if jsonFlag {
				logFormat = "json"
			}
			// The flags' defaults are the daemon's, so a zero here was
			// given: it means no cap, never an agent stopped for idling.
			switch {
			case maxLive < 0:
				return fmt.Errorf("--max-live-sessions %d: want 0 (no cap) or more", maxLive)
			case idleTimeout < 0:
				return fmt.Errorf("--idle-timeout %s: want 0 (never) or more", idleTimeout)
			case cfg.ProviderIdlePause < 0:
				return fmt.Errorf("--provider-idle-pause %s: want 0 (never) or more", cfg.ProviderIdlePause)
			case spares < 0 || spares > process.MaxSpares:
				return fmt.Errorf("--sandbox-spares %d: want 0 (none) to %d", spares, process.MaxSpares)
			}
			cfg.SandboxSpares = spares
			if spares == 0 {
				cfg.SandboxSpares = -1
			}
			cfg.MaxLiveSessions, cfg.IdleTimeout = maxLive, idleTimeout
			if maxLive == 0 {
				cfg.MaxLiveSessions = -1
			}
			if idleTimeout == 0 {
				cfg.IdleTimeout = -1
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			var err error
			if cfg.Log, err = logging.New(cmd.ErrOrStderr(), logFormat, level); err != nil {
				return fmt.Errorf("--log-format: %w", err)
			}
			if r := prefault.Start(); r != (prefault.Result{}) {
				var failed error
				if r.Errno != 0 {
					failed = syscall.Errno(r.Errno)
				}
				cfg.Log.Debug("start-up pages mapped ahead", "binary_kib", r.Image>>10, "err", failed)
			}
			if cors != "" {
				cfg.CORSOrigins = strings.Split(cors, ",")
			}
			if allowedHosts != "" {
				cfg.AllowedHosts = strings.Split(allowedHosts, ",")
			}
			models, err := daemon.ParseAgentModels(agentModels)
			if err != nil {
				return fmt.Errorf("--agent-models: %w", err)
			}
			cfg.AgentModels = models
			// SIGINT and SIGTERM both mean a graceful shutdown.
			cfg.Started = started
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runDaemon(ctx, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", daemon.DefaultListen, "address: host:port or unix:/path [AGENTBOX_LISTEN]")
	f.StringVar(&cfg.DataDir, "data-dir", "", "data directory (default ~/.local/share/agentbox) [AGENTBOX_DATA_DIR]")
	f.StringVar(&cfg.DBPath, "db", "", "SQLite database file (default DATA_DIR/agentbox.db) [AGENTBOX_DB]")
	f.StringVar(&cfg.Store, "store", "", "the store: sqlite (default: the --db file) or a PostgreSQL DSN, postgres://USER:PASSWORD@HOST:PORT/DB?sslmode=..., which several daemons may share (see docs/postgres.md); the password is never logged [AGENTBOX_STORE]")
	f.StringVar(&cfg.Advertise, "advertise", "", "base URL other daemons sharing the --store reach this one at (http://HOST:PORT), to forward the requests of the sessions it drives; they must share the --token (see docs/postgres.md) [AGENTBOX_ADVERTISE]")
	f.DurationVar(&cfg.LeaseTTL, "lease-ttl", engine.DefaultLeaseTTL, "how long a session's lease lasts unrenewed: another daemon sharing the --store takes over the sessions of one that died after this [AGENTBOX_LEASE_TTL]")
	f.StringVar(&cfg.Token, "token", "", "bearer token clients must send [AGENTBOX_TOKEN]")
	f.BoolVar(&cfg.InsecureNoAuth, "insecure-no-auth", false, "no authentication: no token, not even DATA_DIR/token; any local user (or anyone, on a non-loopback address) drives the daemon")
	f.StringVar(&allowedHosts, "allowed-hosts", "", "comma-separated names (or name:port) clients may reach the daemon by, besides loopback addresses, localhost and the listen address; * allows any Host [AGENTBOX_ALLOWED_HOSTS]")
	f.StringVar(&cors, "cors-origins", "", "comma-separated browser origins allowed to call the API (CORS), or *; browser requests from other origins are refused [AGENTBOX_CORS_ORIGINS]")
	f.DurationVar(&cfg.PermissionTimeout, "permission-timeout", 5*time.Minute, "deny unanswered permission requests after this [AGENTBOX_PERMISSION_TIMEOUT]")
	f.IntVar(&cfg.MaxPendingRequests, "max-pending-requests", daemon.DefaultMaxPendingRequests, "permission requests and questions one session may have waiting at once; further ones are denied by the daemon and reported [AGENTBOX_MAX_PENDING_REQUESTS]")
	f.IntVar(&maxLive, "max-live-sessions", daemon.DefaultMaxLiveSessions, "sessions with a live agent process at once; a create, resume or message past it gets 429 with Retry-After; 0: no cap [AGENTBOX_MAX_LIVE_SESSIONS]")
	f.DurationVar(&idleTimeout, "idle-timeout", daemon.DefaultIdleTimeout, "stop an agent process idle this long (agents that can resume); its session's next message resumes it; 0: never [AGENTBOX_IDLE_TIMEOUT]")
	f.DurationVar(&cfg.StartTimeout, "start-timeout", daemon.DefaultStartTimeout, "give up starting a session's agent (its sandbox included) after this; raise it where agents start slowly, e.g. gVisor on its ptrace platform [AGENTBOX_START_TIMEOUT]")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", daemon.DefaultShutdownTimeout, "graceful shutdown deadline; agents are killed after it [AGENTBOX_SHUTDOWN_TIMEOUT]")
	f.DurationVar(&cfg.Heartbeat, "sse-heartbeat", 15*time.Second, "SSE keep-alive interval [AGENTBOX_SSE_HEARTBEAT]")
	f.BoolVar(&cfg.SyncNormal, "sync-normal", false, "SQLite synchronous=NORMAL: faster; a power loss may drop the last commits (a crash never does) [AGENTBOX_SYNC_NORMAL=1]")
	f.StringVar(&cfg.AgentsFile, "agents-file", "", "YAML file adding ACP agents by name, command, args and env (see docs/acp.md) [AGENTBOX_AGENTS_FILE]")
	f.StringVar(&agentModels, "agent-models", "", "more models the provider configuration of pi, opencode and opencode-acp declares, which sessions may select and switch to: NAME=MODEL[,MODEL...] entries separated by ; (e.g. pi=gpt-5,gpt-5-mini;opencode=gpt-5) [AGENTBOX_AGENT_MODELS]")
	f.IntVar(&cfg.ExecPool, "exec-pool", execution.DefaultPoolSize, "warm sandboxes kept ready per execution policy; 0 disables the pool [AGENTBOX_EXEC_POOL]")
	f.IntVar(&spares, "sandbox-spares", daemon.DefaultSandboxSpares, fmt.Sprintf("sandbox inits the process runtime keeps started ahead of need, so that a new sandbox skips its init's start (0 to %d); 0 disables them [AGENTBOX_SANDBOX_SPARES]", process.MaxSpares))
	f.IntVar(&cfg.MaxProcesses, "max-processes", execution.DefaultMaxConcurrent, "concurrent executions and processes; more get 429 [AGENTBOX_MAX_PROCESSES]")
	f.StringVar(&cfg.GlobalPolicy, "global-policy", "", "operator sandbox policy file every session and execution is intersected with (see docs/policy.md) [AGENTBOX_GLOBAL_POLICY]")
	f.StringVar(&cfg.SessionPolicy, "session-policy", "", "policy preset for sessions created without a policy, e.g. agent-default; empty runs their agents unsandboxed [AGENTBOX_SESSION_POLICY]")
	f.StringVar(&cfg.DefaultProvider, "provider", "", "sandbox provider of sessions created without one (see GET /v1/providers); empty runs them on this host [AGENTBOX_PROVIDER]")
	f.StringVar(&cfg.ProviderConfig, "provider-config", "", "YAML file of the sandbox providers to configure and their options (providers: {docker: {runtime: runsc}}); their credentials come from the daemon's environment, never a sandbox's [AGENTBOX_PROVIDER_CONFIG]")
	f.DurationVar(&cfg.ProviderIdlePause, "provider-idle-pause", 0, "pause the sandbox of a session on a provider that pauses sandboxes (docker) once it is idle this long, instead of stopping it after --idle-timeout; its next message resumes it; 0: never [AGENTBOX_PROVIDER_IDLE_PAUSE]")
	f.StringVar(&cfg.EgressSocket, "egress-socket", "", "unix socket the host carries this daemon's egress on (the inner daemon of a provider's sandbox that has no network, e.g. docker): connections to the egress proxy's address 127.0.0.1:3128 go there, and the host decides them [AGENTBOX_EGRESS_SOCKET]")
	f.StringVar(&cfg.Boundary, "boundary", "", "set by a sandbox provider on the daemon it runs inside its container: \"container\" declares that container the sandbox, so the daemon runs processes directly in it under the policy the host mapped onto it (it refuses to start unless unprivileged with a read-only root) [AGENTBOX_BOUNDARY]")
	f.StringVar(&cfg.SecretsFile, "secrets-file", "", "YAML file of secrets the egress proxy adds to requests for their host; values come from the environment or files and stay in memory (see docs/sandbox.md) [AGENTBOX_SECRETS_FILE]")
	f.DurationVar(&cfg.NetworkAskTimeout, "network-ask-timeout", daemon.DefaultNetworkAskTimeout, "deny a sandboxed connection whose approval (network.default ask) is not answered within this [AGENTBOX_NETWORK_ASK_TIMEOUT]")
	f.StringVar(&cfg.EgressCAFile, "egress-ca-file", "", "PEM roots the egress proxy also trusts for model-API upstreams over TLS [AGENTBOX_EGRESS_CA_FILE]")
	f.BoolVar(&cfg.KeepAgentHomes, "keep-agent-homes", false, "keep a sandboxed session's agent home (DATA_DIR/agents/...) when the session is purged [AGENTBOX_KEEP_AGENT_HOMES=1]")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error; debug adds one line per request [AGENTBOX_LOG_LEVEL]")
	f.StringVar(&logFormat, "log-format", "text", "text (key=value) or json (one object a line); --json is --log-format json [AGENTBOX_LOG_FORMAT]")
	f.StringVar(&configFile, "config", "", "YAML file of flag values, keys the flags' names (e.g. listen: 127.0.0.1:7777); flags and the environment win over it [AGENTBOX_CONFIG]")
	f.StringVar(&cfg.OTLPEndpoint, "otlp-endpoint", "", "export traces over OTLP/HTTP (protobuf) to this base URL, e.g. http://127.0.0.1:4318; wins over OTEL_EXPORTER_OTLP_ENDPOINT; the other OTEL_* variables apply; unset: no traces [AGENTBOX_OTLP_ENDPOINT]")
	_ = cmd.RegisterFlagCompletionFunc("log-format", cobra.FixedCompletions(logging.Formats, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions([]string{"debug", "info", "warn", "error"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.MarkFlagFilename("config", "yaml", "yml")
	f.VisitAll(func(fl *pflag.Flag) { own[fl.Name] = fl.Name != "config" })
	return cmd
}

// runDaemon starts the daemon serve configured and serves until ctx ends;
// the tests of the flags' sources replace it to see the configuration.
var runDaemon = func(ctx context.Context, cfg daemon.Config) error {
	cfg.GovernProcs = true // the daemon is this process's only work
	d, err := daemon.New(ctx, cfg)
	if err != nil {
		return err
	}
	return d.Serve(ctx)
}

// noEnv are the flags no AGENTBOX_<NAME> variable sets: turning
// authentication off takes a flag (or the file), never a stray variable;
// the file's own variable is AGENTBOX_CONFIG, read by applySources.
var noEnv = map[string]bool{"insecure-no-auth": true, "config": true}

// envName is the variable that sets a serve flag: AGENTBOX_ and the flag's
// name in capitals, - as _ (--data-dir: AGENTBOX_DATA_DIR).
func envName(flag string) string {
	return "AGENTBOX_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applySources gives every flag of serve (own: the names, true for those a
// file may set) not set on the command line its value from the
// environment (envName), else from the configuration file (--config, else
// AGENTBOX_CONFIG), else leaves its default. An empty variable counts as
// unset. Bad values are errors that name their source.
func applySources(fs *pflag.FlagSet, own map[string]bool, configFile string) error {
	for name := range own {
		if noEnv[name] || fs.Changed(name) {
			continue
		}
		env := envName(name)
		v := os.Getenv(env)
		if v == "" {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("%s=%q: %w", env, v, err)
		}
	}
	if !fs.Changed("config") {
		configFile = os.Getenv("AGENTBOX_CONFIG")
	}
	if configFile == "" {
		return nil
	}
	entries, fi, err := flagfile.Load(configFile)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	for _, e := range entries {
		// The token in a file others can read is no secret: refused, as
		// DATA_DIR/token is.
		if e.Key == "token" && fi.Mode().Perm()&0o077 != 0 {
			return fmt.Errorf("%s:%d: token in a file other users can read (mode %#o): chmod 600 %s, or leave the token to DATA_DIR/token or AGENTBOX_TOKEN", configFile, e.Line, fi.Mode().Perm(), configFile)
		}
	}
	return flagfile.Apply(fs, configFile, entries, own)
}

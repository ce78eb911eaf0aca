package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/execution"
	"github.com/agentbox/agentbox/internal/logging"
)

// serveCommand maps flags and AGENTBOX_* environment variables onto
// daemon.Config; flags win over the environment.
func serveCommand() *cobra.Command {
	var (
		cfg          daemon.Config
		cors         string
		allowedHosts string
		agentModels  string
		logLevel     string
		logFormat    string
		maxLive      int
		idleTimeout  time.Duration
		envErrs      []error
	)
	envDuration := func(name string, def time.Duration) time.Duration {
		v, ok := os.LookupEnv(name)
		if !ok {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			envErrs = append(envErrs, fmt.Errorf("%s=%q: not a duration (e.g. 30s, 5m)", name, v))
		}
		return d
	}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the agentbox daemon",
		Long: `Run the agentbox daemon: the HTTP/SSE API, the session engine and the event store.

Every flag can also be set with an environment variable (shown in brackets).

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
			if len(envErrs) > 0 {
				return envErrs[0]
			}
			// The flags' defaults are the daemon's, so a zero here was
			// given: it means no cap, never an agent stopped for idling.
			switch {
			case maxLive < 0:
				return fmt.Errorf("--max-live-sessions %d: want 0 (no cap) or more", maxLive)
			case idleTimeout < 0:
				return fmt.Errorf("--idle-timeout %s: want 0 (never) or more", idleTimeout)
			}
			cfg.MaxLiveSessions, cfg.IdleTimeout = maxLive, idleTimeout
			if maxLive == 0 {
				cfg.MaxLiveSessions = -1
			}
			if idleTimeout == 0 {
				cfg.IdleTimeout = -1
			}
			// The client's global flags reach serve too: --json asks for
			// JSON log lines, --url names no address of the daemon's.
			if f := cmd.Flags().Lookup("url"); f != nil && f.Changed {
				return errors.New("--url is the daemon address clients use; serve listens on --listen")
			}
			if f := cmd.Flags().Lookup("json"); f != nil && f.Changed && f.Value.String() == "true" {
				if cmd.Flags().Changed("log-format") && logFormat != "json" {
					return fmt.Errorf("--json asks for --log-format json, not %s", logFormat)
				}
				logFormat = "json"
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			var err error
			if cfg.Log, err = logging.New(cmd.ErrOrStderr(), logFormat, level); err != nil {
				return fmt.Errorf("--log-format: %w", err)
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
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			d, err := daemon.New(ctx, cfg)
			if err != nil {
				return err
			}
			return d.Serve(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", env("AGENTBOX_LISTEN", daemon.DefaultListen), "address: host:port or unix:/path [AGENTBOX_LISTEN]")
	f.StringVar(&cfg.DataDir, "data-dir", env("AGENTBOX_DATA_DIR", ""), "data directory (default ~/.local/share/agentbox) [AGENTBOX_DATA_DIR]")
	f.StringVar(&cfg.DBPath, "db", env("AGENTBOX_DB", ""), "SQLite database file (default DATA_DIR/agentbox.db) [AGENTBOX_DB]")
	f.StringVar(&cfg.Token, "token", env("AGENTBOX_TOKEN", ""), "bearer token clients must send [AGENTBOX_TOKEN]")
	f.BoolVar(&cfg.InsecureNoAuth, "insecure-no-auth", false, "no authentication: no token, not even DATA_DIR/token; any local user (or anyone, on a non-loopback address) drives the daemon")
	f.StringVar(&allowedHosts, "allowed-hosts", env("AGENTBOX_ALLOWED_HOSTS", ""), "comma-separated names (or name:port) clients may reach the daemon by, besides loopback addresses, localhost and the listen address; * allows any Host [AGENTBOX_ALLOWED_HOSTS]")
	f.StringVar(&cors, "cors-origins", env("AGENTBOX_CORS_ORIGINS", ""), "comma-separated browser origins allowed to call the API (CORS), or *; browser requests from other origins are refused [AGENTBOX_CORS_ORIGINS]")
	f.DurationVar(&cfg.PermissionTimeout, "permission-timeout", envDuration("AGENTBOX_PERMISSION_TIMEOUT", 5*time.Minute), "deny unanswered permission requests after this [AGENTBOX_PERMISSION_TIMEOUT]")
	f.IntVar(&cfg.MaxPendingRequests, "max-pending-requests", envInt("AGENTBOX_MAX_PENDING_REQUESTS", daemon.DefaultMaxPendingRequests), "permission requests and questions one session may have waiting at once; further ones are denied by the daemon and reported [AGENTBOX_MAX_PENDING_REQUESTS]")
	f.IntVar(&maxLive, "max-live-sessions", envInt("AGENTBOX_MAX_LIVE_SESSIONS", daemon.DefaultMaxLiveSessions), "sessions with a live agent process at once; a create, resume or message past it gets 429 with Retry-After; 0: no cap [AGENTBOX_MAX_LIVE_SESSIONS]")
	f.DurationVar(&idleTimeout, "idle-timeout", envDuration("AGENTBOX_IDLE_TIMEOUT", daemon.DefaultIdleTimeout), "stop an agent process idle this long (agents that can resume); its session's next message resumes it; 0: never [AGENTBOX_IDLE_TIMEOUT]")
	f.DurationVar(&cfg.StartTimeout, "start-timeout", envDuration("AGENTBOX_START_TIMEOUT", daemon.DefaultStartTimeout), "give up starting a session's agent (its sandbox included) after this; raise it where agents start slowly, e.g. gVisor on its ptrace platform [AGENTBOX_START_TIMEOUT]")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", envDuration("AGENTBOX_SHUTDOWN_TIMEOUT", daemon.DefaultShutdownTimeout), "graceful shutdown deadline; agents are killed after it [AGENTBOX_SHUTDOWN_TIMEOUT]")
	f.DurationVar(&cfg.Heartbeat, "sse-heartbeat", envDuration("AGENTBOX_SSE_HEARTBEAT", 15*time.Second), "SSE keep-alive interval [AGENTBOX_SSE_HEARTBEAT]")
	f.BoolVar(&cfg.SyncNormal, "sync-normal", os.Getenv("AGENTBOX_SYNC_NORMAL") == "1", "SQLite synchronous=NORMAL: faster; a power loss may drop the last commits (a crash never does) [AGENTBOX_SYNC_NORMAL=1]")
	f.StringVar(&cfg.AgentsFile, "agents-file", env("AGENTBOX_AGENTS_FILE", ""), "YAML file adding ACP agents by name, command, args and env (see docs/acp.md) [AGENTBOX_AGENTS_FILE]")
	f.StringVar(&agentModels, "agent-models", env("AGENTBOX_AGENT_MODELS", ""), "more models the provider configuration of pi, opencode and opencode-acp declares, which sessions may select and switch to: NAME=MODEL[,MODEL...] entries separated by ; (e.g. pi=gpt-5,gpt-5-mini;opencode=gpt-5) [AGENTBOX_AGENT_MODELS]")
	f.IntVar(&cfg.ExecPool, "exec-pool", envInt("AGENTBOX_EXEC_POOL", execution.DefaultPoolSize), "warm sandboxes kept ready per execution policy; 0 disables the pool [AGENTBOX_EXEC_POOL]")
	f.IntVar(&cfg.MaxProcesses, "max-processes", envInt("AGENTBOX_MAX_PROCESSES", execution.DefaultMaxConcurrent), "concurrent executions and processes; more get 429 [AGENTBOX_MAX_PROCESSES]")
	f.StringVar(&cfg.GlobalPolicy, "global-policy", env("AGENTBOX_GLOBAL_POLICY", ""), "operator sandbox policy file every session and execution is intersected with (see docs/policy.md) [AGENTBOX_GLOBAL_POLICY]")
	f.StringVar(&cfg.SessionPolicy, "session-policy", env("AGENTBOX_SESSION_POLICY", ""), "policy preset for sessions created without a policy, e.g. agent-default; empty runs their agents unsandboxed [AGENTBOX_SESSION_POLICY]")
	f.StringVar(&cfg.SecretsFile, "secrets-file", env("AGENTBOX_SECRETS_FILE", ""), "YAML file of secrets the egress proxy adds to requests for their host; values come from the environment or files and stay in memory (see docs/sandbox.md) [AGENTBOX_SECRETS_FILE]")
	f.DurationVar(&cfg.NetworkAskTimeout, "network-ask-timeout", envDuration("AGENTBOX_NETWORK_ASK_TIMEOUT", daemon.DefaultNetworkAskTimeout), "deny a sandboxed connection whose approval (network.default ask) is not answered within this [AGENTBOX_NETWORK_ASK_TIMEOUT]")
	f.StringVar(&cfg.EgressCAFile, "egress-ca-file", env("AGENTBOX_EGRESS_CA_FILE", ""), "PEM roots the egress proxy also trusts for model-API upstreams over TLS [AGENTBOX_EGRESS_CA_FILE]")
	f.BoolVar(&cfg.KeepAgentHomes, "keep-agent-homes", os.Getenv("AGENTBOX_KEEP_AGENT_HOMES") == "1", "keep a sandboxed session's agent home (DATA_DIR/agents/...) when the session is purged [AGENTBOX_KEEP_AGENT_HOMES=1]")
	f.StringVar(&logLevel, "log-level", env("AGENTBOX_LOG_LEVEL", "info"), "debug, info, warn or error; debug adds one line per request [AGENTBOX_LOG_LEVEL]")
	f.StringVar(&logFormat, "log-format", env("AGENTBOX_LOG_FORMAT", "text"), "text (key=value) or json (one object a line); --json is --log-format json [AGENTBOX_LOG_FORMAT]")
	return cmd
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if v, ok := os.LookupEnv(name); ok {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return def
}

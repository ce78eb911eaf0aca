package claude

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"time"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/procrt"
)

// Name is the adapter's registry name.
const Name = "claude"

// Defaults of Options.
const (
	DefaultMaxLine          = procrt.DefaultMaxLine
	DefaultInterruptTimeout = procrt.DefaultInterruptTimeout
	// DefaultInitTimeout bounds the wait for the answer to initialize.
	DefaultInitTimeout = 30 * time.Second
	DefaultCloseGrace  = procrt.DefaultCloseGrace
)

// Options configure the adapter. The composition root fills them in.
type Options struct {
	// Binary finds the CLI: its path and version, or an error when it is
	// not installed (e.g. install.Lookup("claude")). Nil means looking up
	// "claude" in PATH.
	Binary func() (path, version string, err error)
	// BaseURL and APIKey are the daemon's defaults for ANTHROPIC_BASE_URL
	// and ANTHROPIC_API_KEY; a session's own Env overrides them.
	BaseURL, APIKey string
	// ExtraEnv is added to every session's environment (before the
	// session's own Env).
	ExtraEnv map[string]string
	// HomeDir is the CLI's HOME: its settings and its session transcripts
	// (which resume needs) live there. It is shared by the sessions of
	// this adapter. Empty means a temporary directory made once per
	// adapter, so sessions can be resumed only while the daemon runs.
	HomeDir string
	// Raw keeps the CLI's original line in each event (off by default).
	Raw bool
	// MaxLine bounds one stdout line (DefaultMaxLine); a longer line is
	// skipped and reported as an error event.
	MaxLine int
	// InterruptTimeout is how long an interrupt waits for the CLI to end
	// the turn before the process is killed (DefaultInterruptTimeout).
	InterruptTimeout time.Duration
	// CloseGrace is how long Close waits after closing stdin, and again
	// after SIGTERM, before it escalates (DefaultCloseGrace).
	CloseGrace time.Duration
	// InitTimeout bounds the wait at start for the CLI's answer to
	// initialize, which lists its models (DefaultInitTimeout); without
	// one the session runs without a list.
	InitTimeout time.Duration
}

// New returns the Claude Code adapter.
func New(opts Options) agent.Adapter {
	procrt.OrDefault(&opts.MaxLine, DefaultMaxLine)
	procrt.OrDefault(&opts.InterruptTimeout, DefaultInterruptTimeout)
	procrt.OrDefault(&opts.CloseGrace, DefaultCloseGrace)
	procrt.OrDefault(&opts.InitTimeout, DefaultInitTimeout)
	if opts.Binary == nil {
		opts.Binary = procrt.LookPath("claude")
	}
	return &adapter{opts: opts, homes: procrt.Homes{
		Dir: &agent.Dir{Path: opts.HomeDir, Prefix: "agentbox-claude-home-"}, Sessions: "sessions"}}
}

type adapter struct {
	opts Options

	// homes are the CLI's: the adapter's shared home, and a home of its
	// own for each sandboxed session below it (sessions/ID), so that a
	// sandboxed agent sees no other session's transcripts.
	homes procrt.Homes
}

var _ agent.Adapter = (*adapter)(nil)

// capabilities says what the adapter produces. Each flag is backed by a
// test against the real CLI (e2e_test.go) and by the golden transcripts:
// text, deltas and usage (TestE2EWriteFile), reasoning (TestE2EThinking,
// hand-partial-thinking), tool calls, file changes and diffs
// (TestE2EWriteFile, TestE2EWritePermission, stream-tools-bypass), command
// output (TestE2EPermission, stream-tools-bypass), permissions
// (TestE2EPermission, TestE2EPermissionModes), questions and plans
// (TestE2EPlanQuestionAndImage, stream-question, stream-tasks), images
// (TestConformance/*/content, TestE2EPlanQuestionAndImage, TestUserMessageLine),
// files (TestConformance/*/content, TestUserMessageLine), resume (TestE2EResume), interrupt
// (TestE2EInterrupt, TestE2EInterruptWhileAsking), model list (the
// models of the CLI's answer to its initialize control request) and switch
// (TestE2EModelSwitch, TestInitializeModels). No modes: the CLI's permission mode is agentbox's
// permission_mode, chosen at create under the policy, not a mode a PATCH
// may switch; the output styles it lists are not offered.
var capabilities = agent.Capabilities{
	Text: true, Deltas: true, Reasoning: true, ToolCalls: true,
	CommandOutput: true, FileChanges: true, Diffs: true,
	Permissions: true, Questions: true, Images: true, Files: true, Plans: true,
	Usage: true, Resume: true, Interrupt: true, ModelList: true, ModelSwitch: true, MCP: true,
}

// Info implements agent.Adapter.
func (a *adapter) Info(context.Context) agent.Info {
	path, version, err := a.opts.Binary()
	return agent.Info{Name: Name, Title: "Claude Code", Capabilities: capabilities}.Located(path, version, err,
		"the claude CLI is not installed (run `agentbox agents install claude`)")
}

// Permission modes: agentbox's → the CLI's --permission-mode.
var permissionModes = map[string]string{
	"": "", "default": "", "accept_edits": "acceptEdits", "bypass": "bypassPermissions", "plan": "plan",
}

// command is how a session's process is started.
type command struct {
	path string
	args []string
	env  []string
	dir  string
}

// buildCommand makes the CLI's command line and environment for cfg.
func (a *adapter) buildCommand(cfg agent.Config, bin, home, sessionID string) (command, error) {
	mode, ok := permissionModes[cfg.PermissionMode]
	if !ok {
		return command{}, fmt.Errorf("claude: unknown permission mode %q", cfg.PermissionMode)
	}
	args := []string{"-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
		"--permission-prompt-tool", "stdio", "--include-partial-messages"}
	if cfg.Model != "" {
		args = append(args, "--model", cfg.Model)
	}
	if mode != "" {
		args = append(args, "--permission-mode", mode)
	}
	if cfg.NativeSessionID != "" {
		args = append(args, "--resume", cfg.NativeSessionID)
	} else {
		args = append(args, "--session-id", sessionID)
	}
	mcpArgs, mcpEnv, err := mcpConfig(cfg.MCPServers)
	if err != nil {
		return command{}, err
	}
	args = append(args, mcpArgs...)

	env := QuietEnv()
	env["PATH"], env["HOME"] = procrt.BasePath(bin), home
	// Offer the model the task-list tools (TaskCreate/TaskUpdate/…), which
	// -p mode leaves out otherwise; they become plan items.
	env["CLAUDE_CODE_ENABLE_TODO_TOOLS"] = "1"
	if a.opts.BaseURL != "" {
		env["ANTHROPIC_BASE_URL"] = a.opts.BaseURL
	}
	if a.opts.APIKey != "" {
		env["ANTHROPIC_API_KEY"] = a.opts.APIKey
	}
	if mode == "bypassPermissions" && os.Geteuid() == 0 {
		// As root the CLI refuses to bypass permissions unless it is told
		// it runs in a sandbox.
		env["IS_SANDBOX"] = "1"
	}
	for k, v := range a.opts.ExtraEnv {
		env[k] = v
	}
	for k, v := range cfg.Env {
		env[k] = v
	}
	for k, v := range mcpEnv {
		env[k] = v
	}
	return command{path: bin, args: args, env: procrt.EnvList(env), dir: cfg.Cwd}, nil
}

// Start implements agent.Adapter: it starts the CLI in the session's
// directory and returns once the process runs (the CLI says nothing until
// the first message).
func (a *adapter) Start(ctx context.Context, cfg agent.Config, host agent.Host) (agent.Session, error) {
	bin, err := procrt.Locate("claude", cfg.Cwd, a.opts.Binary, "the CLI is not installed (run `agentbox agents install claude`)")
	if err != nil {
		return nil, err
	}
	home, err := a.homes.For(cfg.SessionID, cfg.Sandbox != nil)
	if err != nil {
		return nil, fmt.Errorf("claude: home directory: %w", err)
	}
	nativeID := cfg.NativeSessionID
	if nativeID == "" {
		nativeID = newUUID()
	}
	cmd, err := a.buildCommand(cfg, bin, home, nativeID)
	if err != nil {
		return nil, err
	}
	s, err := startSession(a.opts, cmd, cfg, host, nativeID)
	if err != nil {
		return nil, err
	}
	if err := host.SetNativeSessionID(ctx, nativeID); err != nil {
		s.Kill()
		<-s.Done()
		return nil, fmt.Errorf("claude: %w", err)
	}
	// The model list is informative: a CLI that does not answer initialize
	// (in time) still runs the session, without a list.
	ictx, cancel := context.WithTimeout(ctx, a.opts.InitTimeout)
	defer cancel()
	_ = s.initialize(ictx, cfg.Model)
	return s, nil
}

// RemoveState implements agent.SandboxNeeder: the home of a sandboxed
// session.
func (a *adapter) RemoveState(sessionID string) error { return a.homes.RemoveState(sessionID) }

// Providers implements agent.ProviderUser: the Anthropic API, as the
// session's Env or the adapter's defaults configure it.
func (a *adapter) Providers(cfg agent.Config) []agent.Provider {
	return []agent.Provider{agent.Anthropic(cfg.Env, a.opts.BaseURL, a.opts.APIKey)}
}

// SandboxPaths implements agent.SandboxNeeder: the installed CLI (read)
// and the session's home (write).
func (a *adapter) SandboxPaths(cfg agent.Config) (read, write []string) {
	return a.homes.SandboxPaths(cfg.SessionID, a.opts.Binary)
}

// newUUID returns a random (version 4) UUID, the form --session-id takes.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// QuietEnv is the environment that keeps Claude Code (this adapter's CLI
// and the one claude-code-acp bundles) to the model API: no telemetry,
// error reports, update checks or other traffic.
func QuietEnv() map[string]string {
	return map[string]string{
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
		"DISABLE_TELEMETRY":                        "1",
		"DISABLE_ERROR_REPORTING":                  "1",
		"DISABLE_AUTOUPDATER":                      "1",
		// Claude Code fetches its "fast mode" status at start and before
		// each query from https://api.anthropic.com/api/claude_code_penguin_mode,
		// not from ANTHROPIC_BASE_URL, with the API key in x-api-key, and
		// NONESSENTIAL_TRAFFIC does not stop it (seen with the CLI that
		// claude-code-acp 0.16.2 bundles): in a sandbox a network ask no
		// rule settles, outside one the key sent to a host the daemon did
		// not name.
		"CLAUDE_CODE_DISABLE_FAST_MODE": "1",
	}
}

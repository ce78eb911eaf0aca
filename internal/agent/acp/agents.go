package acp

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/claude"
	"github.com/agentbox/agentbox/internal/agent/install"
	"github.com/agentbox/agentbox/internal/agent/opencode"
)

// Registry names of the built-in ACP agents.
const (
	NameGemini     = "gemini"
	NameClaudeCode = "claude-code-acp"
	NameCodex      = "codex-acp"
	NameOpenCode   = "opencode-acp"
)

// Config configures the built-in ACP agents. The composition root fills it
// in; a session's Env overrides any variable set here.
type Config struct {
	// DataDir holds the agents' private homes, DataDir/agents/<name>/home
	// and a sandboxed session's DataDir/agents/<name>/sessions/<id>.
	// Empty means a directory of each adapter's own, made on first use
	// under the temp dir (for codex-acp under /var/tmp: Codex cannot set
	// up its sandbox under /tmp).
	DataDir string
	// Provider defaults: the base URLs and keys the agents' model calls
	// use (the fake LLM's in tests).
	AnthropicBaseURL, AnthropicAPIKey string // claude-code-acp
	OpenAIBaseURL, OpenAIAPIKey       string // codex-acp, opencode-acp (a base URL ending in /v1)
	GeminiBaseURL, GeminiAPIKey       string // gemini
	// GeminiMaxAttempts bounds Gemini's attempts per model request (0:
	// its default, 10 with backoff, which holds a failing turn for
	// minutes).
	GeminiMaxAttempts int
	// CodexModel and OpenCodeModel are the default models of codex-acp
	// and opencode-acp (Codex's own default; DefaultOpenCodeModel).
	CodexModel, OpenCodeModel string
	// OpenCodeModels are more models opencode-acp's provider declares
	// (opencode.json), which a session may select or switch to; the
	// agent lists them itself.
	OpenCodeModels []string
	// Binary finds an installed agent (nil: install.Binary).
	Binary func(name string) func() (path, version string, err error)
	// Options tune the generic adapter.
	Options Options
}

// DefaultOpenCodeModel is opencode-acp's model when none is configured.
const DefaultOpenCodeModel = "gpt-4.1"

// Agents returns the built-in ACP agents by registry name.
func Agents(c Config) map[string]agent.Adapter {
	return map[string]agent.Adapter{
		NameGemini:     Gemini(c),
		NameClaudeCode: ClaudeCode(c),
		NameCodex:      Codex(c),
		NameOpenCode:   OpenCode(c),
	}
}

func (c Config) binary(installName string) func() (string, string, error) {
	if c.Binary != nil {
		return c.Binary(installName)
	}
	return install.Binary(installName)
}

// dir is where agent name keeps its homes: DataDir/agents/name (home,
// sessions/ID), or "" for a private temporary directory.
func (c Config) dir(name string) string {
	if c.DataDir == "" {
		return ""
	}
	return filepath.Join(c.DataDir, "agents", name)
}

// withSession adds the session's own variables on top.
func withSession(env map[string]string, cfg agent.Config) map[string]string {
	maps.Copy(env, cfg.Env)
	return env
}

func setIf(env map[string]string, k, v string) {
	if v != "" {
		env[k] = v
	}
}

// Capabilities of the built-in agents. Each true flag is backed by a test
// named in the comment above it (conformance_test.go, e2e_test.go and the
// goldens of translate_test.go). Images and files, for all four: each
// declares image and embeddedContext in its promptCapabilities at
// initialize (claude-code-acp 0.16.2, codex-acp 0.16.0, opencode 1.18.33,
// gemini 0.61.0), and the conformance suite's content subtest checks that an image block's bytes
// and an embedded resource's text reach the model; promptBlocks refuses
// a part an agent's initialize does not declare (TestPromptBlocks).

// geminiCaps: TestConformanceGemini backs text, deltas, file changes with
// diffs and usage (write), permissions and command output
// (permission_allow/deny), interrupt (interrupt); generic tool calls are
// backed by TestGolden (hand-thoughts-plan); TestE2EGeminiSwitch backs the
// model list and the model and mode switch. Resume (session/load) is
// implemented but not claimed: no test covers it yet.
var geminiCaps = agent.Capabilities{
	Images: true, Files: true,
	Text: true, Deltas: true, ToolCalls: true, CommandOutput: true, FileChanges: true, Diffs: true,
	Permissions: true, Usage: true, Interrupt: true, ModelList: true, ModelSwitch: true, ModeSwitch: true,
}

// Gemini is Gemini CLI over ACP (gemini --acp), with a private HOME whose
// settings select API-key auth and turn telemetry off.
//
// The workspace is the agent's (a hostile repository's), and much of what
// its .gemini/settings.json may set runs a command: MCP servers, the MCP
// server command prefix, tool discovery and call commands, hooks; other
// settings lift the session's permission prompts (tools.allowed). So none
// of it applies: folder trust is on and the workspace is never trusted
// (trustedFolders.json is ours and lists none), and gemini then loads
// settings only from the user and system files, both ours
// (TestE2EGeminiWorkspaceMCPConfigIgnored). gemini 0.61.0 starts no MCP
// server at all in an untrusted folder, the session's own neither, and
// trusts a folder for both or for neither: so gemini does not claim MCP,
// and a session that gives it MCP servers is refused.
func Gemini(c Config) agent.Adapter {
	return New(Agent{
		Name: NameGemini, Title: "Gemini CLI", Binary: c.binary("gemini"), Caps: geminiCaps,
		ExitsOnEOF: true,
		Dir:        c.dir(NameGemini),
		Setup: func(dir string) error {
			// No workspace is trusted (trustedFolders.json is ours and
			// lists none): the workspace's settings never apply.
			trust := map[string]any{"security": map[string]any{"folderTrust": map[string]any{"enabled": true}}}
			if err := writeJSON(dir, geminiSystemSettings, trust); err != nil {
				return err
			}
			settings := map[string]any{
				"security": map[string]any{
					"auth":        map[string]any{"selectedType": "gemini-api-key"},
					"folderTrust": map[string]any{"enabled": true},
				},
				"privacy":   map[string]any{"usageStatisticsEnabled": false},
				"telemetry": map[string]any{"enabled": false},
			}
			if c.GeminiMaxAttempts > 0 {
				settings["general"] = map[string]any{"maxAttempts": c.GeminiMaxAttempts}
			}
			return writeJSON(dir, ".gemini/settings.json", settings)
		},
		PermissionModes: map[string]string{"": "default", "default": "default", "accept_edits": "autoEdit", "bypass": "yolo", "plan": "plan"},
		Providers: func(cfg agent.Config) []agent.Provider {
			return []agent.Provider{agent.Gemini(cfg.Env, c.GeminiBaseURL, c.GeminiAPIKey)}
		},
		Command: func(cfg agent.Config, bin, home string) ([]string, map[string]string, error) {
			env := map[string]string{
				"PATH": basePath(bin), "HOME": home,
				// Relaunching itself (for memory flags) would put a second
				// node process between us and the agent.
				"GEMINI_CLI_NO_RELAUNCH": "1",
			}
			setIf(env, "GEMINI_API_KEY", c.GeminiAPIKey)
			setIf(env, "GOOGLE_GEMINI_BASE_URL", c.GeminiBaseURL)
			env = withSession(env, cfg)
			// With API-key auth the CLI reads GEMINI_API_KEY only; a
			// session that sets GOOGLE_API_KEY (the Google SDKs' name)
			// means it.
			if env["GEMINI_API_KEY"] == "" {
				setIf(env, "GEMINI_API_KEY", env["GOOGLE_API_KEY"])
			}
			// After the session's variables, which must not undo it:
			// the workspace untrusted (see Gemini), by system settings of
			// ours that outrank any /etc/gemini-cli/settings.json turning
			// folder trust off.
			delete(env, "GEMINI_CLI_TRUST_WORKSPACE")
			delete(env, "GEMINI_CLI_SYSTEM_DEFAULTS_PATH")
			env["GEMINI_CLI_SYSTEM_SETTINGS_PATH"] = filepath.Join(home, geminiSystemSettings)
			return []string{"--acp"}, env, nil
		},
	}, c.Options)
}

// geminiSystemSettings is gemini's system settings file in its home (the
// highest-ranking settings): folder trust on.
const geminiSystemSettings = ".gemini/system-settings.json"

// claudeCaps: TestConformanceClaudeCode backs text, deltas, file changes
// with diffs (write) and interrupt (interrupt); TestE2EClaudeCodePermissions
// backs permissions and command items (allow and deny); TestGolden backs
// tool calls; TestE2EClaudeCodeSwitch backs the model list and the model
// and mode switch. claude-code-acp reports no token usage.
var claudeCaps = agent.Capabilities{
	Images: true, Files: true,
	Text: true, Deltas: true, ToolCalls: true, CommandOutput: true, FileChanges: true, Diffs: true,
	Permissions: true, Interrupt: true, ModelList: true, ModelSwitch: true, ModeSwitch: true, MCP: true,
}

// ClaudeCode is Zed's claude-code-acp (Claude Code through its agent SDK).
func ClaudeCode(c Config) agent.Adapter {
	return New(Agent{
		Name: NameClaudeCode, Title: "Claude Code (ACP)", Binary: c.binary(NameClaudeCode), Caps: claudeCaps,
		Dir: c.dir(NameClaudeCode),
		PermissionModes: map[string]string{"": "default", "default": "default", "accept_edits": "acceptEdits",
			"bypass": "bypassPermissions", "plan": "plan"},
		// Only the session's MCP servers (its mcpServers): the workspace
		// is the agent's, and its .mcp.json with project settings that
		// enable its servers would start any command it names.
		SessionMeta: map[string]any{"claudeCode": map[string]any{"options": map[string]any{"strictMcpConfig": true}}},
		Providers: func(cfg agent.Config) []agent.Provider {
			return []agent.Provider{agent.Anthropic(cfg.Env, c.AnthropicBaseURL, c.AnthropicAPIKey)}
		},
		Command: func(cfg agent.Config, bin, home string) ([]string, map[string]string, error) {
			env := claude.QuietEnv()
			env["PATH"], env["HOME"] = basePath(bin), home
			if os.Geteuid() == 0 {
				// As root, session/new fails unless the CLI is told it
				// runs in a sandbox ("--dangerously-skip-permissions
				// cannot be used with root").
				env["IS_SANDBOX"] = "1"
			}
			setIf(env, "ANTHROPIC_BASE_URL", c.AnthropicBaseURL)
			setIf(env, "ANTHROPIC_API_KEY", c.AnthropicAPIKey)
			return nil, withSession(env, cfg), nil
		},
	}, c.Options)
}

// codexCaps: TestE2ECodexSwitch backs the model list and the model switch
// (codex-acp offers no modes). TestConformanceCodex backs text, deltas, file changes with
// diffs (write, two_turns) and interrupt (interrupt);
// TestE2ECodexPermissions backs permissions and command items with their
// exit code (allow and deny); TestGolden backs tool calls. codex-acp's only
// rejection cancels the turn, so the shared suite runs without its
// permission subtests. Its usage_update carries the context window's fill,
// not the turn's tokens: no usage.
var codexCaps = agent.Capabilities{
	Images: true, Files: true,
	Text: true, Deltas: true, ToolCalls: true, CommandOutput: true, FileChanges: true, Diffs: true,
	Permissions: true, Interrupt: true, ModelList: true, ModelSwitch: true, MCP: true,
}

// Codex is Zed's codex-acp (the native binary), with a CODEX_HOME holding
// a generated config.toml: the provider "agentbox" (the Responses API,
// its key in OPENAI_API_KEY), approvals for commands and edits
// ("untrusted"), the workspace-write sandbox, no plugins or analytics
// (which would reach github.com and chatgpt.com). The provider's base URL
// is not in the file but on the command line, from the session's provider
// (codexProvider): the daemon's or the session's upstream, or, in a
// sandboxed session, the egress proxy's route, so that a sandboxed
// session's home never names the upstream.
func Codex(c Config) agent.Adapter {
	return New(Agent{
		Name: NameCodex, Title: "Codex (ACP)", Binary: c.binary(NameCodex), Caps: codexCaps,
		// CODEX_HOME must not be under /tmp: Codex refuses to create its
		// sandbox helper there and every shell call then fails.
		Dir: c.dir(NameCodex), TempDir: "/var/tmp",
		Setup: func(dir string) error {
			return writeIn(dir, "config.toml", []byte(codexConfig(c)))
		},
		Providers: func(cfg agent.Config) []agent.Provider { return []agent.Provider{codexProvider(c, cfg)} },
		Command: func(cfg agent.Config, bin, home string) ([]string, map[string]string, error) {
			if underTemp(home) {
				return nil, nil, fmt.Errorf("CODEX_HOME %s is under the temp dir, where Codex cannot create its sandbox helper: run the daemon with a --data-dir outside it", home)
			}
			p := codexProvider(c, cfg)
			env := withSession(map[string]string{"PATH": basePath(bin), "HOME": home, "CODEX_HOME": home}, cfg)
			// The provider of config.toml reads OPENAI_API_KEY: the key
			// the session's provider takes (Codex's own CODEX_API_KEY
			// when OPENAI_API_KEY is not set; a placeholder in a sandbox).
			setIf(env, "OPENAI_API_KEY", p.Key())
			var args []string
			if cfg.Sandbox != nil {
				// Codex's own sandbox (bubblewrap) needs namespaces that
				// agentbox's sandbox refuses, and every command would
				// fail; agentbox's sandbox is the boundary then.
				args = append(args, "-c", `sandbox_mode="danger-full-access"`)
			}
			args = append(args, "-c", "model_providers.agentbox.base_url="+strconv.Quote(p.Upstream()))
			// The workspace is the agent's (a hostile repository's): its
			// .codex/config.toml must not configure the session (e.g.
			// start the MCP servers it names). Codex reads a project's
			// layer only for a trusted project: say it is not, rather
			// than rely on Codex's default for one it has not seen.
			args = append(args, "-c", "projects={"+strconv.Quote(cfg.Cwd)+"={trust_level=\"untrusted\"}}")
			return args, env, nil
		},
	}, c.Options)
}

// codexProvider is codex-acp's model API for session cfg: OpenAI's, as the
// session's env (in a sandbox: the route and the placeholders), else the
// daemon's configure it, with Codex's CODEX_API_KEY after OPENAI_API_KEY.
func codexProvider(c Config, cfg agent.Config) agent.Provider {
	return agent.OpenAI(cfg.Env, c.OpenAIBaseURL, c.OpenAIAPIKey).With(
		agent.Credential{ID: "codex-api-key", Env: "CODEX_API_KEY", Value: cfg.Env["CODEX_API_KEY"], Headers: agent.Bearer})
}

// codexConfig is codex-acp's config.toml. It names no base URL and holds no
// key: Command gives both, from the session's provider.
func codexConfig(c Config) string {
	var b strings.Builder
	b.WriteString("# Generated by agentbox; rewritten when a session starts.\n")
	if c.CodexModel != "" {
		fmt.Fprintf(&b, "model = %s\n", strconv.Quote(c.CodexModel))
	}
	b.WriteString("model_provider = \"agentbox\"\napproval_policy = \"untrusted\"\nsandbox_mode = \"workspace-write\"\n")
	b.WriteString("\n[features]\nplugins = false\n\n[analytics]\nenabled = false\n")
	b.WriteString("\n[model_providers.agentbox]\nname = \"agentbox\"\nenv_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\nrequest_max_retries = 0\nstream_max_retries = 1\n")
	return b.String()
}

// underTemp reports whether dir is inside the system temp dir.
func underTemp(dir string) bool {
	tmp, err := filepath.EvalSymlinks(os.TempDir())
	if err != nil {
		tmp = os.TempDir()
	}
	abs, err := filepath.EvalSymlinks(dir)
	if err != nil {
		abs = dir
	}
	rel, err := filepath.Rel(tmp, abs)
	return err == nil && filepath.IsLocal(rel) || rel == "."
}

// openCodeCaps: TestConformanceOpenCode (the whole shared suite) backs
// text, deltas, usage, file changes with diffs (write), permissions and
// command items (permission_allow/deny), interrupt (interrupt); TestGolden
// backs tool calls; TestE2EOpenCodeSwitch backs the model list and the
// model and mode switch. Reasoning is not claimed: no test covers it yet.
var openCodeCaps = agent.Capabilities{
	Images: true, Files: true,
	Text: true, Deltas: true, ToolCalls: true, CommandOutput: true, FileChanges: true, Diffs: true,
	Permissions: true, Usage: true, Interrupt: true, ModelList: true, ModelSwitch: true, ModeSwitch: true, MCP: true,
}

// OpenCode is `opencode acp`, with a private home whose opencode.json
// names the provider at Config.OpenAIBaseURL and asks before every command
// and edit.
func OpenCode(c Config) agent.Adapter {
	model := orDefault(c.OpenCodeModel, DefaultOpenCodeModel)
	models := opencode.Models(model, c.OpenCodeModels)
	return New(Agent{
		Name: NameOpenCode, Title: "OpenCode (ACP)", Binary: c.binary("opencode"), Caps: openCodeCaps,
		ExitsOnEOF: true,
		Dir:        c.dir(NameOpenCode),
		Setup: func(dir string) error {
			for _, d := range []string{"home", "config", "data", "cache", "state"} {
				if err := mkdirIn(dir, d); err != nil {
					return err
				}
			}
			cfg := map[string]any{
				"$schema": "https://opencode.ai/config.json",
				"provider": map[string]any{"agentbox": map[string]any{
					"npm": "@ai-sdk/openai-compatible", "name": "agentbox",
					"options": map[string]any{"baseURL": "{env:AGENTBOX_OPENCODE_BASE_URL}", "apiKey": "{env:AGENTBOX_OPENCODE_API_KEY}"},
					"models":  models,
				}},
				"model": "agentbox/" + model, "small_model": "agentbox/" + model,
				"autoupdate": false, "share": "disabled",
				"permission": map[string]any{"bash": "ask", "edit": "ask"},
				// OpenCode's ACP side rejects a denied call without a
				// message, which otherwise ends the turn; with this the
				// model hears of the refusal and goes on, as with the
				// other agents.
				"experimental": map[string]any{"continue_loop_on_deny": true},
			}
			return writeJSON(dir, "opencode.json", cfg)
		},
		PermissionModes: map[string]string{"plan": "plan"},
		Providers:       func(cfg agent.Config) []agent.Provider { return []agent.Provider{openCodeProvider(c, cfg)} },
		Command: func(cfg agent.Config, bin, home string) ([]string, map[string]string, error) {
			// opencode.json takes the provider's URL and key from two
			// variables of the session's provider: the session's
			// OPENAI_* (in a sandbox, the route and the placeholder), else
			// the daemon's.
			p := openCodeProvider(c, cfg)
			baseURL := p.BaseURL
			if baseURL == "" {
				return nil, nil, errors.New("no provider base URL (set the daemon's or the session's OPENAI_BASE_URL)")
			}
			env := map[string]string{
				"PATH": basePath(bin), "HOME": filepath.Join(home, "home"),
				"XDG_CONFIG_HOME": filepath.Join(home, "config"), "XDG_DATA_HOME": filepath.Join(home, "data"),
				"XDG_CACHE_HOME": filepath.Join(home, "cache"), "XDG_STATE_HOME": filepath.Join(home, "state"),
				"OPENCODE_CONFIG":                  filepath.Join(home, "opencode.json"),
				"OPENCODE_DISABLE_MODELS_FETCH":    "1",
				"OPENCODE_DISABLE_AUTOUPDATE":      "1",
				"OPENCODE_DISABLE_LSP_DOWNLOAD":    "1",
				"OPENCODE_DISABLE_SHARE":           "1",
				"OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
				"OPENCODE_DISABLE_CLAUDE_CODE":     "1",
				"OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
				"OPENCODE_DISABLE_PROJECT_CONFIG":  "1",
				// The plugin lookups at start reach the provider's host
				// only (and fail fast there).
				"npm_config_registry": registryFor(baseURL),
			}
			env = withSession(env, cfg)
			env["AGENTBOX_OPENCODE_BASE_URL"] = baseURL
			env["AGENTBOX_OPENCODE_API_KEY"] = p.Key()
			return []string{"acp"}, env, nil
		},
	}, c.Options)
}

// openCodeProvider is opencode-acp's model API for session cfg: an
// OpenAI-compatible one, as the session's env (in a sandbox: the route
// and the placeholder), else the daemon's configure it.
func openCodeProvider(c Config, cfg agent.Config) agent.Provider {
	return agent.OpenAI(cfg.Env, c.OpenAIBaseURL, c.OpenAIAPIKey)
}

func registryFor(baseURL string) string {
	if i := strings.Index(baseURL, "://"); i >= 0 {
		if j := strings.IndexByte(baseURL[i+3:], '/'); j >= 0 {
			return baseURL[:i+3+j] + "/"
		}
		return strings.TrimSuffix(baseURL, "/") + "/"
	}
	return "http://127.0.0.1:9/"
}

// writeJSON writes v to home/rel (see writeIn).
func writeJSON(home, rel string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeIn(home, rel, b)
}

// writeIn writes data to home/rel, making its directory. A home may be a
// sandboxed session's, whose contents the sandbox wrote: nothing in it,
// no symbolic link above all, may lead the write out of the home.
func writeIn(home, rel string, data []byte) error {
	root, err := os.OpenRoot(home)
	if err != nil {
		return err
	}
	defer root.Close()
	if d := filepath.Dir(rel); d != "." {
		if err := root.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	return root.WriteFile(rel, data, 0o600)
}

// mkdirIn makes home/rel, confined to home as writeIn is.
func mkdirIn(home, rel string) error {
	root, err := os.OpenRoot(home)
	if err != nil {
		return err
	}
	defer root.Close()
	return root.MkdirAll(rel, 0o700)
}

// Custom is an ACP agent added by configuration: any binary that speaks
// ACP on its stdin and stdout.
type Custom struct {
	// Name is the registry name, Title the display name (Name if empty).
	Name, Title string
	// Command is the executable: a path, or a name looked up in PATH.
	Command string
	Args    []string
	// Env is the agent's environment on top of PATH and a private HOME
	// (set HOME here to use another); a session's Env goes on top.
	Env map[string]string
	// FS serves fs/read_text_file and fs/write_text_file to the agent,
	// confined to the session's directory (and advertises them).
	FS bool
	// Terminal serves terminal/* to the agent (and advertises it): its
	// commands run in the session's sandbox, in the session's directory.
	Terminal bool
}

// customCaps: what the generic translation produces for any ACP agent
// (text, deltas, tool calls, permissions: TestGolden and the conformance
// runs of the built-in agents) and what the adapter enforces itself
// (interrupt: session/cancel, then a kill after InterruptTimeout).
// Agent-specific output (usage, command output, diffs) is not promised.
var customCaps = agent.Capabilities{Text: true, Deltas: true, ToolCalls: true, Permissions: true, Interrupt: true, MCP: true}

// FromConfig returns the adapter of a configured ACP agent. Its homes are
// under dataDir/agents/NAME, as the built-in agents' are ("": a private
// temporary directory).
func FromConfig(c Custom, dataDir string, opts Options) (agent.Adapter, error) {
	if c.Name == "" || c.Command == "" {
		return nil, errors.New("acp: a custom agent needs a name and a command")
	}
	if !agent.PlainName(c.Name) {
		// It names the directory of the agent's homes.
		return nil, fmt.Errorf("acp: agent name %q is not a plain name", c.Name)
	}
	return New(Agent{
		Name: c.Name, Title: orDefault(c.Title, c.Name), Caps: customCaps,
		Dir: Config{DataDir: dataDir}.dir(c.Name),
		Binary: func() (string, string, error) {
			p, err := exec.LookPath(c.Command)
			if err != nil {
				return "", "", fmt.Errorf("command %q: %w", c.Command, err)
			}
			if abs, err := filepath.Abs(p); err == nil {
				p = abs
			}
			return p, "", nil
		},
		Command: func(cfg agent.Config, bin, home string) ([]string, map[string]string, error) {
			env := map[string]string{"PATH": basePath(bin), "HOME": home}
			maps.Copy(env, c.Env)
			return append([]string(nil), c.Args...), withSession(env, cfg), nil
		},
		// agentbox does not know which model such an agent calls: the
		// well-known variables its environment sets say so, and a
		// sandboxed session routes those.
		Providers: func(cfg agent.Config) []agent.Provider {
			env := maps.Clone(c.Env)
			if env == nil {
				env = map[string]string{}
			}
			maps.Copy(env, cfg.Env)
			return agent.ProvidersIn(env)
		},
		ExitsOnEOF:    true,
		ServeFS:       c.FS,
		ServeTerminal: c.Terminal,
	}, opts), nil
}

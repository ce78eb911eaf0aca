package pi

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/procrt"
)

// Name is the adapter's registry name.
const Name = "pi"

// Defaults of Options.
const (
	DefaultModel            = "gpt-4.1"
	DefaultProvider         = "agentbox"
	DefaultMaxLine          = procrt.DefaultMaxLine
	DefaultInterruptTimeout = procrt.DefaultInterruptTimeout
	DefaultCloseGrace       = procrt.DefaultCloseGrace
	DefaultStartTimeout     = procrt.DefaultStartTimeout
)

// extensionSource is the approval gate pi loads with -e (see the file).
//
//go:embed extension.ts
var extensionSource []byte

// Options configure the adapter. The composition root fills them in.
type Options struct {
	// Binary finds the CLI: its path and version, or an error when it is
	// not installed (install.Binary("pi")). Nil means "pi" in PATH.
	Binary func() (path, version string, err error)
	// Home is the adapter's own directory: pi's HOME and agent directory
	// (models.json, settings.json, the extension, session files) live
	// under it. Empty means a temporary directory made once per adapter.
	Home string
	// BaseURL and APIKey are the OpenAI-compatible provider pi talks to
	// (Chat Completions; the base URL ends in /v1). A session's Env
	// OPENAI_BASE_URL and OPENAI_API_KEY override them. The key is written
	// to models.json in Home (mode 0600), never logged.
	BaseURL, APIKey string
	// Model is the model id used when a session names none (DefaultModel).
	Model string
	// Models are more model ids the provider declares (models.json),
	// which a session may select or switch to; pi lists them itself
	// (get_available_models).
	Models []string
	// AutoRetry lets pi retry failed model requests itself (with backoff
	// of 2, 4 and 8 s). Off by default: an upstream failure then ends the
	// turn at once with a retryable error event, and retrying is the
	// client's call.
	AutoRetry bool
	// ExtraEnv is added to every session's environment (before the
	// session's own Env).
	ExtraEnv map[string]string
	// Raw keeps pi's original line in each event.
	Raw bool
	// MaxLine bounds one stdout line (DefaultMaxLine).
	MaxLine int
	// InterruptTimeout is how long an interrupt waits for pi to end the
	// turn after the abort command before the process is killed.
	InterruptTimeout time.Duration
	// CloseGrace is how long Close waits after closing stdin, and again
	// after SIGTERM, before it escalates.
	CloseGrace time.Duration
	// StartTimeout bounds pi's start-up (DefaultStartTimeout).
	StartTimeout time.Duration
}

// New returns the pi adapter.
func New(opts Options) agent.Adapter {
	if opts.Model == "" {
		opts.Model = DefaultModel
	}
	procrt.OrDefault(&opts.MaxLine, DefaultMaxLine)
	procrt.OrDefault(&opts.InterruptTimeout, DefaultInterruptTimeout)
	procrt.OrDefault(&opts.CloseGrace, DefaultCloseGrace)
	procrt.OrDefault(&opts.StartTimeout, DefaultStartTimeout)
	if opts.Binary == nil {
		opts.Binary = procrt.LookPath("pi")
	}
	return &adapter{opts: opts, homes: procrt.Homes{
		Dir: &agent.Dir{Path: opts.Home, Prefix: "agentbox-pi-"}, Sessions: "sandboxed"}}
}

type adapter struct {
	opts Options

	// homes are pi's HOMEs: the adapter's shared one, and one of its own
	// for each sandboxed session below it (sandboxed/ID, so a resumed
	// session finds its session files), so that a sandboxed agent sees no
	// other session's files.
	homes procrt.Homes
}

var _ agent.Adapter = (*adapter)(nil)

// capabilities says what the adapter produces; each flag is backed by a
// test: text, deltas, usage, tool calls, file changes, diffs, command
// output, permissions and interrupt by the conformance suite
// (conformance_test.go) and the golden transcripts; reasoning by the
// thinking transcript and TestE2EThinking; resume by TestE2EResume; the
// model list and switch by TestE2EModelSwitch (pi has no modes); a pi that
// refuses get_available_models runs without a list (TestE2EModelListRefused).
// Images reach pi as the prompt's images (promptFor; the generated model
// declares image input, else pi omits them), files as their text
// (agent.FileText: pi has no file input): the conformance suite's content
// subtest checks both at the model.
var capabilities = agent.Capabilities{
	Text: true, Deltas: true, Reasoning: true, ToolCalls: true,
	CommandOutput: true, FileChanges: true, Diffs: true,
	Permissions: true, Images: true, Files: true, Usage: true, Interrupt: true, Resume: true,
	ModelList: true, ModelSwitch: true,
}

// Info implements agent.Adapter.
func (a *adapter) Info(context.Context) agent.Info {
	path, version, err := a.opts.Binary()
	return agent.Info{Name: Name, Title: "Pi", Capabilities: capabilities}.Located(path, version, err,
		"the pi CLI is not installed (run `agentbox agents install pi`)")
}

// RemoveState implements agent.SandboxNeeder: the home of a sandboxed
// session.
func (a *adapter) RemoveState(sessionID string) error { return a.homes.RemoveState(sessionID) }

// Providers implements agent.ProviderUser: the OpenAI-compatible API pi
// is configured with, from the session's Env or the adapter's defaults.
func (a *adapter) Providers(cfg agent.Config) []agent.Provider {
	return []agent.Provider{agent.OpenAI(cfg.Env, a.opts.BaseURL, a.opts.APIKey)}
}

// SandboxPaths implements agent.SandboxNeeder: the installed CLI (read)
// and the session's home (write).
func (a *adapter) SandboxPaths(cfg agent.Config) (read, write []string) {
	return a.homes.SandboxPaths(cfg.SessionID, a.opts.Binary)
}

// Which tools ask and which are refused, by permission mode: pi asks for
// nothing itself, so the extension does it for these.
var permissionModes = map[string]struct{ ask, deny string }{
	"":             {ask: "bash,write,edit"},
	"default":      {ask: "bash,write,edit"},
	"accept_edits": {ask: "bash"},
	"bypass":       {},
	"plan":         {deny: "bash,write,edit"},
}

// sessionDirs makes the private agent directory of one session start: pi
// reads its models.json, settings.json and the extension from there. The
// session files live in the adapter's shared sessions directory, so a
// resumed session finds them.
func (a *adapter) sessionDir(home, baseURL, apiKey, model string) (string, error) {
	dir, err := os.MkdirTemp(home, "run-")
	if err != nil {
		return "", err
	}
	// input: pi drops the image parts of a prompt ("image omitted") for a
	// model that does not declare image input.
	declared := []any{map[string]any{"id": model, "reasoning": false, "input": []string{"text", "image"}}}
	for _, m := range a.opts.Models {
		if m != model {
			declared = append(declared, map[string]any{"id": m, "reasoning": false, "input": []string{"text", "image"}})
		}
	}
	models := map[string]any{"providers": map[string]any{DefaultProvider: map[string]any{
		"baseUrl": baseURL, "api": "openai-completions", "apiKey": apiKey,
		"compat": map[string]any{"supportsDeveloperRole": false, "supportsReasoningEffort": false},
		"models": declared,
	}}}
	settings := map[string]any{"quietStartup": true, "retry": map[string]any{"enabled": a.opts.AutoRetry}}
	for name, v := range map[string]any{"models.json": models, "settings.json": settings} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "agentbox.ts"), extensionSource, 0o600); err != nil {
		return "", err
	}
	return dir, nil
}

// buildCommand makes pi's process: its command line and environment.
func (a *adapter) buildCommand(cfg agent.Config, bin, home, dir string) (*agent.Proc, error) {
	mode, ok := permissionModes[cfg.PermissionMode]
	if !ok {
		return nil, fmt.Errorf("pi: unknown permission mode %q", cfg.PermissionMode)
	}
	model := cfg.Model
	if model == "" {
		model = a.opts.Model
	}
	args := []string{"--mode", "rpc", "--provider", DefaultProvider, "--model", model,
		"--session-dir", filepath.Join(home, "sessions"),
		"-e", filepath.Join(dir, "agentbox.ts"), "--no-extensions", "--no-skills", "--no-prompt-templates", "--no-themes"}
	if cfg.NativeSessionID != "" {
		args = append(args, "--session", cfg.NativeSessionID)
	}
	env := map[string]string{
		"PATH":                procrt.BasePath(bin),
		"HOME":                home,
		"PI_CODING_AGENT_DIR": dir,
		// No update checks, telemetry or package fetches: pi talks to the
		// model API only.
		"PI_OFFLINE":            "1",
		"PI_TELEMETRY":          "0",
		"PI_SKIP_VERSION_CHECK": "1",
		"AGENTBOX_PI_ASK":       mode.ask,
		"AGENTBOX_PI_DENY":      mode.deny,
	}
	for k, v := range a.opts.ExtraEnv {
		env[k] = v
	}
	for k, v := range cfg.Env {
		env[k] = v
	}
	return &agent.Proc{Path: bin, Args: args, Env: procrt.EnvList(env), Dir: cfg.Cwd, Sandbox: cfg.Sandbox}, nil
}

// Start implements agent.Adapter: it starts pi in the session's directory
// and returns once pi answered its first command (get_state, which names
// pi's session id).
func (a *adapter) Start(ctx context.Context, cfg agent.Config, host agent.Host) (agent.Session, error) {
	bin, err := procrt.Locate("pi", cfg.Cwd, a.opts.Binary, "the CLI is not installed (run `agentbox agents install pi`)")
	if err != nil {
		return nil, err
	}
	home, err := a.homes.For(cfg.SessionID, cfg.Sandbox != nil)
	if err != nil {
		return nil, fmt.Errorf("pi: home directory: %w", err)
	}
	baseURL, apiKey := a.opts.BaseURL, a.opts.APIKey
	if v := cfg.Env["OPENAI_BASE_URL"]; v != "" {
		baseURL = v
	}
	if v := cfg.Env["OPENAI_API_KEY"]; v != "" {
		apiKey = v
	}
	if baseURL == "" {
		return nil, errors.New("pi: no model provider: set the adapter's base URL or the session's OPENAI_BASE_URL")
	}
	if apiKey == "" {
		apiKey = "none" // pi refuses a provider without a key; local servers take any
	}
	model := cfg.Model
	if model == "" {
		model = a.opts.Model
	}
	dir, err := a.sessionDir(home, strings.TrimSuffix(baseURL, "/"), apiKey, model)
	if err != nil {
		return nil, fmt.Errorf("pi: agent directory: %w", err)
	}
	cmd, err := a.buildCommand(cfg, bin, home, dir)
	if err != nil {
		_ = os.RemoveAll(dir) // best effort: the start already failed
		return nil, err
	}
	s, err := startSession(a.opts, cmd, cfg, host, dir)
	if err != nil {
		_ = os.RemoveAll(dir) // best effort: the start already failed
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, a.opts.StartTimeout)
	defer cancel()
	id, err := s.sessionID(sctx)
	if err == nil {
		err = host.SetNativeSessionID(ctx, id)
	}
	if err == nil {
		// The list is informative: a pi that cannot list its models still
		// runs the session (with the model as given), unless it is gone.
		if lerr := s.loadModels(sctx, model); lerr != nil {
			select {
			case <-s.Exited():
				err = lerr
			default:
				s.noList(model)
			}
		}
	}
	if err != nil {
		s.Kill()
		<-s.Done()
		return nil, fmt.Errorf("pi: %w", err)
	}
	return s, nil
}

// Package mock is the built-in deterministic agent: a scripted
// agent.Adapter, with no language model, that demos and tests use to
// produce every kind of universal event on demand.
//
// A turn's script comes from the user's text:
//
//   - "/mock [...]": a JSON array of Steps, such as
//     /mock [{"kind":"text","text":"hi"},{"kind":"command","command":"ls"}]
//     (see ScriptPrompt to build one in Go);
//   - "/scenario NAME [ARG]": a named script: text, reasoning, tool, command
//     [CMD], write [PATH], permission-write [PATH], permission-command [CMD],
//     question, plan, error, long [N], slow [DELAY], sleep [DURATION],
//     native and all (a bit of everything);
//   - anything else: a streamed reply that echoes the text ("You said: …").
//
// Nothing is random: the same script in the same directory gives the same
// events apart from item ids. Command and write steps really run a shell
// command and really write a file in the session's working directory. In a
// sandboxed session both happen inside the sandbox, like every agent's
// tools: a write is a small command started there with the content on its
// stdin, so the sandbox's rules and its checked commit (protected paths,
// changes held for review) apply to it, and its diff is against the file
// as the sandbox sees it. Without a sandbox a write cannot leave the
// working directory (absolute paths, ".." and symlinks out of it are
// refused), but a command can do whatever the daemon's user can, as the
// mock runs it directly.
//
// Risky steps (tool, command, write) ask for permission only when a
// permission step precedes them, and the session's permission mode decides
// what happens then: "default" asks; "accept_edits" lets writes through and
// asks for commands and tools; "bypass" never asks; "plan" declines every
// write and command (and every risky tool) without asking. A declined step
// completes its item with status "declined", does nothing, and the agent
// says so in a message before it carries on.
//
// An invalid script or an error step emits an error event and ends the
// turn with stop reason "error"; an error step with "fatal": true makes
// Prompt return an error instead. When the turn's context is cancelled the
// agent stops at once: it only completes the open item (status "failed")
// and returns stop reason "interrupted" without an error.
//
// Usage is counted in words: the words of the user's text as input tokens,
// the words the agent streamed as output tokens.
package mock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Name is the adapter's registry name.
const Name = "mock"

// Permission modes (agent.Config.PermissionMode).
const (
	modeDefault     = "default"
	modeAcceptEdits = "accept_edits"
	modeBypass      = "bypass"
	modePlan        = "plan"
)

// New returns the mock adapter. The composition root registers it under
// Name.
func New() agent.Adapter { return adapter{} }

type adapter struct{}

var _ agent.Adapter = adapter{}

// Info implements agent.Adapter. Every capability set here is exercised by
// the package's tests.
func (adapter) Info(context.Context) agent.Info {
	return agent.Info{
		Name:  Name,
		Title: "Mock agent (scripted, deterministic, no LLM)",
		Capabilities: agent.Capabilities{
			Text: true, Deltas: true, Reasoning: true, ToolCalls: true,
			CommandOutput: true, FileChanges: true, Diffs: true,
			Permissions: true, Questions: true, Plans: true, Usage: true,
			Interrupt: true,
			// It keeps no conversation (every turn is its script), so a
			// session resumes as a new one in the same workspace: what a
			// relayed session needs on a sandbox made from a snapshot.
			Resume: true,
		},
		Available: true,
		Installed: true,
		Version:   "builtin",
	}
}

// Start implements agent.Adapter. It needs an existing absolute working
// directory and a known permission mode.
func (adapter) Start(ctx context.Context, cfg agent.Config, host agent.Host) (agent.Session, error) {
	mode := cfg.PermissionMode
	switch mode {
	case "":
		mode = modeDefault
	case modeDefault, modeAcceptEdits, modeBypass, modePlan:
	default:
		return nil, fmt.Errorf("mock: unknown permission mode %q", cfg.PermissionMode)
	}
	if !filepath.IsAbs(cfg.Cwd) {
		return nil, fmt.Errorf("mock: the working directory %q is not an absolute path", cfg.Cwd)
	}
	if fi, err := os.Stat(cfg.Cwd); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("mock: the working directory %q is not a directory", cfg.Cwd)
	}
	if cfg.SessionID != "" {
		if err := host.SetNativeSessionID(ctx, "mock-"+cfg.SessionID); err != nil {
			return nil, fmt.Errorf("mock: %w", err)
		}
	}
	return &session{host: host, cwd: cfg.Cwd, mode: mode, sandbox: cfg.Sandbox}, nil
}

// session is one mock session; it runs one turn at a time.
type session struct {
	host agent.Host
	cwd  string
	mode string
	// sandbox, when set, runs the script's commands and file writes (the
	// mock itself is in-process).
	sandbox sandbox.Sandbox

	turn sync.Mutex // held while a turn runs

	mu     sync.Mutex
	closed bool
	cancel context.CancelFunc // of the running turn
}

var (
	errBusy   = errors.New("mock: a turn is already running")
	errClosed = errors.New("mock: session closed")
)

// Prompt implements agent.Session.
func (s *session) Prompt(ctx context.Context, in agent.Input) (agent.Result, error) {
	if !s.turn.TryLock() {
		return agent.Result{}, errBusy
	}
	defer s.turn.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return agent.Result{}, errClosed
	}
	s.cancel = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.cancel = nil
		s.mu.Unlock()
	}()

	t := &turn{s: s, ctx: ctx, usage: event.Usage{InputTokens: countWords(in.Text())}}
	return t.run(in.Text())
}

// Close implements agent.Session: it interrupts a running turn and refuses
// later ones.
func (s *session) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.cancel != nil {
		s.cancel()
	}
	return nil
}

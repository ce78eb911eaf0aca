// Package agent defines how the session engine drives a coding agent: the
// Adapter interface every agent implements, its capability flags, and the
// registry adapters are found in.
//
// An adapter speaks its agent's native protocol and translates everything the
// agent says into universal events (package event), which it hands to the
// engine through a Host. It never talks to the store, the API or clients.
package agent

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/errkind"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// MaxEventBytes bounds one message an agent hands the daemon, whatever
// carries it: a line of an agent process's stdout (procrt.DefaultMaxLine)
// and an event a relayed session reads from the agentbox daemon inside a
// provider's sandbox (relay: the whole encoded event). Tool outputs and
// diffs arrive whole in one message, so it is generous; a longer one ends
// the session with an error rather than being held.
const MaxEventBytes = 32 << 20

// ErrUnknown is returned (wrapped) when no adapter has the requested name.
var ErrUnknown = errkind.New(errkind.Invalid, "unknown agent")

// ErrUnsupportedContent is returned (wrapped, naming the part) by an
// adapter whose agent cannot take a part of a message: the message is
// refused, never sent without it.
var ErrUnsupportedContent = errkind.New(errkind.Invalid, "content the agent cannot take")

// Capabilities says what an agent can produce or accept. Every flag set to
// true must be backed by a test of the adapter.
type Capabilities struct {
	Text          bool `json:"text"`
	Deltas        bool `json:"deltas"`
	Reasoning     bool `json:"reasoning"`
	ToolCalls     bool `json:"tool_calls"`
	CommandOutput bool `json:"command_output"`
	FileChanges   bool `json:"file_changes"`
	Diffs         bool `json:"diffs"`
	Permissions   bool `json:"permissions"`
	Questions     bool `json:"questions"`
	// Images: image parts of a message reach the agent as images. The
	// engine refuses a message with an image part for an agent without it.
	Images bool `json:"images"`
	// Files: file parts of a message reach the agent with their content
	// (or as the agent's own kind of file reference). The engine refuses a
	// message with a file part for an agent without it.
	Files     bool `json:"files"`
	Plans     bool `json:"plans"`
	Usage     bool `json:"usage"`
	Resume    bool `json:"resume"`
	Interrupt bool `json:"interrupt"`
	// ModelList: the agent says which models (and modes) it offers a
	// session (its Session is a Cataloger); session.started carries the
	// list and GET /v1/agents/{name} shows the latest one.
	ModelList bool `json:"model_list"`
	// ModelSwitch and ModeSwitch: the session's model or mode can be
	// changed between turns (its Session is a Configurer that carries it
	// to the agent natively).
	ModelSwitch bool `json:"model_switch"`
	ModeSwitch  bool `json:"mode_switch"`
	// MCP: the MCP servers of Config.MCPServers reach the agent in its
	// native configuration. The engine refuses a create with MCP servers
	// for an agent without it.
	MCP bool `json:"mcp"`
}

// Info describes an adapter for /v1/agents.
type Info struct {
	Name         string       `json:"name"`
	Title        string       `json:"title"`
	Capabilities Capabilities `json:"capabilities"`
	// Available is false when the agent cannot run here; Reason says why.
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
	Version   string `json:"version,omitempty"`
	Path      string `json:"path,omitempty"`
	Installed bool   `json:"installed"`
}

// Located completes info with where the adapter's CLI is, as its Binary
// lookup found it: installed and available at path, or, when there is no
// path, neither, with missing (and the lookup's error) as the reason.
func (info Info) Located(path, version string, err error, missing string) Info {
	if err != nil || path == "" {
		info.Reason = missing
		if err != nil {
			// One install hint is enough: drop missing's when err gives
			// the same one.
			e := err.Error()
			if i := strings.Index(missing, " (run `"); i >= 0 && strings.Contains(e, missing[i+1:]) {
				info.Reason = missing[:i]
			}
			info.Reason += ": " + e
		}
		return info
	}
	info.Available, info.Installed, info.Path, info.Version = true, true, path, version
	return info
}

// Config is what an adapter needs to start one session.
type Config struct {
	SessionID      string
	Model          string
	Mode           string
	PermissionMode string
	Cwd            string
	Metadata       map[string]string
	// Env holds extra environment variables for the agent process, from
	// the create request. Adapters build the agent's environment from
	// scratch and add these; they are never stored.
	Env map[string]string
	// NativeSessionID is set when resuming a session the agent knows.
	NativeSessionID string
	// Sandbox, when set, is the session's sandbox: the adapter must start
	// every process of this session inside it (Proc does), or refuse the
	// session with an error wrapping ErrNoSandbox.
	Sandbox sandbox.Sandbox
	// MCPServers are the session's MCP servers (ValidateMCPServers has
	// checked them), with their env and header values: like Env, the
	// values are handed to the agent only and never stored.
	MCPServers []MCPServer
}

// ErrNoSandbox is returned (wrapped) by adapters that cannot run a session
// inside a sandbox (e.g. because their agent is a shared server).
var ErrNoSandbox = errors.New("agent cannot run inside a sandbox")

// Input is one user turn.
type Input struct {
	TurnID  string
	Content []event.ContentPart
}

// Text joins the input's text parts.
func (in Input) Text() string {
	var s string
	for _, p := range in.Content {
		if p.Type == event.PartText {
			s += p.Text
		}
	}
	return s
}

// Result is how a turn ended, as far as the agent says.
type Result struct {
	StopReason event.StopReason
	Usage      *event.Usage
	Message    string
}

// PermissionRequest is what an adapter asks the engine to decide. The engine
// fills in the ID, appends permission.requested, waits for the client (or the
// timeout) and returns the decision.
type PermissionRequest = event.PermissionRequested

// PermissionAnswer is the decision for one permission request.
type PermissionAnswer struct {
	Decision event.Decision
	OptionID string
	Message  string
	By       event.DecidedBy
}

// Question is what an adapter asks the user through the engine.
type Question = event.QuestionRequested

// Answer is the user's answer to a question.
type Answer struct {
	Text      string
	OptionID  string
	Cancelled bool
	// By is who answered: event.ByUser, or event.ByPolicy for a client's
	// automatic answer; the engine records nothing else for an answer
	// given through the API.
	By event.DecidedBy
}

// Host is the engine side of a running session, handed to the adapter. All
// methods are safe for concurrent use.
type Host interface {
	// Emit queues translated events for the session's log, in order, and
	// returns without waiting for the disk (clients see them only once they
	// are durable). Events emitted during a turn are stamped with the
	// turn's ID by the engine. It fails once the session has ended.
	Emit(ctx context.Context, evs ...event.Event) error
	// RequestPermission blocks until the request is answered, times out
	// (deny, by timeout) or ctx ends.
	RequestPermission(ctx context.Context, req PermissionRequest) (PermissionAnswer, error)
	// AskQuestion blocks until the question is answered or ctx ends.
	AskQuestion(ctx context.Context, q Question) (Answer, error)
	// SetNativeSessionID records the agent's own session id (for resume).
	SetNativeSessionID(ctx context.Context, id string) error
}

// NetworkHost is the optional ability of a Host to decide and report its
// session's sandbox network when that network is decided on this host but
// the agent runs elsewhere: a provider's sandbox whose egress the host's
// proxy serves (provider.EgressCarrier). The engine's session implements
// it exactly as it serves a local sandbox's proxy.
type NetworkHost interface {
	// AskNetwork asks the session about one connection no network rule
	// settles (network.default ask): a permission request of kind
	// network, good for that connection only (a sandbox.Asker).
	AskNetwork(ctx context.Context, req sandbox.NetworkRequest) (sandbox.NetworkAnswer, error)
	// NetworkViolation reports a refused connection: a sandbox.violation
	// event of the session, repeats coalesced. It must not block.
	NetworkViolation(v sandbox.Violation)
}

// Session is one running agent session.
type Session interface {
	// Prompt runs one turn to its end and returns how it ended. The engine
	// cancels ctx to interrupt the turn; the adapter must then stop the
	// agent's work promptly and return with StopInterrupted.
	Prompt(ctx context.Context, in Input) (Result, error)
	// Close stops the agent; it must not hang past ctx's deadline.
	Close(ctx context.Context) error
}

// Exiter is implemented by sessions whose agent process can die on its own.
// Done is closed when it has; Exit says how.
type Exiter interface {
	Done() <-chan struct{}
	Exit() event.SessionEnded
}

// Pauser is implemented by sessions whose agent can be paused where it
// runs (a relayed session on a provider that pauses sandboxes). The
// engine calls Pause only while no turn runs: it freezes the agent with
// its memory and files and stops reading it; the engine then closes the
// session (Close), and a later Start with its native id resumes it. When
// Pause fails, the session goes on as before.
type Pauser interface {
	Pause(ctx context.Context) error
}

// Choice is one model or mode an agent offers, in the agent's own words.
type Choice = event.Choice

// Catalog is what an agent said a session may use: its models and modes,
// and the ones in force. Empty lists mean the agent did not say.
type Catalog struct {
	Models []Choice
	Model  string
	Modes  []Choice
	Mode   string
	// OpenModels: the agent also takes model ids its list does not name
	// (a full model name behind an alias, a custom provider's model), so
	// the list is what it suggests and the engine refuses no other model.
	OpenModels bool
}

// Cataloger is implemented by sessions whose agent announces the models
// and modes it offers (e.g. ACP's session/new). Catalog returns the
// agent's latest answer, with the current model and mode.
type Cataloger interface {
	Catalog() Catalog
}

// Configurer is implemented by sessions that can switch their model or
// mode between turns, natively (the agent's own request, not a restart).
// An empty model or mode is left as it is. The engine calls it only while
// no turn runs.
type Configurer interface {
	Configure(ctx context.Context, model, mode string) error
}

// SandboxNeeder is implemented by adapters whose agent needs host paths
// inside the session's sandbox: its installed binaries (read) and its
// private state, such as a config home (write). The write paths are the
// session's own: each counts in the sandbox's disk and file limits, and
// RemoveState deletes them when the session is purged, whatever the agent
// left in them, without making or writing anything (a session that has
// none is not an error). Handing out write paths and removing them are one
// interface so that no adapter can do the first without the second.
type SandboxNeeder interface {
	SandboxPaths(cfg Config) (read, write []string)
	RemoveState(sessionID string) error
}

// MCPChecker is implemented by adapters that take only some of the MCP
// servers ValidateMCPServers accepts (e.g. not every transport): the
// engine refuses a create whose servers CheckMCP rejects, before any
// process starts.
type MCPChecker interface {
	CheckMCP(servers []MCPServer) error
}

// Adapter starts sessions of one agent.
type Adapter interface {
	Info(ctx context.Context) Info
	Start(ctx context.Context, cfg Config, host Host) (Session, error)
}

// Registry maps agent names to adapters.
type Registry struct {
	mu       sync.RWMutex
	adapters map[string]Adapter
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{adapters: map[string]Adapter{}} }

// Register adds an adapter. It panics if the name is empty or taken: two
// adapters with one name is a programming error.
func (r *Registry) Register(name string, a Adapter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name == "" {
		panic("agent: Register with empty name")
	}
	if _, dup := r.adapters[name]; dup {
		panic(fmt.Sprintf("agent: Register called twice for %q", name))
	}
	r.adapters[name] = a
}

// Get returns the adapter for name or an error wrapping ErrUnknown.
func (r *Registry) Get(name string) (Adapter, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	a, ok := r.adapters[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknown, name)
	}
	return a, nil
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.adapters))
	for n := range r.adapters {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

package client

import (
	"encoding/json"
	"time"

	"github.com/agentbox/agentbox/event"
)

// Health is the answer of GET /v1/health.
type Health struct {
	Status        string `json:"status" doc:"Always \"ok\" when the daemon answers." example:"ok"`
	Version       string `json:"version" doc:"Daemon version."`
	SchemaVersion int    `json:"schema_version" doc:"Universal event schema version."`
	UptimeMS      int64  `json:"uptime_ms" doc:"Milliseconds since the daemon started."`
}

// Capabilities mirrors an agent's capability flags.
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
	Images        bool `json:"images"`
	Files         bool `json:"files"`
	Plans         bool `json:"plans"`
	Usage         bool `json:"usage"`
	Resume        bool `json:"resume"`
	Interrupt     bool `json:"interrupt"`
	ModelList     bool `json:"model_list" doc:"The agent says which models and modes it offers: session.started carries its list, GET /v1/agents/{name} the latest one."`
	ModelSwitch   bool `json:"model_switch" doc:"PATCH /v1/sessions/{id} can change the model between turns."`
	ModeSwitch    bool `json:"mode_switch" doc:"PATCH /v1/sessions/{id} can change the mode between turns."`
}

// Agent describes one agent the daemon can run.
type Agent struct {
	Name         string       `json:"name" example:"mock"`
	Title        string       `json:"title"`
	Capabilities Capabilities `json:"capabilities"`
	Available    bool         `json:"available" doc:"Whether sessions of this agent can start here."`
	Reason       string       `json:"reason,omitempty" doc:"Why the agent is not available."`
	Installed    bool         `json:"installed"`
	Version      string       `json:"version,omitempty"`
	Path         string       `json:"path,omitempty"`
}

// Choice is one model or mode an agent offers, in the agent's own words.
type Choice = event.Choice

// AgentDetail is the answer of GET /v1/agents/{name}: the agent with the
// models and modes it offers. The lists are the agent's own answer, as the
// session named in CatalogSession announced it (session.started); they are
// absent until a session of the agent has started here, for agents
// without model_list, and for agents not available.
type AgentDetail struct {
	Agent
	Models         []Choice   `json:"models,omitempty" doc:"The models the agent offers."`
	Modes          []Choice   `json:"modes,omitempty" doc:"The modes the agent offers."`
	ModelsOpen     bool       `json:"models_open,omitempty" doc:"The agent also takes models its list does not name (full model names, a custom provider's models): the list is a suggestion, and no other model is refused before the agent sees it."`
	DefaultModel   string     `json:"default_model,omitempty" doc:"The model the agent picked for a session that asked for none."`
	DefaultMode    string     `json:"default_mode,omitempty" doc:"The mode the agent picked for a session that asked for none."`
	CatalogSession string     `json:"catalog_session,omitempty" doc:"The session whose agent announced the lists."`
	CatalogTime    *time.Time `json:"catalog_time,omitempty" doc:"When it did."`
	CatalogNote    string     `json:"catalog_note,omitempty" doc:"Why there are no lists, when there are none."`
}

// UpdateSession is the body of PATCH /v1/sessions/{id}: the model and/or
// mode for the session's next turns (empty: unchanged).
type UpdateSession struct {
	Model string `json:"model,omitempty" maxLength:"200" doc:"The model from the next turn on."`
	Mode  string `json:"mode,omitempty" maxLength:"64" doc:"The agent-specific mode from the next turn on."`
}

// ProviderList is the answer of GET /v1/providers.
type ProviderList struct {
	Providers []ProviderInfo `json:"providers"`
	Default   string         `json:"default,omitempty" doc:"The provider of sessions created without one (serve --provider); empty: this host."`
}

// ProviderInfo is one sandbox provider the daemon is configured with.
type ProviderInfo struct {
	Name         string               `json:"name" example:"docker"`
	Default      bool                 `json:"default,omitempty" doc:"Sessions created without a provider run here."`
	Capabilities ProviderCapabilities `json:"capabilities"`
	Healthy      bool                 `json:"healthy" doc:"The provider answered its health check with the configured credentials just now."`
	Reason       string               `json:"reason,omitempty" doc:"Why the health check failed, in the provider's words (never a credential)."`
}

// ProviderCapabilities mirrors a provider's capability flags: what it can
// do beyond making, finding and removing sandboxes.
type ProviderCapabilities struct {
	PauseResume   bool     `json:"pause_resume"`
	Snapshot      bool     `json:"snapshot"`
	EgressRules   bool     `json:"egress_rules" doc:"The provider enforces egress allow/deny lists itself."`
	PreviewURLs   bool     `json:"preview_urls"`
	FileTransfer  bool     `json:"file_transfer"`
	CarriedEgress bool     `json:"carried_egress" doc:"The sandbox has no network of its own: every connection is carried to this daemon's egress proxy, which decides it under the session's policy; network.default ask raises the session's permission requests and refusals are its sandbox.violation events, as for a local sandbox."`
	Runtimes      []string `json:"runtimes,omitempty" doc:"Isolation runtimes the provider can run a sandbox under (e.g. runc, runsc)."`
}

// AgentList is the answer of GET /v1/agents.
type AgentList struct {
	Agents []Agent `json:"agents"`
}

// Session states, as reported in Session.Status.
const (
	StatusStarting    = "starting"
	StatusIdle        = "idle"
	StatusRunning     = "running"
	StatusEnded       = "ended"
	StatusFailed      = "failed"
	StatusInterrupted = "interrupted"
	// StatusStopped: the session's idle agent process was stopped (serve
	// --idle-timeout); its next message resumes it.
	StatusStopped = "stopped"
	// StatusPaused: the session's sandbox on a provider is paused (POST
	// /v1/sessions/{id}/pause, or serve --provider-idle-pause); its next
	// message, or a resume, resumes it.
	StatusPaused = "paused"
)

// Session is a session as the API reports it.
type Session struct {
	ID              string            `json:"id" example:"ses_0190c0ffee0000000000000000000000"`
	Agent           string            `json:"agent"`
	Model           string            `json:"model,omitempty"`
	Mode            string            `json:"mode,omitempty"`
	PermissionMode  string            `json:"permission_mode,omitempty"`
	Cwd             string            `json:"cwd,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	Status          string            `json:"status" enum:"starting,idle,running,ended,failed,interrupted,stopped,paused" doc:"stopped: the idle agent process was stopped (serve --idle-timeout); paused: its sandbox on a provider is paused (POST /v1/sessions/{id}/pause, serve --provider-idle-pause). The next message resumes either."`
	NativeSessionID string            `json:"native_session_id,omitempty"`
	CurrentTurnID   string            `json:"current_turn_id,omitempty"`
	CreatedAt       time.Time         `json:"created_at"`
	UpdatedAt       time.Time         `json:"updated_at"`
	EndedAt         *time.Time        `json:"ended_at,omitempty"`
	// Sandboxed says whether the session's agent runs inside a sandbox;
	// Sandbox then says under what.
	Sandboxed bool            `json:"sandboxed" doc:"Whether the session's agent runs inside a sandbox."`
	Sandbox   *SessionSandbox `json:"sandbox,omitempty" doc:"The session's sandbox; absent when its agent runs on the host."`
}

// SessionSandbox describes a sandboxed session's isolation.
type SessionSandbox struct {
	Runtime    string `json:"runtime" doc:"Isolation runtime the session's policy asks for: process, gvisor or microvm." example:"process"`
	PolicyHash string `json:"policy_hash" doc:"Hex SHA-256 identifying what the session's effective policy means (the same for policies differing only in order or spelled-out defaults)."`
	// Mechanisms are those in force while the agent runs (as in its last
	// session.started event); absent when the session is not live.
	Mechanisms []string `json:"mechanisms,omitempty" doc:"Mechanisms in force while the agent runs (as in session.started); absent when the session is not live."`
	Degraded   []string `json:"degraded,omitempty" doc:"What the policy asked for but this host could not enforce."`
	// Adjusted is in the create answer only.
	Adjusted []LimitAdjustment `json:"adjusted,omitempty" doc:"In the answer of the create only: the limits the request's policy asked for that the operator's global policy lowered, with what applied. Absent when everything applied as asked."`
}

// Permission modes a session can be created with.
const (
	PermissionDefault     = "default"      // ask for every risky action
	PermissionAcceptEdits = "accept_edits" // file edits allowed, commands asked
	PermissionBypass      = "bypass"       // never ask (the sandbox policy still applies)
	PermissionPlan        = "plan"         // read only: deny every write and command
)

// CreateSession is the body of POST /v1/sessions.
type CreateSession struct {
	Agent          string            `json:"agent" minLength:"1" maxLength:"64" doc:"Agent name, see GET /v1/agents." example:"mock"`
	Model          string            `json:"model,omitempty" maxLength:"200"`
	Mode           string            `json:"mode,omitempty" maxLength:"64" doc:"Agent-specific mode."`
	PermissionMode string            `json:"permission_mode,omitempty" enum:"default,accept_edits,bypass,plan" doc:"How the agent's own approval prompts are settled. Empty means default."`
	Cwd            string            `json:"cwd,omitempty" maxLength:"4096" doc:"Absolute working directory; empty means a fresh directory under the daemon's data dir."`
	Metadata       map[string]string `json:"metadata,omitempty" doc:"Free-form labels kept with the session."`
	Env            map[string]string `json:"env,omitempty" doc:"Extra environment variables for the agent process (e.g. ANTHROPIC_BASE_URL). They are handed to the agent only and never stored or returned; the agent's environment is otherwise built from scratch."`
	Policy         json.RawMessage   `json:"policy,omitempty" doc:"Sandbox policy for the agent: a preset name (\"agent-default\") or an inline policy object (see docs/policy.md). Empty means the daemon's default. It is intersected with the operator's global policy and fixed for the session's life."`
	PolicySource   *PolicySource     `json:"policy_source,omitempty" doc:"A policy document as written in a file, instead of policy; errors then name the file, line and field."`
	MCPServers     []MCPServer       `json:"mcp_servers,omitempty" maxItems:"16" doc:"MCP servers for the agent, handed to it in its native configuration (agents with capability mcp). Env and header values are never stored: a resume that needs them answers 422 mcp-required naming them."`
	Provider       string            `json:"provider,omitempty" maxLength:"64" doc:"Sandbox provider the session runs on (see GET /v1/providers): its agent runs in the agentbox daemon of a sandbox made there, relayed to this daemon, whose log stays the source of truth. Empty: the daemon's default provider (serve --provider), or this host." example:"docker"`
}

// MCPServer is one MCP server of a session: a stdio command the agent
// starts (inside the session's sandbox when it has one) or an http/sse URL
// it connects to (through the session's egress policy).
type MCPServer struct {
	Name    string            `json:"name" minLength:"1" maxLength:"64" pattern:"^[a-zA-Z0-9][a-zA-Z0-9_-]*$" doc:"Unique in the session; agents put it into tool names (e.g. claude's mcp__NAME__TOOL)."`
	Type    string            `json:"type,omitempty" enum:"stdio,http,sse" doc:"Transport; empty means stdio when command is set, http when url is."`
	Command string            `json:"command,omitempty" maxLength:"4096" doc:"stdio: an absolute path, or a name the daemon finds in its PATH; in a sandbox it must be visible to the session (the daemon lets the sandbox read it)."`
	Args    []string          `json:"args,omitempty" maxItems:"64" doc:"stdio: arguments."`
	Env     map[string]string `json:"env,omitempty" doc:"stdio: environment of the server. Values are never stored."`
	URL     string            `json:"url,omitempty" maxLength:"2048" doc:"http/sse: the server's URL."`
	Headers map[string]string `json:"headers,omitempty" doc:"http/sse: request headers. Values are never stored."`
}

// ResumeSession is the (optional) body of POST /v1/sessions/{id}/resume.
type ResumeSession struct {
	Env        map[string]string `json:"env,omitempty" doc:"Extra environment variables for the new agent process, as at create; never stored."`
	MCPServers []MCPServer       `json:"mcp_servers,omitempty" maxItems:"16" doc:"The session's MCP servers again, with their env and header values (never stored), when the resume answers mcp-required. Names must be those given at create."`
}

// SessionList is the answer of GET /v1/sessions.
type SessionList struct {
	Sessions []Session `json:"sessions"`
	// NextBefore, when set, is the value of ?before= for the next page.
	NextBefore string `json:"next_before,omitempty"`
}

// SendMessage is the body of POST /v1/sessions/{id}/messages. Exactly one
// of Text and Content must be set.
type SendMessage struct {
	Text    string              `json:"text,omitempty" maxLength:"1048576"`
	Content []event.ContentPart `json:"content,omitempty" maxItems:"64"`
}

// Turn is the answer of POST …/messages and …/interrupt.
type Turn struct {
	TurnID string `json:"turn_id"`
}

// PermissionAnswer is the body of POST /v1/sessions/{id}/permissions/{pid}.
type PermissionAnswer struct {
	Decision string `json:"decision" enum:"allow,deny"`
	OptionID string `json:"option_id,omitempty" maxLength:"200" doc:"A specific option from the request; allow_always options are honoured only when named here."`
	Message  string `json:"message,omitempty" maxLength:"4096" doc:"Told to the agent with a deny."`
	By       string `json:"by,omitempty" enum:"user,policy" doc:"Who decided, as the event log records it: user (the default), a person answering this request; policy, a rule of the client's own with no person asked (answer everything, or no one there to ask)."`
}

// QuestionAnswer is the body of POST /v1/sessions/{id}/questions/{qid}.
type QuestionAnswer struct {
	Answer   string `json:"answer,omitempty" maxLength:"65536"`
	OptionID string `json:"option_id,omitempty" maxLength:"200"`
	Cancel   bool   `json:"cancel,omitempty" doc:"Decline to answer."`
	By       string `json:"by,omitempty" enum:"user,policy" doc:"Who decided, as the event log records it: user (the default), a person answering this question; policy, a rule of the client's own with no person asked."`
}

// Resolved is the answer of the permission and question endpoints: the
// resolved event as stored.
type Resolved struct {
	Event event.Event `json:"event"`
}

// EventPage is the answer of GET /v1/sessions/{id}/events.
type EventPage struct {
	Events []event.Event `json:"events"`
	// NextAfter is the value of ?after= that continues after this page.
	NextAfter int64 `json:"next_after"`
	HasMore   bool  `json:"has_more"`
}

// Request is a pending or resolved permission/question request.
type Request struct {
	ID         string     `json:"id"`
	Kind       string     `json:"kind" enum:"permission,question"`
	State      string     `json:"state" enum:"pending,resolved"`
	Payload    any        `json:"payload"`
	Resolution any        `json:"resolution,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
}

// RequestList is the answer of GET /v1/sessions/{id}/requests.
type RequestList struct {
	Requests []Request `json:"requests"`
}

// Problem is an RFC 7807 problem+json error body.
type Problem struct {
	Type     string         `json:"type" format:"uri" doc:"Stable URI naming the kind of problem; switch on it." example:"https://agentbox.dev/problems/not-found"`
	Title    string         `json:"title" doc:"Short summary of the problem kind." example:"Not Found"`
	Status   int            `json:"status" doc:"The HTTP status code." example:"404"`
	Detail   string         `json:"detail,omitempty" doc:"What went wrong this time."`
	Instance string         `json:"instance,omitempty" doc:"Identifies this occurrence in the daemon log (internal errors)."`
	Errors   []ProblemField `json:"errors,omitempty" doc:"Each invalid input, for validation problems."`
}

// ProblemField locates one validation error.
type ProblemField struct {
	Message  string `json:"message" doc:"What is wrong with the input."`
	Location string `json:"location,omitempty" doc:"Where: body.<field>, query.<name>, header.<name> or path.<name>." example:"body.agent"`
	Value    any    `json:"value,omitempty" doc:"The offending value, shortened if long."`
}

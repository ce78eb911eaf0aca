// Package event is the universal session event schema (v1): the envelope and
// the typed payloads every agent's native output is translated into, as
// stored in the event log and streamed to clients.
//
// The JSON form is stable: field names never change within a schema version,
// fields are only added, and [SchemaVersion] is bumped on any incompatible
// change. The machine-readable contract is schema/event.v1.json, which is
// generated from these types and checked against them by tests.
package event

import (
	"encoding/json"
	"fmt"
	"time"
)

// SchemaVersion is the version of the universal schema written into every
// envelope's "schema" field.
const SchemaVersion = 1

// Type names an event type. The set is closed per schema version; anything an
// agent produces that has no universal equivalent is kept as [TypeNative].
type Type string

// The event types of schema v1.
const (
	TypeSessionStarted      Type = "session.started"
	TypeSessionEnded        Type = "session.ended"
	TypeSessionConfigured   Type = "session.configured"
	TypeTurnStarted         Type = "turn.started"
	TypeTurnCompleted       Type = "turn.completed"
	TypeItemStarted         Type = "item.started"
	TypeItemDelta           Type = "item.delta"
	TypeItemCompleted       Type = "item.completed"
	TypePermissionRequested Type = "permission.requested"
	TypePermissionResolved  Type = "permission.resolved"
	TypeQuestionRequested   Type = "question.requested"
	TypeQuestionResolved    Type = "question.resolved"
	TypeSandboxViolation    Type = "sandbox.violation"
	TypeError               Type = "error"
	TypeNative              Type = "native"
)

// Types lists every event type of schema v1 in a stable order.
var Types = []Type{
	TypeSessionStarted, TypeSessionEnded, TypeSessionConfigured,
	TypeTurnStarted, TypeTurnCompleted,
	TypeItemStarted, TypeItemDelta, TypeItemCompleted,
	TypePermissionRequested, TypePermissionResolved,
	TypeQuestionRequested, TypeQuestionResolved,
	TypeSandboxViolation, TypeError, TypeNative,
}

// Source says who produced an event: the agent (translated from its native
// output) or the daemon itself (lifecycle, approvals, policy).
type Source string

// Event sources.
const (
	SourceAgent  Source = "agent"
	SourceDaemon Source = "daemon"
)

// Event is the envelope of every event in a session's log.
//
// ID, Seq, SessionID, Time and Schema are assigned by the store when the event
// is appended; producers fill in the rest. Seq is per session, starts at 1 and
// has no gaps.
type Event struct {
	ID              string          `json:"id"`
	Seq             int64           `json:"seq"`
	SessionID       string          `json:"session_id"`
	Time            time.Time       `json:"time"`
	Schema          int             `json:"schema"`
	Type            Type            `json:"type"`
	Source          Source          `json:"source"`
	NativeSessionID string          `json:"native_session_id,omitempty"`
	TurnID          string          `json:"turn_id,omitempty"`
	Data            json.RawMessage `json:"data"`
	// Raw is the agent's original message, kept for debugging and replay when
	// the adapter chooses to; it is never interpreted by the daemon.
	Raw json.RawMessage `json:"raw,omitempty"`
}

// New builds an event of the given type with data marshalled from payload.
// It panics only if payload cannot be marshalled, which for the types in this
// package cannot happen.
func New(src Source, payload Payload) Event {
	b, err := json.Marshal(payload)
	if err != nil {
		panic(fmt.Sprintf("event: marshal %T: %v", payload, err))
	}
	return Event{Type: payload.EventType(), Source: src, Data: b}
}

// Decode unmarshals the event's data into the typed payload for its type.
// Unknown types decode as [Native] so nothing is lost.
func (e Event) Decode() (Payload, error) {
	p := NewPayload(e.Type)
	if len(e.Data) == 0 {
		return p, nil
	}
	if err := json.Unmarshal(e.Data, p); err != nil {
		return nil, fmt.Errorf("event %s seq %d: decode %s: %w", e.ID, e.Seq, e.Type, err)
	}
	return p, nil
}

// Payload is implemented by every typed event payload.
type Payload interface {
	EventType() Type
}

// NewPayload returns a pointer to a zero payload for t; an unknown type gets a
// *Native.
func NewPayload(t Type) Payload {
	switch t {
	case TypeSessionStarted:
		return &SessionStarted{}
	case TypeSessionEnded:
		return &SessionEnded{}
	case TypeSessionConfigured:
		return &SessionConfigured{}
	case TypeTurnStarted:
		return &TurnStarted{}
	case TypeTurnCompleted:
		return &TurnCompleted{}
	case TypeItemStarted:
		return &ItemStarted{}
	case TypeItemDelta:
		return &ItemDelta{}
	case TypeItemCompleted:
		return &ItemCompleted{}
	case TypePermissionRequested:
		return &PermissionRequested{}
	case TypePermissionResolved:
		return &PermissionResolved{}
	case TypeQuestionRequested:
		return &QuestionRequested{}
	case TypeQuestionResolved:
		return &QuestionResolved{}
	case TypeSandboxViolation:
		return &SandboxViolation{}
	case TypeError:
		return &Error{}
	default:
		return &Native{}
	}
}

// SessionStarted is emitted once the agent is ready (and again after a resume).
type SessionStarted struct {
	Agent           string   `json:"agent"`
	Model           string   `json:"model,omitempty"`
	NativeSessionID string   `json:"native_session_id,omitempty"`
	Cwd             string   `json:"cwd,omitempty"`
	Tools           []string `json:"tools,omitempty"`
	Resumed         bool     `json:"resumed,omitempty"`
	// Sandbox describes the isolation the agent runs in; absent when it
	// runs on the host.
	Sandbox *SandboxInfo `json:"sandbox,omitempty"`
	// Mode is the session's mode, when one was chosen or the agent says.
	Mode string `json:"mode,omitempty"`
	// Models and Modes are what the agent said it offers this session
	// (its model_list capability), in its own words; absent when it does
	// not say.
	Models []Choice `json:"models,omitempty"`
	Modes  []Choice `json:"modes,omitempty"`
	// Daemon is the id of the daemon driving the agent from now on, when
	// several daemons share the store (it advertises an address); after
	// a takeover, the daemon that resumed the session.
	Daemon string `json:"daemon,omitempty"`
}

// Choice is one model or mode an agent offers.
type Choice struct {
	ID          string `json:"id"`
	Name        string `json:"name,omitempty"`
	Description string `json:"description,omitempty"`
}

// SessionConfigured records a change of the session's model or mode made
// between turns through the API; the agent has taken it, and a resume
// starts with it.
type SessionConfigured struct {
	// Model and Mode are the session's model and mode from now on (empty:
	// the agent's default).
	Model string `json:"model,omitempty"`
	Mode  string `json:"mode,omitempty"`
	// PreviousModel and PreviousMode are what they were.
	PreviousModel string `json:"previous_model,omitempty"`
	PreviousMode  string `json:"previous_mode,omitempty"`
}

// SandboxInfo says what isolation a session's agent runs under.
type SandboxInfo struct {
	Runtime string `json:"runtime"`
	// Mechanisms in force, e.g. "userns", "landlock:abi7", "seccomp".
	Mechanisms []string `json:"mechanisms"`
	// Degraded lists what the policy asked for but the host could not
	// enforce (only when the operator allowed degraded isolation).
	Degraded []string `json:"degraded,omitempty"`
}

// EndReason says why a session ended.
type EndReason string

// Session end reasons.
const (
	EndCompleted   EndReason = "completed"   // the agent or the client closed it normally
	EndTerminated  EndReason = "terminated"  // deleted through the API or daemon shutdown
	EndError       EndReason = "error"       // the agent process failed
	EndInterrupted EndReason = "interrupted" // the daemon stopped while it ran (crash or restart)
	EndIdle        EndReason = "idle"        // the daemon stopped the idle agent process (its next message resumes the session)
	EndPaused      EndReason = "paused"      // the session's sandbox on a provider was paused, through the API or after an idle time (its next message resumes it)
)

// SessionEnded is the last event of a session run.
type SessionEnded struct {
	Reason     EndReason `json:"reason"`
	Message    string    `json:"message,omitempty"`
	ExitCode   *int      `json:"exit_code,omitempty"`
	StderrTail string    `json:"stderr_tail,omitempty"`
}

// TurnStarted opens a turn; the user's input follows as a message item.
type TurnStarted struct {
	TurnID string `json:"turn_id"`
}

// StopReason says why a turn ended.
type StopReason string

// Turn stop reasons.
const (
	StopEndTurn     StopReason = "end_turn"
	StopMaxTokens   StopReason = "max_tokens"
	StopInterrupted StopReason = "interrupted"
	StopRefusal     StopReason = "refusal"
	StopError       StopReason = "error"
)

// Usage is token accounting for a turn, as far as the agent reports it.
type Usage struct {
	InputTokens      int64    `json:"input_tokens"`
	OutputTokens     int64    `json:"output_tokens"`
	CacheReadTokens  int64    `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64    `json:"cache_write_tokens,omitempty"`
	CostUSD          *float64 `json:"cost_usd,omitempty"`
}

// TurnCompleted closes a turn.
type TurnCompleted struct {
	TurnID     string     `json:"turn_id"`
	StopReason StopReason `json:"stop_reason"`
	Usage      *Usage     `json:"usage,omitempty"`
	DurationMS int64      `json:"duration_ms"`
	Message    string     `json:"message,omitempty"`
}

// ItemKind is the kind of an item.
type ItemKind string

// Item kinds.
const (
	ItemMessage     ItemKind = "message"
	ItemReasoning   ItemKind = "reasoning"
	ItemToolCall    ItemKind = "tool_call"
	ItemCommand     ItemKind = "command"
	ItemFileChange  ItemKind = "file_change"
	ItemPlan        ItemKind = "plan"
	ItemWebSearch   ItemKind = "web_search"
	ItemMCPToolCall ItemKind = "mcp_tool_call"
)

// ItemKinds lists every item kind in a stable order.
var ItemKinds = []ItemKind{ItemMessage, ItemReasoning, ItemToolCall, ItemCommand, ItemFileChange, ItemPlan, ItemWebSearch, ItemMCPToolCall}

// ItemStatus is the state of an item.
type ItemStatus string

// Item states.
const (
	StatusInProgress ItemStatus = "in_progress"
	StatusCompleted  ItemStatus = "completed"
	StatusFailed     ItemStatus = "failed"
	StatusDeclined   ItemStatus = "declined" // a permission for it was denied
)

// Role is a message author.
type Role string

// Message roles.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleSystem    Role = "system"
)

// PartType is the type of a content part.
type PartType string

// Content part types.
const (
	PartText  PartType = "text"
	PartImage PartType = "image"
	PartFile  PartType = "file"
)

// ContentPart is one part of a message: text, an image or a file reference.
type ContentPart struct {
	Type     PartType `json:"type"`
	Text     string   `json:"text,omitempty"`
	MimeType string   `json:"mime_type,omitempty"`
	// Data is base64 content of an inline image or file.
	Data string `json:"data,omitempty"`
	// URI is an http(s) address the agent fetches (a file: URI is taken
	// as Path).
	URI string `json:"uri,omitempty"`
	// Path names a file in the session's workspace (relative, or absolute
	// inside it): the daemon reads it into Data before the agent sees the
	// message, and refuses a path that leads out of the workspace.
	Path string `json:"path,omitempty"`
}

// TextPart is a convenience constructor for a text content part.
func TextPart(s string) ContentPart { return ContentPart{Type: PartText, Text: s} }

// FileChangeKind says what happened to a file.
type FileChangeKind string

// File change kinds.
const (
	FileAdd    FileChangeKind = "add"
	FileUpdate FileChangeKind = "update"
	FileDelete FileChangeKind = "delete"
)

// FileChange is one file touched by a file_change item.
type FileChange struct {
	Path string         `json:"path"`
	Kind FileChangeKind `json:"kind"`
	// Diff is a unified diff when the agent reports or allows deriving one.
	Diff string `json:"diff,omitempty"`
}

// PlanEntry is one step of a plan/todo list.
type PlanEntry struct {
	Content  string `json:"content"`
	Status   string `json:"status"` // pending | in_progress | completed
	Priority string `json:"priority,omitempty"`
}

// Item is one unit of a turn: a message, a reasoning block, a tool call, a
// command, a file change, a plan, a web search or an MCP tool call. Fields
// beyond ID, Kind and Status are used by the kinds noted on them.
type Item struct {
	ID     string     `json:"id"`
	Kind   ItemKind   `json:"kind"`
	Status ItemStatus `json:"status"`
	// NativeID is the agent's own id for the item (tool_use id, call id, ...).
	NativeID string `json:"native_id,omitempty"`

	// message, reasoning
	Role    Role          `json:"role,omitempty"`
	Content []ContentPart `json:"content,omitempty"`

	// tool_call, mcp_tool_call
	Name   string          `json:"name,omitempty"`
	Server string          `json:"server,omitempty"`
	Input  json.RawMessage `json:"input,omitempty"`
	// Output is the tool's result or the command's combined output.
	Output string `json:"output,omitempty"`
	Error  string `json:"error,omitempty"`

	// command
	Command  string   `json:"command,omitempty"`
	Argv     []string `json:"argv,omitempty"`
	Cwd      string   `json:"cwd,omitempty"`
	ExitCode *int     `json:"exit_code,omitempty"`

	// file_change
	Changes []FileChange `json:"changes,omitempty"`

	// plan
	Entries []PlanEntry `json:"entries,omitempty"`

	// web_search
	Query string `json:"query,omitempty"`
}

// Text joins the item's text content parts.
func (it Item) Text() string {
	var s string
	for _, p := range it.Content {
		if p.Type == PartText {
			s += p.Text
		}
	}
	return s
}

// ItemStarted announces an item; for streamed items the content follows as
// deltas.
type ItemStarted struct {
	Item Item `json:"item"`
}

// DeltaField says which part of an item a delta extends.
type DeltaField string

// Delta fields.
const (
	DeltaText   DeltaField = "text"   // message or reasoning text
	DeltaOutput DeltaField = "output" // command or tool output
	DeltaInput  DeltaField = "input"  // partial tool input JSON
)

// ItemDelta appends to a started item.
type ItemDelta struct {
	ItemID string     `json:"item_id"`
	Field  DeltaField `json:"field"`
	Delta  string     `json:"delta"`
}

// ItemCompleted carries the final, complete item: a client that ignores
// deltas loses nothing.
type ItemCompleted struct {
	Item Item `json:"item"`
}

// PermissionKind is what a permission request is about.
type PermissionKind string

// Permission kinds.
const (
	PermTool      PermissionKind = "tool"
	PermCommand   PermissionKind = "command"
	PermFileWrite PermissionKind = "file_write"
	PermNetwork   PermissionKind = "network"
)

// OptionKind classifies a permission option so clients can render it and the
// daemon can tell once-only grants from session-wide ones.
type OptionKind string

// Permission option kinds.
const (
	OptionAllowOnce   OptionKind = "allow_once"
	OptionAllowAlways OptionKind = "allow_always"
	OptionDenyOnce    OptionKind = "deny_once"
	OptionDenyAlways  OptionKind = "deny_always"
)

// PermissionOption is one answer a client may pick.
type PermissionOption struct {
	ID    string     `json:"id"`
	Kind  OptionKind `json:"kind"`
	Label string     `json:"label"`
}

// PermissionRequested asks the client to allow or deny one action. It is
// answered per request; an answer is never reused for another request.
type PermissionRequested struct {
	ID     string          `json:"id"`
	Kind   PermissionKind  `json:"kind"`
	Title  string          `json:"title"`
	Detail string          `json:"detail,omitempty"`
	ItemID string          `json:"item_id,omitempty"`
	Tool   string          `json:"tool,omitempty"`
	Input  json.RawMessage `json:"input,omitempty"`
	Host   string          `json:"host,omitempty"`
	Port   int             `json:"port,omitempty"`
	// Path is the file a file_write request is about, relative to the
	// session's working directory, slash-separated.
	Path string `json:"path,omitempty"`
	// Diff is the change a file_write request asks to apply: a unified
	// diff of a text file (bounded), or a one-line summary of anything
	// else.
	Diff string `json:"diff,omitempty"`
	// Process is the sandboxed process that asked (a network request's
	// connection), when known, as the sandbox reports it: a claim of the
	// sandboxed code, never a trusted fact (see Process).
	Process *Process           `json:"process,omitempty"`
	Options []PermissionOption `json:"options"`
	// ExpiresAt is when an unanswered request is denied by timeout.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Decision is the outcome of a permission request.
type Decision string

// Decisions.
const (
	DecisionAllow Decision = "allow"
	DecisionDeny  Decision = "deny"
)

// DecidedBy says who settled a permission or question.
type DecidedBy string

// Deciders.
const (
	ByUser    DecidedBy = "user"    // a person answered this request through the API
	ByPolicy  DecidedBy = "policy"  // a rule answered and nobody was asked: the permission mode, the session's pending cap, a connection outside a turn, or a client's own rule (the CLI's --yes, or no terminal to ask)
	ByTimeout DecidedBy = "timeout" // nobody answered in time
	ByDaemon  DecidedBy = "daemon"  // e.g. the session ended while it was pending
)

// PermissionResolved records how a permission request was settled.
type PermissionResolved struct {
	ID       string    `json:"id"`
	Decision Decision  `json:"decision"`
	By       DecidedBy `json:"by"`
	OptionID string    `json:"option_id,omitempty"`
	Message  string    `json:"message,omitempty"`
}

// QuestionOption is one suggested answer to a question.
type QuestionOption struct {
	ID    string `json:"id"`
	Label string `json:"label"`
}

// QuestionRequested is the agent asking the user something.
type QuestionRequested struct {
	ID        string           `json:"id"`
	Prompt    string           `json:"prompt"`
	Options   []QuestionOption `json:"options,omitempty"`
	FreeText  bool             `json:"free_text,omitempty"`
	ItemID    string           `json:"item_id,omitempty"`
	ExpiresAt *time.Time       `json:"expires_at,omitempty"`
}

// QuestionResolved records the answer (or that none came).
type QuestionResolved struct {
	ID        string    `json:"id"`
	Answer    string    `json:"answer,omitempty"`
	OptionID  string    `json:"option_id,omitempty"`
	Cancelled bool      `json:"cancelled,omitempty"`
	By        DecidedBy `json:"by"`
}

// ViolationKind is the policy area a sandbox violation falls in.
type ViolationKind string

// Violation kinds.
const (
	ViolationNetwork    ViolationKind = "network"
	ViolationFilesystem ViolationKind = "filesystem"
	ViolationSyscall    ViolationKind = "syscall"
	ViolationResource   ViolationKind = "resource"
)

// ViolationAction is what the sandbox did about it.
type ViolationAction string

// Violation actions.
const (
	ActionBlocked ViolationAction = "blocked"
	ActionAsked   ViolationAction = "asked"
	// ActionDropped: the sandbox let the change happen inside and did not
	// carry it to the host (a protected file written in the workspace
	// overlay, dropped when the workspace was committed).
	ActionDropped ViolationAction = "dropped"
)

// SandboxViolation reports an action the policy blocked or escalated.
type SandboxViolation struct {
	Kind   ViolationKind   `json:"kind"`
	Action ViolationAction `json:"action"`
	Detail string          `json:"detail"`
	Path   string          `json:"path,omitempty"`
	Host   string          `json:"host,omitempty"`
	Port   int             `json:"port,omitempty"`
	// Process is the process that did it, when known, as the sandbox
	// reports it: a claim of the sandboxed code, never a trusted fact (see
	// Process).
	Process *Process `json:"process,omitempty"`
	// Rule is the policy rule that decided, e.g. "protected:.mcp.json".
	Rule string `json:"rule,omitempty"`
	// Count is how many violations this event stands for when the daemon
	// coalesced them (absent: one). The first violation of a kind (kind,
	// rule, path or destination) comes on its own at once; its repeats
	// within a window (10 s), and new kinds past the sandbox's reporting
	// rate, come as one summary with their count and the times of the
	// first and last of them. Counts always add up.
	Count int `json:"count,omitempty"`
	// FirstAt and LastAt bound the violations a summary counts.
	FirstAt *time.Time `json:"first_at,omitempty"`
	LastAt  *time.Time `json:"last_at,omitempty"`
}

// Process is a process inside a session's sandbox, as the sandbox reports
// it. Its name and command line come from the sandbox's /proc, which the
// sandboxed process controls: show them as what the process calls itself,
// not as a fact. agentbox writes control characters, bidi and other
// invisible formatting characters and invalid UTF-8 in them as escapes
// (\x1b, \u202e) and cuts them (name 64 bytes, command line 1 KiB).
type Process struct {
	// Pid is its pid inside the sandbox.
	Pid int `json:"pid,omitempty"`
	// Name is the name the process gives itself (its comm), as reported
	// by the sandbox: sanitised, at most 64 bytes.
	Name string `json:"name,omitempty"`
	// CommandLine is its argv joined by spaces, as reported by the
	// sandbox: sanitised, at most 1 KiB.
	CommandLine string `json:"command_line,omitempty"`
}

// Error reports a failure that the client should see. Retryable says whether
// sending the same turn again may succeed (rate limits, upstream 5xx).
type Error struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

// Native keeps an agent message that has no universal equivalent.
type Native struct {
	NativeType string          `json:"native_type"`
	Payload    json.RawMessage `json:"payload,omitempty"`
}

// EventType implementations.
func (*SessionStarted) EventType() Type      { return TypeSessionStarted }
func (*SessionEnded) EventType() Type        { return TypeSessionEnded }
func (*SessionConfigured) EventType() Type   { return TypeSessionConfigured }
func (*TurnStarted) EventType() Type         { return TypeTurnStarted }
func (*TurnCompleted) EventType() Type       { return TypeTurnCompleted }
func (*ItemStarted) EventType() Type         { return TypeItemStarted }
func (*ItemDelta) EventType() Type           { return TypeItemDelta }
func (*ItemCompleted) EventType() Type       { return TypeItemCompleted }
func (*PermissionRequested) EventType() Type { return TypePermissionRequested }
func (*PermissionResolved) EventType() Type  { return TypePermissionResolved }
func (*QuestionRequested) EventType() Type   { return TypeQuestionRequested }
func (*QuestionResolved) EventType() Type    { return TypeQuestionResolved }
func (*SandboxViolation) EventType() Type    { return TypeSandboxViolation }
func (*Error) EventType() Type               { return TypeError }
func (*Native) EventType() Type              { return TypeNative }

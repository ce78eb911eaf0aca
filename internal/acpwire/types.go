package acpwire

import "encoding/json"

// ProtocolVersionNumber is the ACP version agentbox speaks.
const ProtocolVersionNumber = 1

// Methods the agent serves (the client calls them).
const (
	AgentMethodAuthenticate           = "authenticate"
	AgentMethodInitialize             = "initialize"
	AgentMethodSessionCancel          = "session/cancel"
	AgentMethodSessionClose           = "session/close"
	AgentMethodSessionList            = "session/list"
	AgentMethodSessionLoad            = "session/load"
	AgentMethodSessionNew             = "session/new"
	AgentMethodSessionPrompt          = "session/prompt"
	AgentMethodSessionResume          = "session/resume"
	AgentMethodSessionSetConfigOption = "session/set_config_option"
	AgentMethodSessionSetMode         = "session/set_mode"
	AgentMethodSessionSetModel        = "session/set_model"
)

// Methods the client serves (the agent calls them).
const (
	ClientMethodFsReadTextFile           = "fs/read_text_file"
	ClientMethodFsWriteTextFile          = "fs/write_text_file"
	ClientMethodSessionRequestPermission = "session/request_permission"
	ClientMethodSessionUpdate            = "session/update"
	ClientMethodTerminalCreate           = "terminal/create"
	ClientMethodTerminalKill             = "terminal/kill"
	ClientMethodTerminalOutput           = "terminal/output"
	ClientMethodTerminalRelease          = "terminal/release"
	ClientMethodTerminalWaitForExit      = "terminal/wait_for_exit"
)

type (
	ProtocolVersion      int
	SessionId            string
	ToolCallId           string
	PermissionOptionId   string
	SessionModeId        string
	ModelId              string
	SessionConfigId      string
	SessionConfigValueId string
	SessionConfigGroupId string
)

// ToolKind is the kind of a tool call.
type ToolKind string

const (
	ToolKindRead       ToolKind = "read"
	ToolKindEdit       ToolKind = "edit"
	ToolKindDelete     ToolKind = "delete"
	ToolKindMove       ToolKind = "move"
	ToolKindSearch     ToolKind = "search"
	ToolKindExecute    ToolKind = "execute"
	ToolKindThink      ToolKind = "think"
	ToolKindFetch      ToolKind = "fetch"
	ToolKindSwitchMode ToolKind = "switch_mode"
	ToolKindOther      ToolKind = "other"
)

// ToolCallStatus is the state of a tool call.
type ToolCallStatus string

const (
	ToolCallStatusPending    ToolCallStatus = "pending"
	ToolCallStatusInProgress ToolCallStatus = "in_progress"
	ToolCallStatusCompleted  ToolCallStatus = "completed"
	ToolCallStatusFailed     ToolCallStatus = "failed"
)

// StopReason says why a prompt turn ended.
type StopReason string

const (
	StopReasonEndTurn         StopReason = "end_turn"
	StopReasonMaxTokens       StopReason = "max_tokens"
	StopReasonMaxTurnRequests StopReason = "max_turn_requests"
	StopReasonRefusal         StopReason = "refusal"
	StopReasonCancelled       StopReason = "cancelled"
)

// PermissionOptionKind is the kind of a permission option.
type PermissionOptionKind string

const (
	PermissionOptionKindAllowOnce    PermissionOptionKind = "allow_once"
	PermissionOptionKindAllowAlways  PermissionOptionKind = "allow_always"
	PermissionOptionKindRejectOnce   PermissionOptionKind = "reject_once"
	PermissionOptionKindRejectAlways PermissionOptionKind = "reject_always"
)

// PlanEntryPriority and PlanEntryStatus qualify a plan entry.
type (
	PlanEntryPriority string
	PlanEntryStatus   string
)

const (
	PlanEntryPriorityHigh     PlanEntryPriority = "high"
	PlanEntryPriorityMedium   PlanEntryPriority = "medium"
	PlanEntryPriorityLow      PlanEntryPriority = "low"
	PlanEntryStatusPending    PlanEntryStatus   = "pending"
	PlanEntryStatusInProgress PlanEntryStatus   = "in_progress"
	PlanEntryStatusCompleted  PlanEntryStatus   = "completed"
)

// SessionConfigOptionCategory is what a session config option selects.
type SessionConfigOptionCategory string

const (
	SessionConfigOptionCategoryMode  SessionConfigOptionCategory = "mode"
	SessionConfigOptionCategoryModel SessionConfigOptionCategory = "model"
)

// Object is a capability object agentbox neither sets nor reads; the
// protocol's encoders always write it, as {}.
type Object struct{}

// Implementation names a client or an agent.
type Implementation struct {
	Name    string  `json:"name"`
	Title   *string `json:"title,omitempty"`
	Version string  `json:"version"`
}

type FileSystemCapabilities struct {
	ReadTextFile  bool `json:"readTextFile,omitempty"`
	WriteTextFile bool `json:"writeTextFile,omitempty"`
}

type ClientCapabilities struct {
	Auth     Object                 `json:"auth"`
	Fs       FileSystemCapabilities `json:"fs"`
	Terminal bool                   `json:"terminal,omitempty"`
}

type InitializeRequest struct {
	ClientCapabilities ClientCapabilities `json:"clientCapabilities"`
	ClientInfo         *Implementation    `json:"clientInfo,omitempty"`
	ProtocolVersion    ProtocolVersion    `json:"protocolVersion"`
}

type McpCapabilities struct {
	Http bool `json:"http,omitempty"`
	Sse  bool `json:"sse,omitempty"`
}

type PromptCapabilities struct {
	EmbeddedContext bool `json:"embeddedContext,omitempty"`
	Image           bool `json:"image,omitempty"`
}

type AgentCapabilities struct {
	Auth                Object             `json:"auth"`
	LoadSession         bool               `json:"loadSession,omitempty"`
	McpCapabilities     McpCapabilities    `json:"mcpCapabilities"`
	PromptCapabilities  PromptCapabilities `json:"promptCapabilities"`
	SessionCapabilities Object             `json:"sessionCapabilities"`
}

type InitializeResponse struct {
	AgentCapabilities AgentCapabilities `json:"agentCapabilities"`
	AgentInfo         *Implementation   `json:"agentInfo,omitempty"`
	// AuthMethods are kept as they are: agentbox offers none and uses none.
	AuthMethods     []json.RawMessage `json:"authMethods"`
	ProtocolVersion ProtocolVersion   `json:"protocolVersion"`
}

// MarshalJSON writes no auth methods as [], as the schema requires.
func (v InitializeResponse) MarshalJSON() ([]byte, error) {
	type plain InitializeResponse
	if v.AuthMethods == nil {
		v.AuthMethods = []json.RawMessage{}
	}
	return json.Marshal(plain(v))
}

type AuthenticateRequest struct {
	MethodId string `json:"methodId"`
}

type AuthenticateResponse struct{}

type EnvVariable struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type HttpHeader struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type McpServerStdio struct {
	Args    []string      `json:"args"`
	Command string        `json:"command"`
	Env     []EnvVariable `json:"env"`
	Name    string        `json:"name"`
}

type McpServerHttpInline struct {
	Headers []HttpHeader `json:"headers"`
	Name    string       `json:"name"`
	Type    string       `json:"type"`
	Url     string       `json:"url"`
}

type McpServerSseInline = McpServerHttpInline

// McpServer is one MCP server of a session: one of its fields is set.
type McpServer struct {
	Http  *McpServerHttpInline
	Sse   *McpServerSseInline
	Stdio *McpServerStdio
}

type NewSessionRequest struct {
	Meta       map[string]any `json:"_meta,omitempty"`
	Cwd        string         `json:"cwd"`
	McpServers []McpServer    `json:"mcpServers"`
}

type LoadSessionRequest struct {
	Meta       map[string]any `json:"_meta,omitempty"`
	Cwd        string         `json:"cwd"`
	McpServers []McpServer    `json:"mcpServers"`
	SessionId  SessionId      `json:"sessionId"`
}

type SessionMode struct {
	Description *string       `json:"description,omitempty"`
	Id          SessionModeId `json:"id"`
	Name        string        `json:"name"`
}

type SessionModeState struct {
	AvailableModes []SessionMode `json:"availableModes"`
	CurrentModeId  SessionModeId `json:"currentModeId"`
}

type ModelInfo struct {
	Description *string `json:"description,omitempty"`
	ModelId     ModelId `json:"modelId"`
	Name        string  `json:"name"`
}

type SessionModelState struct {
	AvailableModels []ModelInfo `json:"availableModels"`
	CurrentModelId  ModelId     `json:"currentModelId"`
}

type SessionConfigSelectOption struct {
	Description *string              `json:"description,omitempty"`
	Name        string               `json:"name"`
	Value       SessionConfigValueId `json:"value"`
}

type SessionConfigSelectGroup struct {
	Group   SessionConfigGroupId        `json:"group"`
	Name    string                      `json:"name"`
	Options []SessionConfigSelectOption `json:"options"`
}

// SessionConfigSelectOptions are a select option's values: a flat list or
// a list of groups.
type SessionConfigSelectOptions struct {
	Ungrouped *[]SessionConfigSelectOption
	Grouped   *[]SessionConfigSelectGroup
}

type SessionConfigOptionSelect struct {
	Category     *SessionConfigOptionCategory `json:"category,omitempty"`
	CurrentValue SessionConfigValueId         `json:"currentValue"`
	Description  *string                      `json:"description,omitempty"`
	Id           SessionConfigId              `json:"id"`
	Name         string                       `json:"name"`
	Options      SessionConfigSelectOptions   `json:"options"`
	Type         string                       `json:"type"`
}

// SessionConfigOption is one of a session's config options; agentbox uses
// the select ones (other kinds decode to an empty option).
type SessionConfigOption struct {
	Select *SessionConfigOptionSelect
}

type NewSessionResponse struct {
	ConfigOptions []SessionConfigOption `json:"configOptions,omitempty"`
	Models        *SessionModelState    `json:"models,omitempty"`
	Modes         *SessionModeState     `json:"modes,omitempty"`
	SessionId     SessionId             `json:"sessionId"`
}

type LoadSessionResponse struct {
	ConfigOptions []SessionConfigOption `json:"configOptions,omitempty"`
	Models        *SessionModelState    `json:"models,omitempty"`
	Modes         *SessionModeState     `json:"modes,omitempty"`
}

type CloseSessionRequest struct {
	SessionId SessionId `json:"sessionId"`
}

type SetSessionModeRequest struct {
	ModeId    SessionModeId `json:"modeId"`
	SessionId SessionId     `json:"sessionId"`
}

type TextResourceContents struct {
	MimeType *string `json:"mimeType,omitempty"`
	Text     string  `json:"text"`
	Uri      string  `json:"uri"`
}

type BlobResourceContents struct {
	Blob     string  `json:"blob"`
	MimeType *string `json:"mimeType,omitempty"`
	Uri      string  `json:"uri"`
}

// EmbeddedResourceResource is an embedded resource's contents: text or blob.
type EmbeddedResourceResource struct {
	TextResourceContents *TextResourceContents
	BlobResourceContents *BlobResourceContents
}

type ContentBlockText struct {
	Text string `json:"text"`
	Type string `json:"type"`
}

type ContentBlockImage struct {
	Data     string  `json:"data"`
	MimeType string  `json:"mimeType"`
	Type     string  `json:"type"`
	Uri      *string `json:"uri,omitempty"`
}

type ContentBlockResourceLink struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Uri  string `json:"uri"`
}

type ContentBlockResource struct {
	Resource EmbeddedResourceResource `json:"resource"`
	Type     string                   `json:"type"`
}

// ContentBlock is one block of a prompt or a message: one field is set.
type ContentBlock struct {
	Text         *ContentBlockText
	Image        *ContentBlockImage
	ResourceLink *ContentBlockResourceLink
	Resource     *ContentBlockResource
}

type PromptRequest struct {
	Prompt    []ContentBlock `json:"prompt"`
	SessionId SessionId      `json:"sessionId"`
}

type Usage struct {
	CachedReadTokens  *int `json:"cachedReadTokens,omitempty"`
	CachedWriteTokens *int `json:"cachedWriteTokens,omitempty"`
	InputTokens       int  `json:"inputTokens"`
	OutputTokens      int  `json:"outputTokens"`
	TotalTokens       int  `json:"totalTokens"`
}

type PromptResponse struct {
	Meta       map[string]any `json:"_meta,omitempty"`
	StopReason StopReason     `json:"stopReason"`
	Usage      *Usage         `json:"usage,omitempty"`
}

type CancelNotification struct {
	SessionId SessionId `json:"sessionId"`
}

type ToolCallContentContent struct {
	Content ContentBlock `json:"content"`
	Type    string       `json:"type"`
}

type ToolCallContentDiff struct {
	NewText string  `json:"newText"`
	OldText *string `json:"oldText,omitempty"`
	Path    string  `json:"path"`
	Type    string  `json:"type"`
}

// ToolCallContent is one piece of a tool call's content: one field is set
// (terminal content decodes to an empty one).
type ToolCallContent struct {
	Content *ToolCallContentContent
	Diff    *ToolCallContentDiff
}

type ToolCallLocation struct {
	Line *int   `json:"line,omitempty"`
	Path string `json:"path"`
}

// ToolCallUpdate is a tool call as a permission request names it.
type ToolCallUpdate struct {
	Meta       map[string]any     `json:"_meta,omitempty"`
	Content    []ToolCallContent  `json:"content,omitempty"`
	Kind       *ToolKind          `json:"kind,omitempty"`
	Locations  []ToolCallLocation `json:"locations,omitempty"`
	RawInput   any                `json:"rawInput,omitempty"`
	RawOutput  any                `json:"rawOutput,omitempty"`
	Status     *ToolCallStatus    `json:"status,omitempty"`
	Title      *string            `json:"title,omitempty"`
	ToolCallId ToolCallId         `json:"toolCallId"`
}

type SessionUpdateToolCall struct {
	Meta          map[string]any     `json:"_meta,omitempty"`
	Content       []ToolCallContent  `json:"content,omitempty"`
	Kind          ToolKind           `json:"kind,omitempty"`
	Locations     []ToolCallLocation `json:"locations,omitempty"`
	RawInput      any                `json:"rawInput,omitempty"`
	RawOutput     any                `json:"rawOutput,omitempty"`
	SessionUpdate string             `json:"sessionUpdate"`
	Status        ToolCallStatus     `json:"status,omitempty"`
	Title         string             `json:"title"`
	ToolCallId    ToolCallId         `json:"toolCallId"`
}

type SessionToolCallUpdate struct {
	Meta          map[string]any     `json:"_meta,omitempty"`
	Content       []ToolCallContent  `json:"content,omitempty"`
	Kind          *ToolKind          `json:"kind,omitempty"`
	Locations     []ToolCallLocation `json:"locations,omitempty"`
	RawInput      any                `json:"rawInput,omitempty"`
	RawOutput     any                `json:"rawOutput,omitempty"`
	SessionUpdate string             `json:"sessionUpdate"`
	Status        *ToolCallStatus    `json:"status,omitempty"`
	Title         *string            `json:"title,omitempty"`
	ToolCallId    ToolCallId         `json:"toolCallId"`
}

// SessionUpdateChunk is a message or thought chunk (user_message_chunk,
// agent_message_chunk, agent_thought_chunk).
type SessionUpdateChunk struct {
	Content       ContentBlock `json:"content"`
	MessageId     *string      `json:"messageId,omitempty"`
	SessionUpdate string       `json:"sessionUpdate"`
}

type (
	SessionUpdateUserMessageChunk  = SessionUpdateChunk
	SessionUpdateAgentMessageChunk = SessionUpdateChunk
	SessionUpdateAgentThoughtChunk = SessionUpdateChunk
)

type PlanEntry struct {
	Content  string            `json:"content"`
	Priority PlanEntryPriority `json:"priority"`
	Status   PlanEntryStatus   `json:"status"`
}

type SessionUpdatePlan struct {
	Entries       []PlanEntry `json:"entries"`
	SessionUpdate string      `json:"sessionUpdate"`
}

type Cost struct {
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
}

type SessionUsageUpdate struct {
	Cost          *Cost  `json:"cost,omitempty"`
	SessionUpdate string `json:"sessionUpdate"`
	Size          int    `json:"size"`
	Used          int    `json:"used"`
}

// SessionUpdate is the update of a session/update notification that
// agentbox sends as a server: one field is set.
type SessionUpdate struct {
	UserMessageChunk  *SessionUpdateUserMessageChunk
	AgentMessageChunk *SessionUpdateAgentMessageChunk
	AgentThoughtChunk *SessionUpdateAgentThoughtChunk
	ToolCall          *SessionUpdateToolCall
	ToolCallUpdate    *SessionToolCallUpdate
	Plan              *SessionUpdatePlan
}

type SessionNotification struct {
	SessionId SessionId     `json:"sessionId"`
	Update    SessionUpdate `json:"update"`
}

type PermissionOption struct {
	Kind     PermissionOptionKind `json:"kind"`
	Name     string               `json:"name"`
	OptionId PermissionOptionId   `json:"optionId"`
}

type RequestPermissionRequest struct {
	Options   []PermissionOption `json:"options"`
	SessionId SessionId          `json:"sessionId"`
	ToolCall  ToolCallUpdate     `json:"toolCall"`
}

type RequestPermissionOutcomeCancelled struct {
	Outcome string `json:"outcome"`
}

type RequestPermissionOutcomeSelected struct {
	OptionId PermissionOptionId `json:"optionId"`
	Outcome  string             `json:"outcome"`
}

// RequestPermissionOutcome is the answer to a permission request.
type RequestPermissionOutcome struct {
	Cancelled *RequestPermissionOutcomeCancelled
	Selected  *RequestPermissionOutcomeSelected
}

type RequestPermissionResponse struct {
	Outcome RequestPermissionOutcome `json:"outcome"`
}

type ReadTextFileRequest struct {
	Limit     *int      `json:"limit,omitempty"`
	Line      *int      `json:"line,omitempty"`
	Path      string    `json:"path"`
	SessionId SessionId `json:"sessionId"`
}

type ReadTextFileResponse struct {
	Content string `json:"content"`
}

type WriteTextFileRequest struct {
	Content   string    `json:"content"`
	Path      string    `json:"path"`
	SessionId SessionId `json:"sessionId"`
}

type WriteTextFileResponse struct{}

type CreateTerminalRequest struct {
	Args            []string      `json:"args,omitempty"`
	Command         string        `json:"command"`
	Cwd             *string       `json:"cwd,omitempty"`
	Env             []EnvVariable `json:"env,omitempty"`
	OutputByteLimit *int          `json:"outputByteLimit,omitempty"`
	SessionId       SessionId     `json:"sessionId"`
}

type CreateTerminalResponse struct {
	TerminalId string `json:"terminalId"`
}

// TerminalRequest names a terminal: the params of terminal/output,
// terminal/wait_for_exit, terminal/kill and terminal/release.
type TerminalRequest struct {
	SessionId  SessionId `json:"sessionId"`
	TerminalId string    `json:"terminalId"`
}

type (
	TerminalOutputRequest      = TerminalRequest
	WaitForTerminalExitRequest = TerminalRequest
	KillTerminalRequest        = TerminalRequest
	ReleaseTerminalRequest     = TerminalRequest
)

type TerminalExitStatus struct {
	ExitCode *int    `json:"exitCode,omitempty"`
	Signal   *string `json:"signal,omitempty"`
}

type TerminalOutputResponse struct {
	ExitStatus *TerminalExitStatus `json:"exitStatus,omitempty"`
	Output     string              `json:"output"`
	Truncated  bool                `json:"truncated"`
}

type WaitForTerminalExitResponse = TerminalExitStatus

// EmptyResponse is the result of a method that returns nothing: {}.
type EmptyResponse struct{}

type (
	KillTerminalResponse    = EmptyResponse
	ReleaseTerminalResponse = EmptyResponse
	CloseSessionResponse    = EmptyResponse
)

// Ptr returns a pointer to v.
func Ptr[T any](v T) *T { return &v }

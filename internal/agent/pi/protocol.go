package pi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Line is one JSON line pi prints in RPC mode: a command response, an agent
// event or an extension UI request. Fields are used by the types noted on
// them; pi's other fields are left out.
type Line struct {
	Type string `json:"type"`

	// response
	ID      string          `json:"id,omitempty"`
	Command string          `json:"command,omitempty"`
	Success *bool           `json:"success,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"` // a string (response, extension_error)
	Data    json.RawMessage `json:"data,omitempty"`

	// message_start, message_update, message_end, turn_end: an agent
	// message; extension_ui_request: a string.
	Message json.RawMessage `json:"message,omitempty"`
	// message_update
	AssistantMessageEvent *AssistantEvent `json:"assistantMessageEvent,omitempty"`

	// tool_execution_*
	ToolCallID    string          `json:"toolCallId,omitempty"`
	ToolName      string          `json:"toolName,omitempty"`
	Args          json.RawMessage `json:"args,omitempty"`
	PartialResult *ToolResult     `json:"partialResult,omitempty"`
	Result        *ToolResult     `json:"result,omitempty"`
	IsError       bool            `json:"isError,omitempty"`

	// extension_ui_request
	Method     string `json:"method,omitempty"`
	Title      string `json:"title,omitempty"`
	NotifyType string `json:"notifyType,omitempty"`

	// auto_retry_*
	Attempt      int    `json:"attempt,omitempty"`
	ErrorMessage string `json:"errorMessage,omitempty"`
	FinalError   string `json:"finalError,omitempty"`
}

// AssistantEvent is the streaming delta of a message_update.
type AssistantEvent struct {
	Type         string `json:"type"`
	ContentIndex int    `json:"contentIndex"`
	Delta        string `json:"delta,omitempty"`
	Content      string `json:"content,omitempty"`
	ToolCall     *Block `json:"toolCall,omitempty"`
	Reason       string `json:"reason,omitempty"`
}

// AgentMessage is a message of pi's conversation. Content is a string for
// some user messages, else an array of blocks (see Blocks).
type AgentMessage struct {
	Role         string          `json:"role"`
	Content      json.RawMessage `json:"content,omitempty"`
	StopReason   string          `json:"stopReason,omitempty"`
	ErrorMessage string          `json:"errorMessage,omitempty"`
	Usage        *Usage          `json:"usage,omitempty"`
	Model        string          `json:"model,omitempty"`
	// toolResult
	ToolCallID string `json:"toolCallId,omitempty"`
	IsError    bool   `json:"isError,omitempty"`
}

// Blocks returns the message's content blocks (none for string content).
func (m *AgentMessage) Blocks() []Block {
	var bs []Block
	if len(m.Content) > 0 && m.Content[0] == '[' {
		_ = json.Unmarshal(m.Content, &bs)
	}
	return bs
}

// Block is one content block of a message.
type Block struct {
	Type      string          `json:"type"` // text | thinking | toolCall | image
	Text      string          `json:"text,omitempty"`
	Thinking  string          `json:"thinking,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Usage is pi's token accounting of one assistant message.
type Usage struct {
	Input      int64 `json:"input"`
	Output     int64 `json:"output"`
	CacheRead  int64 `json:"cacheRead"`
	CacheWrite int64 `json:"cacheWrite"`
	Cost       *struct {
		Total float64 `json:"total"`
	} `json:"cost,omitempty"`
}

// ToolResult is a tool's (partial) result.
type ToolResult struct {
	Content []Block         `json:"content,omitempty"`
	Details json.RawMessage `json:"details,omitempty"`
}

// Text joins the result's text blocks.
func (r *ToolResult) Text() string {
	if r == nil {
		return ""
	}
	var s string
	for _, b := range r.Content {
		if b.Type == "text" {
			s += b.Text
		}
	}
	return s
}

// DecodeLine parses one line of pi's stdout. It fails on anything that is
// not a JSON object with a string "type" (pi prints nothing else in RPC
// mode, but its output is untrusted input all the same).
func DecodeLine(b []byte) (*Line, error) {
	b = bytes.TrimSuffix(bytes.TrimSpace(b), []byte("\r"))
	if len(b) == 0 || b[0] != '{' {
		return nil, errors.New("pi: not a JSON object")
	}
	var l Line
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("pi: unreadable line: %w", err)
	}
	if l.Type == "" {
		return nil, errors.New(`pi: a line without "type"`)
	}
	return &l, nil
}

// agentMessage decodes the line's message as an agent message (nil when it
// is none, e.g. a string).
func (l *Line) agentMessage() *AgentMessage {
	if len(l.Message) == 0 || l.Message[0] != '{' {
		return nil
	}
	var m AgentMessage
	if json.Unmarshal(l.Message, &m) != nil {
		return nil
	}
	return &m
}

// text returns the line's message (or error) when it is a JSON string.
func jsonString(raw json.RawMessage) string {
	var s string
	if len(raw) > 0 && raw[0] == '"' {
		_ = json.Unmarshal(raw, &s)
	}
	return s
}

// Commands agentbox writes to pi's stdin.

type promptCommand struct {
	ID      string        `json:"id"`
	Type    string        `json:"type"` // "prompt"
	Message string        `json:"message"`
	Images  []promptImage `json:"images,omitempty"`
}

type promptImage struct {
	Type     string `json:"type"` // "image"
	Data     string `json:"data"`
	MimeType string `json:"mimeType"`
}

type simpleCommand struct {
	ID   string `json:"id"`
	Type string `json:"type"` // "abort", "get_state", "get_available_models"
}

type setModelCommand struct {
	ID       string `json:"id"`
	Type     string `json:"type"` // "set_model"
	Provider string `json:"provider"`
	ModelID  string `json:"modelId"`
}

type uiResponse struct {
	Type      string `json:"type"` // "extension_ui_response"
	ID        string `json:"id"`
	Confirmed *bool  `json:"confirmed,omitempty"`
	Cancelled bool   `json:"cancelled,omitempty"`
}

// Markers of the extension's UI requests (extension.ts).
const (
	permissionTitle = "agentbox.permission"
	beforePrefix    = "agentbox.before "
)

// permissionAsk is the message of the extension's confirm request.
type permissionAsk struct {
	ToolCallID string          `json:"toolCallId"`
	ToolName   string          `json:"toolName"`
	Input      json.RawMessage `json:"input"`
}

// beforeSnapshot is what a file looked like before a write or edit.
type beforeSnapshot struct {
	ToolCallID string  `json:"toolCallId"`
	Path       string  `json:"path"`
	Exists     bool    `json:"exists"`
	Content    *string `json:"content,omitempty"`
}

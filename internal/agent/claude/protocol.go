package claude

import (
	"encoding/json"
	"strings"
)

// The CLI's stream-json messages, as far as the adapter reads them. Every
// field that the CLI has been seen to send in another shape is kept raw, so
// that one odd field never makes a whole line unreadable.

// envelope is one line of the CLI's stdout.
type envelope struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype"`
	SessionID string `json:"session_id"`
	UUID      string `json:"uuid"`

	// system/init
	Model          string          `json:"model"`
	Cwd            string          `json:"cwd"`
	Tools          []string        `json:"tools"`
	MCPServers     json.RawMessage `json:"mcp_servers"`
	PermissionMode string          `json:"permissionMode"`
	Version        string          `json:"claude_code_version"`
	// system/status
	Status json.RawMessage `json:"status"`

	// stream_event
	Event           *streamEvent `json:"event"`
	APIMessageID    string       `json:"api_message_id"`
	AbandonedBlocks *struct {
		APIMessageID   string `json:"api_message_id"`
		FromBlockIndex int    `json:"from_block_index"`
	} `json:"abandoned_blocks"`

	// assistant, user
	Message           *apiMessage      `json:"message"`
	ParentToolUseID   *string          `json:"parent_tool_use_id"`
	ToolUseResult     json.RawMessage  `json:"tool_use_result"`
	ToolResultMeta    []toolResultMeta `json:"tool_result_meta"`
	IsAPIErrorMessage bool             `json:"is_api_error_message"`
	Error             json.RawMessage  `json:"error"`
	APIErrorStatus    *int             `json:"api_error_status"`
	APIErrorType      string           `json:"api_error_type"`

	// result
	IsError        bool            `json:"is_error"`
	Result         json.RawMessage `json:"result"`
	StopReason     *string         `json:"stop_reason"`
	Usage          *usage          `json:"usage"`
	TotalCostUSD   *float64        `json:"total_cost_usd"`
	DurationMS     int64           `json:"duration_ms"`
	Errors         json.RawMessage `json:"errors"`
	TerminalReason string          `json:"terminal_reason"`

	// control_request, control_response
	RequestID string          `json:"request_id"`
	Request   json.RawMessage `json:"request"`
	Response  json.RawMessage `json:"response"`
}

type usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
}

type toolResultMeta struct {
	ID                 string `json:"id"`
	PermissionDecision *struct {
		Decision string `json:"decision"`
		Source   string `json:"source"`
	} `json:"permission_decision"`
}

// apiMessage is an Anthropic Messages API message.
type apiMessage struct {
	ID      string          `json:"id"`
	Role    string          `json:"role"`
	Model   string          `json:"model"`
	Content json.RawMessage `json:"content"`
}

// blocks decodes the content: an array of blocks or a plain string. A block
// keeps its original JSON in raw.
func (m *apiMessage) blocks() []contentBlock {
	if m == nil || len(m.Content) == 0 {
		return nil
	}
	var raws []json.RawMessage
	if json.Unmarshal(m.Content, &raws) == nil {
		bs := make([]contentBlock, 0, len(raws))
		for _, r := range raws {
			var b contentBlock
			if json.Unmarshal(r, &b) != nil {
				b = contentBlock{Type: "unreadable"}
			}
			b.raw = r
			bs = append(bs, b)
		}
		return bs
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return []contentBlock{{Type: "text", Text: s, raw: m.Content}}
	}
	return nil
}

// contentBlock is one block of a message's content.
type contentBlock struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	Thinking string          `json:"thinking"`
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Input    json.RawMessage `json:"input"`
	// tool_result
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`

	raw json.RawMessage
}

// resultText is the text of a tool_result's content (a string, or text
// blocks).
func (b *contentBlock) resultText() string {
	if len(b.Content) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(b.Content, &s) == nil {
		return s
	}
	var parts []contentBlock
	if json.Unmarshal(b.Content, &parts) != nil {
		return string(b.Content)
	}
	var out []string
	for _, p := range parts {
		if p.Type == "text" {
			out = append(out, p.Text)
		}
	}
	return strings.Join(out, "\n")
}

// streamEvent is one raw Messages API stream event (--include-partial-messages).
type streamEvent struct {
	Type         string        `json:"type"`
	Index        int           `json:"index"`
	Message      *apiMessage   `json:"message"`
	ContentBlock *contentBlock `json:"content_block"`
	Delta        *struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		Thinking    string `json:"thinking"`
		PartialJSON string `json:"partial_json"`
	} `json:"delta"`
}

// canUseTool is the request of a can_use_tool control request.
type canUseTool struct {
	Subtype               string          `json:"subtype"`
	ToolName              string          `json:"tool_name"`
	DisplayName           string          `json:"display_name"`
	Input                 json.RawMessage `json:"input"`
	Description           string          `json:"description"`
	PermissionSuggestions json.RawMessage `json:"permission_suggestions"`
	BlockedPath           string          `json:"blocked_path"`
	ToolUseID             string          `json:"tool_use_id"`
}

// hasSuggestions says whether the CLI offered permission rules to add.
func (c *canUseTool) hasSuggestions() bool {
	var s []json.RawMessage
	return json.Unmarshal(c.PermissionSuggestions, &s) == nil && len(s) > 0
}

// Lines the adapter writes to the CLI's stdin.

type userLine struct {
	Type            string      `json:"type"`
	Message         userMessage `json:"message"`
	ParentToolUseID *string     `json:"parent_tool_use_id"`
	SessionID       string      `json:"session_id"`
}

type userMessage struct {
	Role    string `json:"role"`
	Content []any  `json:"content"`
}

type controlRequestLine struct {
	Type      string `json:"type"`
	RequestID string `json:"request_id"`
	Request   any    `json:"request"`
}

type controlResponseLine struct {
	Type     string          `json:"type"`
	Response controlResponse `json:"response"`
}

type controlResponse struct {
	Subtype   string `json:"subtype"` // success | error
	RequestID string `json:"request_id"`
	Response  any    `json:"response,omitempty"`
	Error     string `json:"error,omitempty"`
}

// permissionResult is the response to can_use_tool.
type permissionResult struct {
	Behavior           string          `json:"behavior"` // allow | deny
	UpdatedInput       json.RawMessage `json:"updatedInput,omitempty"`
	UpdatedPermissions json.RawMessage `json:"updatedPermissions,omitempty"`
	Message            string          `json:"message,omitempty"`
}

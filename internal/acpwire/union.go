package acpwire

import (
	"encoding/json"
	"errors"
)

// The protocol's unions (content blocks, session updates, tool call
// content, MCP servers, outcomes) are objects told apart by a
// discriminator field. They are written the way the protocol's reference
// encoder writes them: the variant goes through a generic JSON value, so
// keys come out sorted at every level and numbers as float64 do, and the
// discriminator is set on it. Reading picks the variant the discriminator
// names; without one (or with one agentbox does not know) it picks the
// first variant whose required fields are present, as the reference
// decoder does.

var errEmptyUnion = errors.New("acpwire: a union value with no variant set")

// remarshal writes v with its discriminator key set to disc (none when
// key is "").
func remarshal(v any, key, disc string) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, errors.New("invalid variant payload")
	}
	if key != "" {
		m[key] = disc
	}
	return json.Marshal(m)
}

// object reads b as an object's raw fields and its discriminator.
func object(b []byte, key string) (map[string]json.RawMessage, string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, "", err
	}
	var disc string
	if v, ok := m[key]; ok {
		_ = json.Unmarshal(v, &disc)
	}
	return m, disc, nil
}

func has(m map[string]json.RawMessage, keys ...string) bool {
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			return false
		}
	}
	return true
}

// variant decodes b into a new T.
func variant[T any](b []byte) (*T, error) {
	v := new(T)
	if err := json.Unmarshal(b, v); err != nil {
		return nil, errors.New("invalid variant payload")
	}
	return v, nil
}

func (u ContentBlock) MarshalJSON() ([]byte, error) {
	switch {
	case u.Text != nil:
		return remarshal(u.Text, "type", "text")
	case u.Image != nil:
		return remarshal(u.Image, "type", "image")
	case u.ResourceLink != nil:
		return remarshal(u.ResourceLink, "type", "resource_link")
	case u.Resource != nil:
		return remarshal(u.Resource, "type", "resource")
	}
	return nil, errEmptyUnion
}

func (u *ContentBlock) UnmarshalJSON(b []byte) (err error) {
	m, disc, err := object(b, "type")
	if err != nil {
		return err
	}
	*u = ContentBlock{}
	switch {
	case disc == "text":
		u.Text, err = variant[ContentBlockText](b)
	case disc == "image", disc == "audio":
		// Audio has an image's fields: agentbox takes neither from an
		// agent, and keeps an editor's as an image it cannot use.
		if disc == "image" {
			u.Image, err = variant[ContentBlockImage](b)
		}
	case disc == "resource_link":
		u.ResourceLink, err = variant[ContentBlockResourceLink](b)
	case disc == "resource":
		u.Resource, err = variant[ContentBlockResource](b)
	case has(m, "type", "text"):
		u.Text, err = variant[ContentBlockText](b)
	case has(m, "type", "data", "mimeType"):
		u.Image, err = variant[ContentBlockImage](b)
	case has(m, "type", "name", "uri"):
		u.ResourceLink, err = variant[ContentBlockResourceLink](b)
	case has(m, "type", "resource"):
		u.Resource, err = variant[ContentBlockResource](b)
	}
	return err
}

func (u EmbeddedResourceResource) MarshalJSON() ([]byte, error) {
	switch {
	case u.TextResourceContents != nil:
		return remarshal(u.TextResourceContents, "", "")
	case u.BlobResourceContents != nil:
		return remarshal(u.BlobResourceContents, "", "")
	}
	return nil, errEmptyUnion
}

func (u *EmbeddedResourceResource) UnmarshalJSON(b []byte) (err error) {
	m, _, err := object(b, "")
	if err != nil {
		return err
	}
	*u = EmbeddedResourceResource{}
	switch {
	case has(m, "text", "uri"):
		u.TextResourceContents, err = variant[TextResourceContents](b)
	case has(m, "blob", "uri"):
		u.BlobResourceContents, err = variant[BlobResourceContents](b)
	default:
		err = errors.New("no matching variant for union")
	}
	return err
}

func (u McpServer) MarshalJSON() ([]byte, error) {
	switch {
	case u.Http != nil:
		return remarshal(u.Http, "type", "http")
	case u.Sse != nil:
		return remarshal(u.Sse, "type", "sse")
	case u.Stdio != nil:
		return remarshal(u.Stdio, "", "")
	}
	return nil, errEmptyUnion
}

func (u *McpServer) UnmarshalJSON(b []byte) (err error) {
	m, disc, err := object(b, "type")
	if err != nil {
		return err
	}
	*u = McpServer{}
	switch {
	case disc == "http":
		u.Http, err = variant[McpServerHttpInline](b)
	case disc == "sse":
		u.Sse, err = variant[McpServerSseInline](b)
	case has(m, "name", "command", "args", "env"):
		u.Stdio, err = variant[McpServerStdio](b)
	}
	// Other kinds (acp) are not served: an empty server, refused by
	// whoever uses it.
	return err
}

func (u RequestPermissionOutcome) MarshalJSON() ([]byte, error) {
	switch {
	case u.Cancelled != nil:
		return remarshal(u.Cancelled, "outcome", "cancelled")
	case u.Selected != nil:
		return remarshal(u.Selected, "outcome", "selected")
	}
	return nil, errEmptyUnion
}

func (u *RequestPermissionOutcome) UnmarshalJSON(b []byte) (err error) {
	m, disc, err := object(b, "outcome")
	if err != nil {
		return err
	}
	*u = RequestPermissionOutcome{}
	switch {
	case disc == "selected":
		u.Selected, err = variant[RequestPermissionOutcomeSelected](b)
	case disc == "cancelled", has(m, "outcome"):
		u.Cancelled, err = variant[RequestPermissionOutcomeCancelled](b)
	default:
		err = errors.New("no matching variant for union")
	}
	return err
}

func (u SessionConfigOption) MarshalJSON() ([]byte, error) {
	if u.Select != nil {
		return remarshal(u.Select, "type", "select")
	}
	return nil, errEmptyUnion
}

func (u *SessionConfigOption) UnmarshalJSON(b []byte) (err error) {
	m, disc, err := object(b, "type")
	if err != nil {
		return err
	}
	*u = SessionConfigOption{}
	if disc == "select" || disc == "" && has(m, "currentValue", "id", "name", "options") {
		u.Select, err = variant[SessionConfigOptionSelect](b)
	}
	// Other kinds (boolean) are not used: an empty option.
	return err
}

func (u SessionConfigSelectOptions) MarshalJSON() ([]byte, error) {
	switch {
	case u.Ungrouped != nil:
		return json.Marshal(*u.Ungrouped)
	case u.Grouped != nil:
		return json.Marshal(*u.Grouped)
	}
	return nil, errEmptyUnion
}

func (u *SessionConfigSelectOptions) UnmarshalJSON(b []byte) (err error) {
	var arr []map[string]json.RawMessage
	if err := json.Unmarshal(b, &arr); err != nil {
		return err
	}
	*u = SessionConfigSelectOptions{}
	flat := true
	for _, e := range arr {
		flat = flat && has(e, "name", "value")
	}
	if flat {
		u.Ungrouped, err = variant[[]SessionConfigSelectOption](b)
	} else {
		u.Grouped, err = variant[[]SessionConfigSelectGroup](b)
	}
	return err
}

func (u ToolCallContent) MarshalJSON() ([]byte, error) {
	switch {
	case u.Content != nil:
		return remarshal(u.Content, "type", "content")
	case u.Diff != nil:
		return remarshal(u.Diff, "type", "diff")
	}
	return nil, errEmptyUnion
}

func (u *ToolCallContent) UnmarshalJSON(b []byte) (err error) {
	m, disc, err := object(b, "type")
	if err != nil {
		return err
	}
	*u = ToolCallContent{}
	switch {
	case disc == "content":
		u.Content, err = variant[ToolCallContentContent](b)
	case disc == "diff":
		u.Diff, err = variant[ToolCallContentDiff](b)
	case disc == "terminal":
	case has(m, "content", "type"):
		u.Content, err = variant[ToolCallContentContent](b)
	case has(m, "newText", "path", "type"):
		u.Diff, err = variant[ToolCallContentDiff](b)
	}
	// Terminal content (and kinds agentbox does not know) is empty.
	return err
}

func (u SessionUpdate) MarshalJSON() ([]byte, error) {
	const key = "sessionUpdate"
	switch {
	case u.UserMessageChunk != nil:
		return remarshal(u.UserMessageChunk, key, "user_message_chunk")
	case u.AgentMessageChunk != nil:
		return remarshal(u.AgentMessageChunk, key, "agent_message_chunk")
	case u.AgentThoughtChunk != nil:
		return remarshal(u.AgentThoughtChunk, key, "agent_thought_chunk")
	case u.ToolCall != nil:
		return remarshal(u.ToolCall, key, "tool_call")
	case u.ToolCallUpdate != nil:
		return remarshal(u.ToolCallUpdate, key, "tool_call_update")
	case u.Plan != nil:
		return remarshal(u.Plan, key, "plan")
	}
	return nil, errEmptyUnion
}

// UnmarshalJSON reads the kinds agentbox sends; other kinds decode to an
// empty update (the client side reads updates by their discriminator).
func (u *SessionUpdate) UnmarshalJSON(b []byte) (err error) {
	_, disc, err := object(b, "sessionUpdate")
	if err != nil {
		return err
	}
	*u = SessionUpdate{}
	switch disc {
	case "user_message_chunk":
		u.UserMessageChunk, err = variant[SessionUpdateChunk](b)
	case "agent_message_chunk":
		u.AgentMessageChunk, err = variant[SessionUpdateChunk](b)
	case "agent_thought_chunk":
		u.AgentThoughtChunk, err = variant[SessionUpdateChunk](b)
	case "tool_call":
		u.ToolCall, err = variant[SessionUpdateToolCall](b)
	case "tool_call_update":
		u.ToolCallUpdate, err = variant[SessionToolCallUpdate](b)
	case "plan":
		u.Plan, err = variant[SessionUpdatePlan](b)
	}
	return err
}

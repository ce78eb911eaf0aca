package acpwire

// Constructors of the values agentbox builds most, with their
// discriminators set.

func TextBlock(text string) ContentBlock {
	return ContentBlock{Text: &ContentBlockText{Text: text, Type: "text"}}
}

func ImageBlock(data, mimeType string) ContentBlock {
	return ContentBlock{Image: &ContentBlockImage{Data: data, MimeType: mimeType, Type: "image"}}
}

func ResourceLinkBlock(name, uri string) ContentBlock {
	return ContentBlock{ResourceLink: &ContentBlockResourceLink{Name: name, Type: "resource_link", Uri: uri}}
}

func ResourceBlock(res EmbeddedResourceResource) ContentBlock {
	return ContentBlock{Resource: &ContentBlockResource{Resource: res, Type: "resource"}}
}

// ToolContent is a content block as tool call content.
func ToolContent(block ContentBlock) ToolCallContent {
	return ToolCallContent{Content: &ToolCallContentContent{Content: block, Type: "content"}}
}

// ToolDiffContent is a diff as tool call content; without oldText the
// file is new.
func ToolDiffContent(path, newText string, oldText ...string) ToolCallContent {
	var o *string
	if len(oldText) > 0 {
		o = &oldText[0]
	}
	return ToolCallContent{Diff: &ToolCallContentDiff{NewText: newText, OldText: o, Path: path, Type: "diff"}}
}

func UpdateUserMessageText(text string) SessionUpdate {
	return SessionUpdate{UserMessageChunk: &SessionUpdateChunk{Content: TextBlock(text)}}
}

func UpdateAgentMessageText(text string) SessionUpdate {
	return SessionUpdate{AgentMessageChunk: &SessionUpdateChunk{Content: TextBlock(text)}}
}

func UpdateAgentThoughtText(text string) SessionUpdate {
	return SessionUpdate{AgentThoughtChunk: &SessionUpdateChunk{Content: TextBlock(text)}}
}

func UpdatePlan(entries ...PlanEntry) SessionUpdate {
	return SessionUpdate{Plan: &SessionUpdatePlan{Entries: entries}}
}

// Selected is the outcome choosing an option.
func Selected(id PermissionOptionId) RequestPermissionOutcome {
	return RequestPermissionOutcome{Selected: &RequestPermissionOutcomeSelected{OptionId: id, Outcome: "selected"}}
}

// Cancelled is the outcome of a request withdrawn or not answered.
func Cancelled() RequestPermissionOutcome {
	return RequestPermissionOutcome{Cancelled: &RequestPermissionOutcomeCancelled{Outcome: "cancelled"}}
}

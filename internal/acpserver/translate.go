package acpserver

import (
	"encoding/json"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/event"
	acp "github.com/agentbox/agentbox/internal/acpwire"
)

// translator turns one session's universal events into ACP session
// updates. It remembers what it needs across events (the kind of each
// item, whether a message was streamed, a command's output so far) and
// does no I/O. It is not safe for concurrent use.
type translator struct {
	// replay is set for session/load: the user's own messages are sent
	// back too (during a prompt the client already has them).
	replay bool

	items  map[string]*itemState
	output map[string]string // tool item id → output so far
}

type itemState struct {
	kind     event.ItemKind
	role     event.Role
	streamed bool // text deltas were sent
	started  bool // a tool_call update was sent
}

func newTranslator(replay bool) *translator {
	return &translator{replay: replay, items: map[string]*itemState{}, output: map[string]string{}}
}

func (t *translator) state(id string) *itemState {
	st := t.items[id]
	if st == nil {
		st = &itemState{}
		t.items[id] = st
	}
	return st
}

// isTool says whether items of kind k are ACP tool calls.
func isTool(k event.ItemKind) bool {
	switch k {
	case event.ItemToolCall, event.ItemCommand, event.ItemFileChange, event.ItemWebSearch, event.ItemMCPToolCall:
		return true
	}
	return false
}

// updates returns the session updates for one event (none for events ACP
// has no place for: lifecycle, permissions, which the prompt loop handles).
func (t *translator) updates(e event.Event) []acp.SessionUpdate {
	p, err := e.Decode()
	if err != nil {
		return nil
	}
	switch p := p.(type) {
	case *event.ItemStarted:
		it := p.Item
		st := t.state(it.ID)
		st.kind, st.role = it.Kind, it.Role
		switch {
		case isTool(it.Kind):
			st.started = true
			return []acp.SessionUpdate{{ToolCall: toolCallStart(it)}}
		case it.Kind == event.ItemPlan && len(it.Entries) > 0:
			return []acp.SessionUpdate{acp.UpdatePlan(planEntries(it.Entries)...)}
		}
	case *event.ItemDelta:
		st := t.items[p.ItemID]
		if st == nil || p.Delta == "" {
			return nil
		}
		switch {
		case p.Field == event.DeltaText && st.kind == event.ItemMessage:
			if st.role == event.RoleUser && !t.replay {
				return nil
			}
			st.streamed = true
			return []acp.SessionUpdate{messageChunk(st.role, p.Delta)}
		case p.Field == event.DeltaText && st.kind == event.ItemReasoning:
			st.streamed = true
			return []acp.SessionUpdate{acp.UpdateAgentThoughtText(p.Delta)}
		case p.Field == event.DeltaOutput && isTool(st.kind):
			t.output[p.ItemID] += p.Delta
			return []acp.SessionUpdate{{ToolCallUpdate: &acp.SessionToolCallUpdate{ToolCallId: acp.ToolCallId(p.ItemID),
				Status:  acp.Ptr(acp.ToolCallStatusInProgress),
				Content: []acp.ToolCallContent{acp.ToolContent(acp.TextBlock(t.output[p.ItemID]))}}}}
		}
	case *event.ItemCompleted:
		it := p.Item
		st := t.state(it.ID)
		defer delete(t.items, it.ID)
		defer delete(t.output, it.ID)
		switch {
		case it.Kind == event.ItemMessage:
			if st.streamed || it.Text() == "" || (it.Role == event.RoleUser && !t.replay) {
				return nil
			}
			return []acp.SessionUpdate{messageChunk(it.Role, it.Text())}
		case it.Kind == event.ItemReasoning:
			if st.streamed || it.Text() == "" {
				return nil
			}
			return []acp.SessionUpdate{acp.UpdateAgentThoughtText(it.Text())}
		case it.Kind == event.ItemPlan:
			return []acp.SessionUpdate{acp.UpdatePlan(planEntries(it.Entries)...)}
		case isTool(it.Kind):
			var out []acp.SessionUpdate
			if !st.started {
				out = append(out, acp.SessionUpdate{ToolCall: toolCallStart(it)})
			}
			return append(out, toolCallEnd(it))
		}
	case *event.Error:
		// The client shows the agent's messages; an error is told there.
		return []acp.SessionUpdate{acp.UpdateAgentMessageText("\n\n[agentbox] error: " + p.Message + "\n")}
	}
	return nil
}

func messageChunk(role event.Role, text string) acp.SessionUpdate {
	if role == event.RoleUser {
		return acp.UpdateUserMessageText(text)
	}
	return acp.UpdateAgentMessageText(text)
}

// toolKind maps an item onto ACP's tool kinds.
func toolKind(it event.Item) acp.ToolKind {
	switch it.Kind {
	case event.ItemCommand:
		return acp.ToolKindExecute
	case event.ItemFileChange:
		if len(it.Changes) > 0 && it.Changes[0].Kind == event.FileDelete {
			return acp.ToolKindDelete
		}
		return acp.ToolKindEdit
	case event.ItemWebSearch:
		return acp.ToolKindSearch
	}
	name := strings.ToLower(it.Name)
	switch {
	case strings.Contains(name, "read") || name == "view" || name == "cat":
		return acp.ToolKindRead
	case strings.Contains(name, "grep") || strings.Contains(name, "glob") || strings.Contains(name, "find") ||
		strings.Contains(name, "search") || name == "ls" || name == "list":
		return acp.ToolKindSearch
	case strings.Contains(name, "fetch"):
		return acp.ToolKindFetch
	case strings.Contains(name, "think"):
		return acp.ToolKindThink
	}
	return acp.ToolKindOther
}

// toolTitle is the one line a client shows for a tool call.
func toolTitle(it event.Item) string {
	switch it.Kind {
	case event.ItemCommand:
		cmd := it.Command
		if cmd == "" {
			cmd = strings.Join(it.Argv, " ")
		}
		return clip("Run "+firstLine(cmd), 200)
	case event.ItemFileChange:
		var paths []string
		verb := "Write "
		for _, c := range it.Changes {
			paths = append(paths, filepath.Base(c.Path))
			if c.Kind != event.FileAdd {
				verb = "Edit "
			}
		}
		if len(paths) == 0 {
			return "Edit files"
		}
		return clip(verb+strings.Join(paths, ", "), 200)
	case event.ItemWebSearch:
		return clip("Search the web: "+it.Query, 200)
	case event.ItemMCPToolCall:
		return clip(it.Server+": "+it.Name, 200)
	}
	if it.Name == "" {
		return "Tool call"
	}
	return clip(it.Name, 200)
}

func locations(it event.Item) []acp.ToolCallLocation {
	var locs []acp.ToolCallLocation
	for _, c := range it.Changes {
		if c.Path != "" {
			locs = append(locs, acp.ToolCallLocation{Path: c.Path})
		}
	}
	return locs
}

func rawInput(it event.Item) any {
	switch {
	case len(it.Input) > 0 && json.Valid(it.Input):
		return it.Input
	case it.Kind == event.ItemCommand:
		return map[string]any{"command": it.Command, "cwd": it.Cwd}
	}
	return nil
}

func toolCallStart(it event.Item) *acp.SessionUpdateToolCall {
	return &acp.SessionUpdateToolCall{ToolCallId: acp.ToolCallId(it.ID), Title: toolTitle(it), Kind: toolKind(it),
		Status: acp.ToolCallStatusInProgress, Locations: locations(it), RawInput: rawInput(it)}
}

// toolCallEnd is the final update of a tool item: its status, its output
// or error as text, its diffs.
func toolCallEnd(it event.Item) acp.SessionUpdate {
	status := acp.ToolCallStatusCompleted
	if it.Status == event.StatusFailed || it.Status == event.StatusDeclined {
		status = acp.ToolCallStatusFailed
	}
	var content []acp.ToolCallContent
	for _, c := range it.Changes {
		if c.Diff == "" {
			continue
		}
		old, nw, ok := diffTexts(c.Diff)
		if !ok {
			content = append(content, acp.ToolContent(acp.TextBlock(c.Diff)))
			continue
		}
		if c.Kind == event.FileAdd {
			content = append(content, acp.ToolDiffContent(c.Path, nw))
		} else {
			content = append(content, acp.ToolDiffContent(c.Path, nw, old))
		}
	}
	text := it.Output
	if it.Error != "" {
		text = strings.TrimSpace(text + "\n" + it.Error)
	}
	if it.Status == event.StatusDeclined && text == "" {
		text = "declined"
	}
	if text != "" {
		content = append(content, acp.ToolContent(acp.TextBlock(text)))
	}
	raw := map[string]any{"status": string(it.Status)}
	if it.ExitCode != nil {
		raw["exit_code"] = *it.ExitCode
	}
	return acp.SessionUpdate{ToolCallUpdate: &acp.SessionToolCallUpdate{ToolCallId: acp.ToolCallId(it.ID),
		Status: acp.Ptr(status), Content: content, Locations: locations(it), RawOutput: raw}}
}

// diffTexts splits a unified diff into the old and new text of its hunks
// (context lines in both), which is what an ACP diff holds. ok is false
// for a text that is not a unified diff.
func diffTexts(diff string) (old, nw string, ok bool) {
	var o, n strings.Builder
	inHunk := false
	for _, line := range strings.SplitAfter(diff, "\n") {
		switch {
		case strings.HasPrefix(line, "@@"):
			if inHunk {
				o.WriteString("…\n")
				n.WriteString("…\n")
			}
			inHunk, ok = true, true
		case !inHunk || line == "":
		case strings.HasPrefix(line, `\`): // "\ No newline at end of file"
		case line[0] == ' ':
			o.WriteString(line[1:])
			n.WriteString(line[1:])
		case line[0] == '-':
			o.WriteString(line[1:])
		case line[0] == '+':
			n.WriteString(line[1:])
		}
	}
	return o.String(), n.String(), ok
}

func planEntries(es []event.PlanEntry) []acp.PlanEntry {
	out := make([]acp.PlanEntry, 0, len(es))
	for _, e := range es {
		st := acp.PlanEntryStatusPending
		switch e.Status {
		case "in_progress":
			st = acp.PlanEntryStatusInProgress
		case "completed":
			st = acp.PlanEntryStatusCompleted
		}
		pr := acp.PlanEntryPriorityMedium
		switch e.Priority {
		case "high":
			pr = acp.PlanEntryPriorityHigh
		case "low":
			pr = acp.PlanEntryPriorityLow
		}
		out = append(out, acp.PlanEntry{Content: e.Content, Status: st, Priority: pr})
	}
	return out
}

// Synthetic option ids, for requests that offer no allow or deny option.
const (
	optAllow = "agentbox.allow"
	optDeny  = "agentbox.deny"
)

// permissionRequest is the ACP request for an agentbox permission request.
// toolCallID is the tool call it is about (its item, or the request's own
// id when it names none).
func permissionRequest(sid string, p *event.PermissionRequested, toolCallID string) acp.RequestPermissionRequest {
	var opts []acp.PermissionOption
	var allow, deny bool
	for _, o := range p.Options {
		var kind acp.PermissionOptionKind
		switch o.Kind {
		case event.OptionAllowOnce:
			kind, allow = acp.PermissionOptionKindAllowOnce, true
		case event.OptionAllowAlways:
			kind, allow = acp.PermissionOptionKindAllowAlways, true
		case event.OptionDenyOnce:
			kind, deny = acp.PermissionOptionKindRejectOnce, true
		case event.OptionDenyAlways:
			kind, deny = acp.PermissionOptionKindRejectAlways, true
		default:
			continue
		}
		label := o.Label
		if label == "" {
			label = string(o.Kind)
		}
		opts = append(opts, acp.PermissionOption{OptionId: acp.PermissionOptionId(o.ID), Kind: kind, Name: label})
	}
	if !allow {
		opts = append([]acp.PermissionOption{{OptionId: optAllow, Kind: acp.PermissionOptionKindAllowOnce, Name: "Allow"}}, opts...)
	}
	if !deny {
		opts = append(opts, acp.PermissionOption{OptionId: optDeny, Kind: acp.PermissionOptionKindRejectOnce, Name: "Deny"})
	}
	title := p.Title
	if p.Detail != "" {
		title = clip(title+": "+firstLine(p.Detail), 300)
	}
	tc := acp.ToolCallUpdate{ToolCallId: acp.ToolCallId(toolCallID), Title: acp.Ptr(title),
		Status: acp.Ptr(acp.ToolCallStatusPending)}
	kind := acp.ToolKindOther
	switch p.Kind {
	case event.PermCommand:
		kind = acp.ToolKindExecute
	case event.PermFileWrite:
		kind = acp.ToolKindEdit
	case event.PermNetwork:
		kind = acp.ToolKindFetch
	}
	tc.Kind = acp.Ptr(kind)
	if len(p.Input) > 0 && json.Valid(p.Input) {
		tc.RawInput = p.Input
	}
	return acp.RequestPermissionRequest{SessionId: acp.SessionId(sid), ToolCall: tc, Options: opts}
}

// permissionAnswer turns the client's choice into agentbox's answer.
func permissionAnswer(req acp.RequestPermissionRequest, resp acp.RequestPermissionResponse) (decision, optionID string) {
	sel := resp.Outcome.Selected
	if sel == nil {
		return "deny", "" // cancelled
	}
	for _, o := range req.Options {
		if o.OptionId != sel.OptionId {
			continue
		}
		id := string(o.OptionId)
		if id == optAllow || id == optDeny {
			id = ""
		}
		switch o.Kind {
		case acp.PermissionOptionKindAllowOnce, acp.PermissionOptionKindAllowAlways:
			return "allow", id
		default:
			return "deny", id
		}
	}
	return "deny", ""
}

// stopReason maps a turn's stop reason; an error turn has none (the prompt
// fails instead).
func stopReason(r event.StopReason) (acp.StopReason, bool) {
	switch r {
	case event.StopEndTurn:
		return acp.StopReasonEndTurn, true
	case event.StopMaxTokens:
		return acp.StopReasonMaxTokens, true
	case event.StopInterrupted:
		return acp.StopReasonCancelled, true
	case event.StopRefusal:
		return acp.StopReasonRefusal, true
	}
	return "", false
}

func usage(u *event.Usage) *acp.Usage {
	if u == nil {
		return nil
	}
	out := &acp.Usage{InputTokens: int(u.InputTokens), OutputTokens: int(u.OutputTokens),
		TotalTokens: int(u.InputTokens + u.OutputTokens + u.CacheReadTokens + u.CacheWriteTokens)}
	if u.CacheReadTokens > 0 {
		out.CachedReadTokens = acp.Ptr(int(u.CacheReadTokens))
	}
	if u.CacheWriteTokens > 0 {
		out.CachedWriteTokens = acp.Ptr(int(u.CacheWriteTokens))
	}
	return out
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

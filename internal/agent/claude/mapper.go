package claude

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/ids"
)

// Mapper translates the CLI's stdout lines into universal events. It keeps
// the state a translation needs (open streamed blocks, tool items waiting
// for their result, the task list) and nothing else: it does no I/O, so
// recorded transcripts go through it in tests exactly as a live process's
// output does. A Mapper is not safe for concurrent use.
type Mapper struct {
	// NewID makes item ids (ids.New(ids.Item) when nil).
	NewID func() string
	// Raw keeps each native line in the events made from it.
	Raw bool
	// Interrupting is set by the session while an interrupt it asked for
	// is under way: the turn's result is then "interrupted", not an error.
	Interrupting bool

	cwd      string
	nativeID string
	initSeen bool

	msgs     map[string]*streamMsg // streamed API messages by id
	msgOrder []string              // their ids, in order
	cur      string                // the message being streamed
	tools    map[string]*toolItem  // tool items by tool_use id, until their result
	order    []string              // tool_use ids in start order
	tasks    []event.PlanEntry     // the Task* tools' list
	taskIDs  []string              // ids of tasks, parallel to tasks
	// errored is set once the turn reported an error event, so the
	// result does not report it twice.
	errored bool
}

// Output is what one line gives besides events.
type Output struct {
	Events []event.Event
	// NativeSessionID is set when the CLI names a (new) session id.
	NativeSessionID string
	// Result is set by the line that ends a turn.
	Result *agent.Result
	// Control is set for a control_request or control_response line; the
	// session handles those.
	Control *envelope
}

// NewMapper returns a Mapper for a session in cwd.
func NewMapper(cwd string) *Mapper {
	return &Mapper{cwd: cwd, msgs: map[string]*streamMsg{}, tools: map[string]*toolItem{}}
}

// streamMsg is an API message streamed as partial events.
type streamMsg struct {
	blocks map[int]*block
	order  []*block
}

// block is a streamed content block.
type block struct {
	index   int
	kind    string // text | thinking | tool_use | other
	itemID  string
	text    strings.Builder
	toolID  string
	done    bool // item.completed was emitted
	claimed bool // the full assistant message accounted for it
}

// toolItem is a tool call waiting for its result.
type toolItem struct {
	item  event.Item
	name  string
	input json.RawMessage
}

func (m *Mapper) newID() string {
	if m.NewID != nil {
		return m.NewID()
	}
	return ids.New(ids.Item)
}

// NativeSessionID is the last session id the CLI named.
func (m *Mapper) NativeSessionID() string { return m.nativeID }

// SetNativeSessionID records the session id the adapter started the CLI
// with, so the first init does not count as new.
func (m *Mapper) SetNativeSessionID(id string) { m.nativeID = id }

// out collects a line's output.
type out struct {
	m   *Mapper
	raw json.RawMessage
	o   Output
}

func (o *out) emit(p event.Payload) {
	ev := event.New(event.SourceAgent, p)
	if o.m.Raw && len(o.raw) > 0 {
		ev.Raw = o.raw
	}
	o.o.Events = append(o.o.Events, ev)
}

func (o *out) native(typ string, payload json.RawMessage) {
	o.emit(&event.Native{NativeType: typ, Payload: payload})
}

// Map translates one stdout line (without its newline).
func (m *Mapper) Map(line []byte) Output {
	line = bytes.TrimSpace(line)
	o := &out{m: m}
	if len(line) == 0 {
		return o.o
	}
	if !json.Valid(line) {
		o.emit(&event.Error{Code: "invalid_output", Message: "the CLI printed a line that is not JSON: " + agent.Clip(string(line), 200)})
		return o.o
	}
	o.raw = json.RawMessage(line)
	var env envelope
	if err := json.Unmarshal(line, &env); err != nil {
		// Valid JSON in an unexpected shape: keep it.
		var probe struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(line, &probe)
		o.native(orDefault(probe.Type, "unknown"), o.raw)
		return o.o
	}
	switch env.Type {
	case "system":
		m.system(o, &env)
	case "stream_event":
		m.stream(o, &env)
	case "assistant":
		m.assistant(o, &env)
	case "user":
		m.user(o, &env)
	case "result":
		m.result(o, &env)
	case "control_request", "control_response", "control_cancel_request":
		o.o.Control = &env
	default:
		o.native(orDefault(env.Type, "unknown"), o.raw)
	}
	return o.o
}

func (m *Mapper) system(o *out, env *envelope) {
	switch env.Subtype {
	case "init":
		if env.Cwd != "" {
			m.cwd = env.Cwd
		}
		newID := env.SessionID != "" && env.SessionID != m.nativeID
		if newID {
			m.nativeID = env.SessionID
			o.o.NativeSessionID = env.SessionID
		}
		if m.initSeen && !newID {
			return // the CLI repeats its init at every turn
		}
		m.initSeen = true
		p, _ := json.Marshal(map[string]any{
			"session_id": env.SessionID, "model": env.Model, "cwd": env.Cwd, "tools": env.Tools,
			"mcp_servers": env.MCPServers, "permission_mode": env.PermissionMode, "claude_code_version": env.Version,
		})
		o.native("system/init", p)
	case "status":
		if string(env.Status) == `"requesting"` {
			return
		}
		o.native("system/status", o.raw)
	default:
		o.native("system/"+orDefault(env.Subtype, "unknown"), o.raw)
	}
}

// stream handles partial-message events.
func (m *Mapper) stream(o *out, env *envelope) {
	ev := env.Event
	if ev == nil {
		o.native("stream_event", o.raw)
		return
	}
	id := env.APIMessageID
	if ev.Type == "message_start" && ev.Message != nil && ev.Message.ID != "" {
		id = ev.Message.ID
	}
	if id == "" {
		id = m.cur
	}
	switch ev.Type {
	case "message_start":
		m.cur = id
		m.streamMsg(id)
	case "content_block_start":
		sm := m.streamMsg(id)
		b := &block{index: ev.Index, kind: "other"}
		if cb := ev.ContentBlock; cb != nil {
			switch cb.Type {
			case "text", "thinking":
				b.kind = cb.Type
				b.itemID = m.newID()
				it := event.Item{ID: b.itemID, Kind: event.ItemMessage, Status: event.StatusInProgress, Role: event.RoleAssistant}
				if cb.Type == "thinking" {
					it = event.Item{ID: b.itemID, Kind: event.ItemReasoning, Status: event.StatusInProgress}
				}
				o.emit(&event.ItemStarted{Item: it})
				if t := cb.Text + cb.Thinking; t != "" {
					b.text.WriteString(t)
					o.emit(&event.ItemDelta{ItemID: b.itemID, Field: event.DeltaText, Delta: t})
				}
			case "tool_use":
				b.kind, b.toolID = "tool_use", cb.ID
				if t := m.startTool(o, cb.ID, cb.Name, nil); t != nil {
					b.itemID = t.item.ID
				}
			}
		}
		sm.blocks[ev.Index] = b
		sm.order = append(sm.order, b)
	case "content_block_delta":
		b := m.streamMsg(id).blocks[ev.Index]
		if b == nil || ev.Delta == nil || b.done || b.itemID == "" {
			return
		}
		switch ev.Delta.Type {
		case "text_delta", "thinking_delta":
			d := ev.Delta.Text + ev.Delta.Thinking
			if d == "" {
				return
			}
			b.text.WriteString(d)
			o.emit(&event.ItemDelta{ItemID: b.itemID, Field: event.DeltaText, Delta: d})
		case "input_json_delta":
			if ev.Delta.PartialJSON != "" {
				o.emit(&event.ItemDelta{ItemID: b.itemID, Field: event.DeltaInput, Delta: ev.Delta.PartialJSON})
			}
		}
	case "content_block_stop", "message_delta", "ping":
	case "message_stop":
		abandonedFrom := -1
		if a := env.AbandonedBlocks; a != nil && (a.APIMessageID == "" || a.APIMessageID == id) {
			abandonedFrom = a.FromBlockIndex
		}
		if sm := m.msgs[id]; sm != nil {
			for _, b := range sm.order {
				m.finishBlock(o, b, abandonedFrom >= 0 && b.index >= abandonedFrom)
			}
		}
	default:
		o.native("stream_event/"+ev.Type, o.raw)
	}
}

func (m *Mapper) streamMsg(id string) *streamMsg {
	sm := m.msgs[id]
	if sm == nil {
		sm = &streamMsg{blocks: map[int]*block{}}
		m.msgs[id] = sm
		m.msgOrder = append(m.msgOrder, id)
	}
	return sm
}

// finishBlock completes a streamed text or thinking block that the full
// message has not completed.
func (m *Mapper) finishBlock(o *out, b *block, abandoned bool) {
	if b.done || b.itemID == "" || (b.kind != "text" && b.kind != "thinking") {
		return
	}
	b.done = true
	it := textItem(b.kind, b.itemID, b.text.String())
	if abandoned {
		it.Status, it.Error = event.StatusFailed, "interrupted"
	}
	o.emit(&event.ItemCompleted{Item: it})
}

func textItem(kind, id, text string) event.Item {
	it := event.Item{ID: id, Kind: event.ItemMessage, Status: event.StatusCompleted, Role: event.RoleAssistant}
	if kind == "thinking" {
		it = event.Item{ID: id, Kind: event.ItemReasoning, Status: event.StatusCompleted}
	}
	if text != "" {
		it.Content = []event.ContentPart{event.TextPart(text)}
	}
	return it
}

// assistant handles a complete assistant message.
func (m *Mapper) assistant(o *out, env *envelope) {
	if env.IsAPIErrorMessage {
		m.apiError(o, env)
		return
	}
	msgID := ""
	if env.Message != nil {
		msgID = env.Message.ID
	}
	sm := m.msgs[msgID]
	for _, cb := range env.Message.blocks() {
		switch cb.Type {
		case "text", "thinking":
			var b *block
			if sm != nil {
				for _, c := range sm.order {
					if c.kind == cb.Type && !c.claimed {
						b = c
						break
					}
				}
			}
			text := cb.Text + cb.Thinking
			switch {
			case b == nil:
				it := textItem(cb.Type, m.newID(), "")
				it.Status = event.StatusInProgress
				o.emit(&event.ItemStarted{Item: it})
				o.emit(&event.ItemCompleted{Item: textItem(cb.Type, it.ID, text)})
			case !b.done:
				b.claimed, b.done = true, true
				o.emit(&event.ItemCompleted{Item: textItem(cb.Type, b.itemID, text)})
			default:
				b.claimed = true
			}
		case "tool_use":
			if t := m.tools[cb.ID]; t != nil {
				t.input = cb.Input
				continue
			}
			m.startTool(o, cb.ID, cb.Name, cb.Input)
		default: // redacted_thinking, server tools, …
			o.native("assistant/"+orDefault(cb.Type, "unknown"), cb.raw)
		}
	}
}

// apiError reports the CLI's synthetic "API Error" message.
func (m *Mapper) apiError(o *out, env *envelope) {
	var text []string
	for _, cb := range env.Message.blocks() {
		if cb.Type == "text" {
			text = append(text, cb.Text)
		}
	}
	code := "api_error"
	var kind string
	if json.Unmarshal(env.Error, &kind) == nil && kind != "" {
		code = "api_error:" + kind
	}
	status := 0
	if env.APIErrorStatus != nil {
		status = *env.APIErrorStatus
	}
	msg := strings.Join(text, "\n")
	if msg == "" {
		msg = fmt.Sprintf("the model API failed (status %d)", status)
	}
	m.errored = true
	o.emit(&event.Error{Code: code, Message: msg, Retryable: retryable(status, kind)})
}

func retryable(status int, kind string) bool {
	return status == 429 || status == 529 || status >= 500 || kind == "rate_limit" || kind == "overloaded_error"
}

// Tools.

// toolKind says which item kind a tool's calls become.
func toolKind(name string) event.ItemKind {
	switch name {
	case "Bash":
		return event.ItemCommand
	case "Write", "Edit", "MultiEdit", "NotebookEdit":
		return event.ItemFileChange
	case "TodoWrite", "TaskCreate", "TaskUpdate", "TaskList":
		return event.ItemPlan
	case "WebSearch", "WebFetch":
		return event.ItemWebSearch
	}
	if _, _, ok := mcpName(name); ok {
		return event.ItemMCPToolCall
	}
	return event.ItemToolCall
}

// mcpName splits mcp__<server>__<tool>.
func mcpName(name string) (server, tool string, ok bool) {
	rest, found := strings.CutPrefix(name, "mcp__")
	if !found {
		return "", "", false
	}
	server, tool, ok = strings.Cut(rest, "__")
	return server, tool, ok && server != "" && tool != ""
}

// toolInput is the union of the inputs the mapping reads.
type toolInput struct {
	Command      string `json:"command"`
	Description  string `json:"description"`
	FilePath     string `json:"file_path"`
	NotebookPath string `json:"notebook_path"`
	Content      string `json:"content"`
	OldString    string `json:"old_string"`
	NewString    string `json:"new_string"`
	Edits        []struct {
		OldString string `json:"old_string"`
		NewString string `json:"new_string"`
	} `json:"edits"`
	Todos []struct {
		Content string `json:"content"`
		Status  string `json:"status"`
	} `json:"todos"`
	Query   string `json:"query"`
	URL     string `json:"url"`
	TaskID  string `json:"taskId"`
	Subject string `json:"subject"`
	Status  string `json:"status"`
}

func decodeInput(raw json.RawMessage) toolInput {
	var in toolInput
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &in)
	}
	return in
}

// rel makes path relative to the session's directory when it is inside.
func (m *Mapper) rel(path string) string {
	if path == "" || m.cwd == "" {
		return path
	}
	if r, err := filepath.Rel(m.cwd, path); err == nil && filepath.IsLocal(r) {
		return filepath.ToSlash(r)
	}
	return path
}

// toolItemFor fills an item for a call of tool name with input (which may
// still be unknown: nil).
func (m *Mapper) toolItemFor(id, toolUseID, name string, input json.RawMessage) event.Item {
	it := event.Item{ID: id, Kind: toolKind(name), Status: event.StatusInProgress, NativeID: toolUseID}
	in := decodeInput(input)
	switch it.Kind {
	case event.ItemCommand:
		it.Command, it.Cwd = in.Command, m.cwd
	case event.ItemFileChange:
		p := in.FilePath
		if name == "NotebookEdit" {
			p = in.NotebookPath
		}
		// Whether a Write adds or replaces a file is known only from its
		// result, so its change is announced then.
		if p != "" && name != "Write" {
			it.Changes = []event.FileChange{{Path: m.rel(p), Kind: event.FileUpdate}}
		}
	case event.ItemPlan:
	case event.ItemWebSearch:
		it.Query = orDefault(in.Query, in.URL)
	case event.ItemMCPToolCall:
		it.Server, it.Name, _ = mcpName(name)
		it.Input = input
	default:
		it.Name, it.Input = name, input
	}
	return it
}

// startTool opens a tool item and emits item.started.
func (m *Mapper) startTool(o *out, toolUseID, name string, input json.RawMessage) *toolItem {
	if toolUseID == "" {
		return nil
	}
	if t := m.tools[toolUseID]; t != nil {
		return t
	}
	t := &toolItem{item: m.toolItemFor(m.newID(), toolUseID, name, input), name: name, input: input}
	m.tools[toolUseID] = t
	m.order = append(m.order, toolUseID)
	o.emit(&event.ItemStarted{Item: t.item})
	return t
}

// ToolItemID returns the item id of an open tool call, or "".
func (m *Mapper) ToolItemID(toolUseID string) string {
	if t := m.tools[toolUseID]; t != nil {
		return t.item.ID
	}
	return ""
}

// user handles a user message: tool results, or the CLI's own notes.
func (m *Mapper) user(o *out, env *envelope) {
	blocks := env.Message.blocks()
	results := false
	for i := range blocks {
		if blocks[i].Type == "tool_result" {
			results = true
			m.toolResult(o, env, &blocks[i])
		}
	}
	if !results {
		o.native("user", o.raw)
	}
}

var exitCodeRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^Exit code (\d+)\n?`) })

// bashResult is the tool_use_result of a Bash call.
type bashResult struct {
	Stdout      *string `json:"stdout"`
	Stderr      string  `json:"stderr"`
	Interrupted bool    `json:"interrupted"`
}

// fileResult is the tool_use_result of Write and Edit.
type fileResult struct {
	Type            string  `json:"type"` // create | update (Write)
	FilePath        string  `json:"filePath"`
	Content         *string `json:"content"`
	OriginalFile    *string `json:"originalFile"`
	StructuredPatch []hunk  `json:"structuredPatch"`
}

func (m *Mapper) toolResult(o *out, env *envelope, cb *contentBlock) {
	t := m.tools[cb.ToolUseID]
	if t == nil {
		// A result for a call never seen (e.g. a subagent's): keep it.
		o.native("user/tool_result", cb.raw)
		return
	}
	delete(m.tools, cb.ToolUseID)
	it := m.toolItemFor(t.item.ID, cb.ToolUseID, t.name, t.input)
	text := cb.resultText()
	it.Status = event.StatusCompleted
	declined := false
	for _, meta := range env.ToolResultMeta {
		if meta.ID == cb.ToolUseID && meta.PermissionDecision != nil && meta.PermissionDecision.Decision == "reject" {
			declined = true
		}
	}
	switch {
	case declined:
		it.Status, it.Error = event.StatusDeclined, text
	case cb.IsError:
		it.Status, it.Error = event.StatusFailed, text
	}
	in := decodeInput(t.input)
	switch it.Kind {
	case event.ItemCommand:
		m.commandResult(&it, env, text, cb.IsError && !declined)
	case event.ItemFileChange:
		m.fileResult(&it, t.name, in, env.ToolUseResult)
	case event.ItemPlan:
		m.planResult(&it, t.name, in, env.ToolUseResult, it.Status == event.StatusCompleted)
		if it.Status == event.StatusCompleted {
			it.Output = text
		}
	default:
		if it.Status == event.StatusCompleted {
			it.Output = text
		}
	}
	o.emit(&event.ItemCompleted{Item: it})
}

func (m *Mapper) commandResult(it *event.Item, env *envelope, text string, failed bool) {
	if it.Status == event.StatusDeclined {
		return
	}
	var br bashResult
	isObj := json.Unmarshal(env.ToolUseResult, &br) == nil && br.Stdout != nil
	code := 0
	out := text
	if sm := exitCodeRE().FindStringSubmatch(text); sm != nil {
		code, _ = strconv.Atoi(sm[1])
		out = text[len(sm[0]):]
	} else if failed {
		code = -1
	}
	if isObj {
		out = *br.Stdout
		if br.Stderr != "" {
			if out != "" && !strings.HasSuffix(out, "\n") {
				out += "\n"
			}
			out += br.Stderr
		}
		if br.Interrupted {
			it.Status, it.Error = event.StatusFailed, "interrupted"
		}
	}
	it.Output = out
	if code >= 0 {
		it.ExitCode = &code
	}
	if failed && code > 0 {
		it.Error = fmt.Sprintf("exit code %d", code)
	}
}

func (m *Mapper) fileResult(it *event.Item, name string, in toolInput, raw json.RawMessage) {
	path := in.FilePath
	if name == "NotebookEdit" {
		path = in.NotebookPath
	}
	var fr fileResult
	hasResult := json.Unmarshal(raw, &fr) == nil && (fr.FilePath != "" || fr.Type != "")
	if fr.FilePath != "" {
		path = fr.FilePath
	}
	if path == "" {
		return
	}
	fc := event.FileChange{Path: m.rel(path), Kind: event.FileUpdate}
	switch {
	case name == "NotebookEdit":
	case name == "Write" && hasResult && (fr.Type == "create" || (fr.OriginalFile == nil && fr.Type != "update")):
		fc.Kind = event.FileAdd
		fc.Diff = newFileDiff(fc.Path, in.Content)
	case hasResult && len(fr.StructuredPatch) > 0:
		fc.Diff = patchDiff(fc.Path, fr.StructuredPatch)
	case name == "Write" && hasResult && fr.OriginalFile != nil:
		fc.Diff = replaceDiff(fc.Path, [][2]string{{*fr.OriginalFile, in.Content}}, fr.OriginalFile)
	case name == "Edit":
		fc.Diff = replaceDiff(fc.Path, [][2]string{{in.OldString, in.NewString}}, fr.OriginalFile)
	case name == "MultiEdit":
		var pairs [][2]string
		for _, e := range in.Edits {
			pairs = append(pairs, [2]string{e.OldString, e.NewString})
		}
		if len(pairs) > 0 {
			fc.Diff = replaceDiff(fc.Path, pairs, fr.OriginalFile)
		}
	}
	it.Changes = []event.FileChange{fc}
}

// planResult fills a plan item's entries: a TodoWrite's list, or the list
// the Task* tools keep, updated by this call when it succeeded.
func (m *Mapper) planResult(it *event.Item, name string, in toolInput, raw json.RawMessage, ok bool) {
	if name == "TodoWrite" {
		for _, td := range in.Todos {
			it.Entries = append(it.Entries, event.PlanEntry{Content: td.Content, Status: planStatus(td.Status)})
		}
		return
	}
	if ok {
		switch name {
		case "TaskCreate":
			var r struct {
				Task struct {
					ID      string `json:"id"`
					Subject string `json:"subject"`
				} `json:"task"`
			}
			_ = json.Unmarshal(raw, &r)
			m.tasks = append(m.tasks, event.PlanEntry{Content: orDefault(r.Task.Subject, in.Subject), Status: event.PlanPending})
			m.taskIDs = append(m.taskIDs, r.Task.ID)
		case "TaskUpdate":
			for i, id := range m.taskIDs {
				if id != in.TaskID {
					continue
				}
				if in.Status == "deleted" {
					m.tasks = append(m.tasks[:i:i], m.tasks[i+1:]...)
					m.taskIDs = append(m.taskIDs[:i:i], m.taskIDs[i+1:]...)
					break
				}
				if in.Status != "" {
					m.tasks[i].Status = planStatus(in.Status)
				}
				if in.Subject != "" {
					m.tasks[i].Content = in.Subject
				}
				break
			}
		case "TaskList":
			var r struct {
				Tasks []struct {
					ID      string `json:"id"`
					Subject string `json:"subject"`
					Status  string `json:"status"`
				} `json:"tasks"`
			}
			if json.Unmarshal(raw, &r) == nil && r.Tasks != nil {
				m.tasks, m.taskIDs = nil, nil
				for _, t := range r.Tasks {
					m.tasks = append(m.tasks, event.PlanEntry{Content: t.Subject, Status: planStatus(t.Status)})
					m.taskIDs = append(m.taskIDs, t.ID)
				}
			}
		}
	}
	it.Entries = append([]event.PlanEntry(nil), m.tasks...)
}

func planStatus(s string) string {
	switch s {
	case event.PlanInProgress, event.PlanCompleted:
		return s
	}
	return event.PlanPending
}

// result ends the turn.
func (m *Mapper) result(o *out, env *envelope) {
	res := agent.Result{StopReason: event.StopEndTurn}
	if env.StopReason != nil {
		switch *env.StopReason {
		case "max_tokens":
			res.StopReason = event.StopMaxTokens
		case "refusal":
			res.StopReason = event.StopRefusal
		}
	}
	if u := env.Usage; u != nil {
		res.Usage = &event.Usage{
			InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
			CacheReadTokens: u.CacheReadInputTokens, CacheWriteTokens: u.CacheCreationInputTokens,
			CostUSD: env.TotalCostUSD,
		}
	}
	failed := env.IsError || strings.HasPrefix(env.Subtype, "error")
	switch {
	case m.Interrupting:
		res.StopReason = event.StopInterrupted
	case failed:
		res.StopReason = event.StopError
		res.Message = resultMessage(env)
		if !m.errored {
			code := "claude_" + orDefault(env.Subtype, "error")
			if env.Subtype == "success" || env.Subtype == "" {
				code = "claude_error"
			}
			retry := false
			if env.APIErrorStatus != nil {
				code = "api_error"
				retry = retryable(*env.APIErrorStatus, "")
			}
			o.emit(&event.Error{Code: code, Message: res.Message, Retryable: retry})
		}
	}
	// Every item still open ends with the turn.
	why := "the turn ended before the tool finished"
	if m.Interrupting {
		why = "interrupted"
	}
	for _, id := range m.order {
		t := m.tools[id]
		if t == nil {
			continue
		}
		it := m.toolItemFor(t.item.ID, id, t.name, t.input)
		it.Status, it.Error = event.StatusFailed, why
		o.emit(&event.ItemCompleted{Item: it})
	}
	for _, id := range m.msgOrder {
		for _, b := range m.msgs[id].order {
			m.finishBlock(o, b, true)
		}
	}
	m.msgs, m.msgOrder, m.cur = map[string]*streamMsg{}, nil, ""
	m.tools, m.order = map[string]*toolItem{}, nil
	m.errored = false
	o.o.Result = &res
}

// resultMessage is what a failed result says.
func resultMessage(env *envelope) string {
	var s string
	if json.Unmarshal(env.Result, &s) == nil && s != "" {
		return s
	}
	var errs []string
	if json.Unmarshal(env.Errors, &errs) == nil && len(errs) > 0 {
		return strings.Join(errs, "; ")
	}
	if env.TerminalReason != "" {
		return "the turn failed: " + env.TerminalReason
	}
	return "the turn failed (" + orDefault(env.Subtype, "error") + ")"
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

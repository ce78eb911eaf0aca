package pi

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/textdiff"
)

// Mapper translates pi's RPC lines into universal events. It keeps the
// state a translation needs (the content blocks being streamed, the tool
// calls running, the run's usage) and does no I/O of its own, so recorded
// transcripts go through it in tests exactly as a live process's output
// does. Map is not safe for concurrent use; Decline is.
type Mapper struct {
	// NewID makes item ids (ids.New(ids.Item) when nil).
	NewID func() string
	// Raw keeps each native line in the events made from it.
	Raw bool
	// ReadFile, when set, reads a file after an edit for its diff; without
	// it the edits are applied to the file's old content instead.
	ReadFile func(path string) (string, bool)

	cwd     string
	blocks  map[int]*block       // content blocks of the assistant message being streamed
	tools   map[string]*toolItem // tool items by tool call id, until their end
	pending map[string]*beforeSnapshot
	usage   event.Usage
	cost    float64
	used    bool
	last    *AgentMessage // the run's last assistant message

	mu       sync.Mutex
	declined map[string]bool // tool call ids whose permission was denied
}

// Output is what one line gives besides events.
type Output struct {
	Events []event.Event
	// Result is set by agent_end, the end of a turn.
	Result *agent.Result
	// Response is set for a command response.
	Response *Line
	// Permission is set for the extension's confirm request: the session
	// asks the host and answers pi.
	Permission *Permission
	// Dismiss is the id of a dialog request agentbox does not handle; the
	// session answers it with "cancelled" so that pi does not wait.
	Dismiss string
}

// Permission is a tool call the extension wants confirmed.
type Permission struct {
	// UIID is the extension_ui_request id to answer.
	UIID       string
	ToolCallID string
	Request    agent.PermissionRequest
}

// Permission option ids (pi has no "always").
const (
	optAllow = "allow"
	optDeny  = "deny"
)

type block struct {
	itemID string
	kind   event.ItemKind
	text   strings.Builder
	deltas bool
	done   bool
}

type toolItem struct {
	item   event.Item
	name   string
	args   json.RawMessage
	output string // accumulated command output sent as deltas
	before *beforeSnapshot
}

// NewMapper returns a Mapper for a session in cwd.
func NewMapper(cwd string) *Mapper {
	return &Mapper{cwd: cwd, blocks: map[int]*block{}, tools: map[string]*toolItem{},
		pending: map[string]*beforeSnapshot{}, declined: map[string]bool{}}
}

func (m *Mapper) newID() string {
	if m.NewID != nil {
		return m.NewID()
	}
	return ids.New(ids.Item)
}

// Decline records that the permission for a tool call was denied, so that
// its item completes as declined rather than failed.
func (m *Mapper) Decline(toolCallID string) {
	m.mu.Lock()
	m.declined[toolCallID] = true
	m.mu.Unlock()
}

func (m *Mapper) isDeclined(toolCallID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.declined[toolCallID]
}

// ToolItemID returns the item id of a running tool call ("" if unknown).
func (m *Mapper) ToolItemID(toolCallID string) string {
	if t := m.tools[toolCallID]; t != nil {
		return t.item.ID
	}
	return ""
}

type out struct {
	m   *Mapper
	raw json.RawMessage
	o   Output
}

func (o *out) emit(p event.Payload) {
	ev := event.New(event.SourceAgent, p)
	if o.m.Raw && len(o.raw) > 0 && json.Valid(o.raw) {
		ev.Raw = o.raw
	}
	o.o.Events = append(o.o.Events, ev)
}

// Map translates one line. A line that is not pi's JSON becomes an error
// event.
func (m *Mapper) Map(line []byte) Output {
	o := &out{m: m, raw: json.RawMessage(line)}
	l, err := DecodeLine(line)
	if err != nil {
		o.emit(&event.Error{Code: "protocol_error", Message: err.Error() + ": " + agent.Clip(string(line), 200)})
		return o.o
	}
	switch l.Type {
	case "response":
		o.o.Response = l
	case "agent_start":
		m.startRun()
	case "turn_start", "turn_end", "queue_update":
		// A pi "turn" is one model call and its tools; the agentbox turn
		// is the whole run, bracketed by the engine.
	case "message_start":
		if msg := l.agentMessage(); msg != nil && msg.Role == "assistant" {
			m.blocks = map[int]*block{}
		}
	case "message_update":
		m.update(o, l.AssistantMessageEvent)
	case "message_end":
		if msg := l.agentMessage(); msg != nil && msg.Role == "assistant" {
			m.endMessage(o, msg)
		}
	case "tool_execution_start":
		m.startTool(o, l)
	case "tool_execution_update":
		m.updateTool(o, l)
	case "tool_execution_end":
		m.endTool(o, l)
	case "agent_end":
		r := m.result()
		o.o.Result = &r
	case "extension_ui_request":
		m.uiRequest(o, l)
	case "extension_error":
		o.emit(&event.Error{Code: "extension_error", Message: "a pi extension failed: " + jsonString(l.Error)})
	case "auto_retry_end":
		if l.Success != nil && !*l.Success {
			o.emit(&event.Native{NativeType: l.Type, Payload: json.RawMessage(line)})
		}
	default: // compaction_*, auto_retry_start, and whatever comes later
		payload := json.RawMessage(line)
		if !json.Valid(payload) {
			payload = nil
		}
		o.emit(&event.Native{NativeType: l.Type, Payload: payload})
	}
	return o.o
}

func (m *Mapper) startRun() {
	m.blocks, m.tools, m.pending = map[int]*block{}, map[string]*toolItem{}, map[string]*beforeSnapshot{}
	m.usage, m.cost, m.used, m.last = event.Usage{}, 0, false, nil
}

// update handles a streaming delta of the assistant message.
func (m *Mapper) update(o *out, ae *AssistantEvent) {
	if ae == nil {
		return
	}
	switch ae.Type {
	case "text_start", "thinking_start":
		m.block(o, ae.ContentIndex, kindOf(ae.Type))
	case "text_delta", "thinking_delta":
		b := m.block(o, ae.ContentIndex, kindOf(ae.Type))
		if ae.Delta == "" || b.done {
			return
		}
		b.text.WriteString(ae.Delta)
		b.deltas = true
		o.emit(&event.ItemDelta{ItemID: b.itemID, Field: event.DeltaText, Delta: ae.Delta})
	case "text_end", "thinking_end":
		b := m.block(o, ae.ContentIndex, kindOf(ae.Type))
		m.completeBlock(o, b, ae.Content)
	}
	// toolcall_* are reported when the tool runs (tool_execution_start),
	// with complete arguments; start, done and error are summed up by
	// message_end.
}

func kindOf(typ string) event.ItemKind {
	if strings.HasPrefix(typ, "thinking") {
		return event.ItemReasoning
	}
	return event.ItemMessage
}

// block returns the streamed block at index i, starting its item first.
func (m *Mapper) block(o *out, i int, kind event.ItemKind) *block {
	if b := m.blocks[i]; b != nil {
		return b
	}
	b := &block{itemID: m.newID(), kind: kind}
	m.blocks[i] = b
	o.emit(&event.ItemStarted{Item: event.Item{ID: b.itemID, Kind: kind, Status: event.StatusInProgress, Role: event.RoleAssistant}})
	return b
}

// completeBlock completes a block's item; the text is what the deltas said
// when there were any (so that they add up), else full.
func (m *Mapper) completeBlock(o *out, b *block, full string) {
	if b.done {
		return
	}
	b.done = true
	text := full
	if b.deltas {
		// The deltas must add up to the item's text: send what the final
		// text adds to them, or keep theirs when it does not extend them.
		acc := b.text.String()
		if rest, ok := strings.CutPrefix(full, acc); ok && rest != "" {
			o.emit(&event.ItemDelta{ItemID: b.itemID, Field: event.DeltaText, Delta: rest})
			acc = full
		}
		text = acc
	}
	it := event.Item{ID: b.itemID, Kind: b.kind, Status: event.StatusCompleted, Role: event.RoleAssistant}
	if text != "" {
		it.Content = []event.ContentPart{event.TextPart(text)}
	}
	o.emit(&event.ItemCompleted{Item: it})
}

// endMessage completes what the assistant message left open, reports
// blocks that were never streamed, adds up usage and reports an error.
func (m *Mapper) endMessage(o *out, msg *AgentMessage) {
	for i, cb := range msg.Blocks() {
		var kind event.ItemKind
		var text string
		switch cb.Type {
		case "text":
			kind, text = event.ItemMessage, cb.Text
		case "thinking":
			kind, text = event.ItemReasoning, cb.Thinking
		default:
			continue
		}
		b := m.blocks[i]
		if b == nil {
			if text == "" {
				continue
			}
			b = m.block(o, i, kind)
		}
		m.completeBlock(o, b, text)
	}
	for _, b := range m.blocks { // blocks the final message does not hold
		if !b.done {
			m.completeBlock(o, b, "")
		}
	}
	m.blocks = map[int]*block{}
	if u := msg.Usage; u != nil {
		m.used = true
		m.usage.InputTokens += u.Input
		m.usage.OutputTokens += u.Output
		m.usage.CacheReadTokens += u.CacheRead
		m.usage.CacheWriteTokens += u.CacheWrite
		if u.Cost != nil {
			m.cost += u.Cost.Total
		}
	}
	m.last = msg
	if msg.StopReason == "error" {
		text := msg.ErrorMessage
		if text == "" {
			text = "the model request failed"
		}
		o.emit(&event.Error{Code: "upstream_error", Message: text, Retryable: retryable(text)})
	}
}

// retryable says whether an error message names a status worth retrying
// (pi's messages start with the HTTP status: "500 …").
func retryable(msg string) bool {
	code, _, _ := strings.Cut(msg, " ")
	n, err := strconv.Atoi(code)
	return err == nil && (n == 408 || n == 429 || n >= 500)
}

// result is the turn's result, from the run's last assistant message.
func (m *Mapper) result() agent.Result {
	r := agent.Result{StopReason: event.StopEndTurn}
	if m.used {
		u := m.usage
		if m.cost > 0 {
			c := m.cost
			u.CostUSD = &c
		}
		r.Usage = &u
	}
	if m.last != nil {
		switch m.last.StopReason {
		case "error":
			r.StopReason, r.Message = event.StopError, m.last.ErrorMessage
		case "aborted":
			r.StopReason = event.StopInterrupted
		case "length":
			r.StopReason = event.StopMaxTokens
		}
	}
	m.startRun()
	return r
}

// toolKind is the item kind of one of pi's tools.
func toolKind(name string) event.ItemKind {
	switch name {
	case "bash":
		return event.ItemCommand
	case "write", "edit":
		return event.ItemFileChange
	}
	return event.ItemToolCall
}

type toolArgs struct {
	Command string `json:"command"`
	Path    string `json:"path"`
	Content string `json:"content"`
	Edits   []struct {
		OldText string `json:"oldText"`
		NewText string `json:"newText"`
	} `json:"edits"`
}

func parseArgs(raw json.RawMessage) toolArgs {
	var a toolArgs
	_ = json.Unmarshal(raw, &a)
	return a
}

// abs makes a tool's path absolute in the session's directory.
func (m *Mapper) abs(p string) string {
	if p == "" || filepath.IsAbs(p) || m.cwd == "" {
		return p
	}
	return filepath.Join(m.cwd, p)
}

func (m *Mapper) startTool(o *out, l *Line) {
	if l.ToolCallID == "" || m.tools[l.ToolCallID] != nil {
		return
	}
	t := &toolItem{name: l.ToolName, args: l.Args, before: m.pending[l.ToolCallID]}
	delete(m.pending, l.ToolCallID)
	it := event.Item{ID: m.newID(), Kind: toolKind(l.ToolName), Status: event.StatusInProgress, NativeID: l.ToolCallID}
	a := parseArgs(l.Args)
	switch it.Kind {
	case event.ItemCommand:
		it.Command, it.Cwd = a.Command, m.cwd
	case event.ItemFileChange:
		kind := event.FileUpdate
		if l.ToolName == "write" {
			kind = event.FileAdd
		}
		it.Changes = []event.FileChange{{Path: m.abs(a.Path), Kind: kind}}
	default:
		it.Name = l.ToolName
		if json.Valid(l.Args) {
			it.Input = l.Args
		}
	}
	t.item = it
	m.tools[l.ToolCallID] = t
	o.emit(&event.ItemStarted{Item: it})
}

// updateTool streams a command's output: pi sends the output so far, so
// the delta is what is new.
func (m *Mapper) updateTool(o *out, l *Line) {
	t := m.tools[l.ToolCallID]
	if t == nil || t.item.Kind != event.ItemCommand {
		return
	}
	text := l.PartialResult.Text()
	if len(text) > len(t.output) && strings.HasPrefix(text, t.output) {
		o.emit(&event.ItemDelta{ItemID: t.item.ID, Field: event.DeltaOutput, Delta: text[len(t.output):]})
		t.output = text
	}
}

var exitCodeRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?i)exited with code (\d+)`) })

// planDenied starts the result of a call the extension blocked because of
// the permission mode (extension.ts).
const planDenied = "agentbox: the session's permission mode"

func (m *Mapper) endTool(o *out, l *Line) {
	t := m.tools[l.ToolCallID]
	if t == nil {
		return
	}
	delete(m.tools, l.ToolCallID)
	it := t.item
	text := l.Result.Text()
	it.Status = event.StatusCompleted
	if l.IsError {
		it.Status = event.StatusFailed
		if m.isDeclined(l.ToolCallID) || strings.HasPrefix(text, planDenied) {
			it.Status = event.StatusDeclined
		}
	}
	switch it.Kind {
	case event.ItemCommand:
		it.Output = text
		if it.Status == event.StatusCompleted {
			zero := 0
			it.ExitCode = &zero
		} else if mm := exitCodeRE().FindStringSubmatch(text); mm != nil {
			if n, err := strconv.Atoi(mm[1]); err == nil {
				it.ExitCode = &n
			}
		}
	case event.ItemFileChange:
		if it.Status != event.StatusCompleted {
			it.Error = text
			break
		}
		ch := &it.Changes[0]
		if t.before != nil && t.before.Exists {
			ch.Kind = event.FileUpdate
		} else if t.before != nil {
			ch.Kind = event.FileAdd
		}
		if old, nw, ok := m.contents(t); ok {
			ch.Diff = textdiff.Unified(m.rel(ch.Path), old, nw, ch.Kind == event.FileAdd)
		}
	default:
		if it.Status == event.StatusCompleted {
			it.Output = text
		} else {
			it.Error = text
		}
	}
	o.emit(&event.ItemCompleted{Item: it})
}

// contents returns a changed file's old and new content, when they are
// known: the old from the extension's snapshot, the new from the write's
// arguments or, for an edit, the file (ReadFile) or the edits applied.
func (m *Mapper) contents(t *toolItem) (old, nw string, ok bool) {
	b := t.before
	if b == nil || (b.Exists && b.Content == nil) {
		return "", "", false
	}
	if b.Content != nil {
		old = *b.Content
	}
	a := parseArgs(t.args)
	switch t.name {
	case "write":
		return old, a.Content, true
	case "edit":
		if m.ReadFile != nil {
			if s, ok := m.ReadFile(b.Path); ok {
				return old, s, true
			}
		}
		nw = old
		for _, e := range a.Edits {
			if e.OldText == "" || !strings.Contains(nw, e.OldText) {
				return "", "", false
			}
			nw = strings.Replace(nw, e.OldText, e.NewText, 1)
		}
		return old, nw, true
	}
	return "", "", false
}

// rel is the path shown in a diff: relative to the session's directory
// when inside it.
func (m *Mapper) rel(p string) string {
	if m.cwd != "" {
		if r, err := filepath.Rel(m.cwd, p); err == nil && filepath.IsLocal(r) {
			return r
		}
	}
	return strings.TrimPrefix(p, "/")
}

// uiRequest handles the extension UI sub-protocol.
func (m *Mapper) uiRequest(o *out, l *Line) {
	msg := jsonString(l.Message)
	switch l.Method {
	case "confirm":
		if l.Title == permissionTitle {
			var ask permissionAsk
			if err := json.Unmarshal([]byte(msg), &ask); err == nil && ask.ToolCallID != "" {
				o.o.Permission = &Permission{UIID: l.ID, ToolCallID: ask.ToolCallID, Request: m.permissionRequest(ask)}
				return
			}
		}
		o.o.Dismiss = l.ID
	case "select", "input", "editor":
		o.o.Dismiss = l.ID
	case "notify":
		if rest, ok := strings.CutPrefix(msg, beforePrefix); ok {
			var b beforeSnapshot
			if json.Unmarshal([]byte(rest), &b) == nil && b.ToolCallID != "" {
				if t := m.tools[b.ToolCallID]; t != nil {
					t.before = &b
				} else if len(m.pending) < 64 {
					m.pending[b.ToolCallID] = &b
				}
			}
		}
	}
	// setStatus, setWidget, setTitle, set_editor_text: TUI decoration.
}

// permissionRequest describes a tool call for the user.
func (m *Mapper) permissionRequest(ask permissionAsk) agent.PermissionRequest {
	a := parseArgs(ask.Input)
	req := agent.PermissionRequest{
		Kind: event.PermTool, Tool: ask.ToolName, ItemID: m.ToolItemID(ask.ToolCallID),
		Title: "Run the " + ask.ToolName + " tool",
		Options: []event.PermissionOption{
			{ID: optAllow, Kind: event.OptionAllowOnce, Label: "Allow"},
			{ID: optDeny, Kind: event.OptionDenyOnce, Label: "Deny"},
		},
	}
	if json.Valid(ask.Input) {
		req.Input = ask.Input
	}
	switch ask.ToolName {
	case "bash":
		req.Kind, req.Title, req.Detail = event.PermCommand, "Run a command", a.Command
	case "write":
		req.Kind, req.Title, req.Detail = event.PermFileWrite, "Write "+m.rel(m.abs(a.Path)), agent.Clip(a.Content, 2000)
	case "edit":
		req.Kind, req.Title = event.PermFileWrite, "Edit "+m.rel(m.abs(a.Path))
	}
	return req
}

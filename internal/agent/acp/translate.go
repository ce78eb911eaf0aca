package acp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/event"
	wire "github.com/agentbox/agentbox/internal/acpwire"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/textdiff"
)

// Translator turns what an ACP agent says (session/update notifications,
// permission requests, the prompt's response) into universal events. It
// keeps only the state a translation needs (the open message and reasoning
// items, the tool calls by id) and does no I/O, so recorded transcripts go
// through it in tests exactly as a live agent's messages do. It is not safe
// for concurrent use.
type Translator struct {
	// NewID makes item ids (ids.New(ids.Item) when nil).
	NewID func() string
	// Raw keeps the agent's original update in each event made from it.
	Raw bool

	cwd     string
	msg     *textItem
	thought *textItem
	tools   map[string]*toolItem
	order   []string // tool call ids in start order
	usage   *wire.SessionUsageUpdate
}

// NewTranslator returns a Translator for a session in cwd (paths inside it
// are reported relative to it).
func NewTranslator(cwd string) *Translator {
	return &Translator{cwd: cwd, tools: map[string]*toolItem{}}
}

type textItem struct {
	id        string
	messageID string
	text      strings.Builder
}

type toolItem struct {
	item event.Item
	kind wire.ToolKind
	done bool
	// diffs are the file changes by path, in the order first seen.
	diffs []fileDiff
	text  string // the text content, the tool's output
}

type fileDiff struct {
	path     string
	old      *string
	new      string
	deleted  bool
	noDetail bool // known from a location only
}

func (t *Translator) newID() string {
	if t.NewID != nil {
		return t.NewID()
	}
	return ids.New(ids.Item)
}

// emitter collects the events of one message.
type emitter struct {
	t   *Translator
	raw json.RawMessage
	evs []event.Event
}

func (e *emitter) emit(p event.Payload) {
	ev := event.New(event.SourceAgent, p)
	if e.t.Raw && len(e.raw) > 0 {
		ev.Raw = e.raw
	}
	e.evs = append(e.evs, ev)
}

func (e *emitter) native(typ string, payload json.RawMessage) {
	e.emit(&event.Native{NativeType: typ, Payload: payload})
}

// Update translates the params of one session/update notification.
func (t *Translator) Update(params json.RawMessage) []event.Event {
	e := &emitter{t: t, raw: params}
	var n struct {
		Update json.RawMessage `json:"update"`
	}
	if err := json.Unmarshal(params, &n); err != nil || len(n.Update) == 0 || n.Update[0] != '{' {
		e.native("session/update", validOrNull(params))
		return e.evs
	}
	var disc struct {
		Kind string `json:"sessionUpdate"`
	}
	_ = json.Unmarshal(n.Update, &disc)
	// Decode into the variant the discriminator names: a union decoder
	// guesses a variant for unknown kinds, which would turn a future kind
	// into a user message.
	ok := true
	switch disc.Kind {
	case "agent_message_chunk":
		var u wire.SessionUpdateAgentMessageChunk
		if ok = json.Unmarshal(n.Update, &u) == nil; ok {
			ok = t.chunk(e, &t.msg, event.ItemMessage, u.Content, u.MessageId)
		}
	case "agent_thought_chunk":
		var u wire.SessionUpdateAgentThoughtChunk
		if ok = json.Unmarshal(n.Update, &u) == nil; ok {
			ok = t.chunk(e, &t.thought, event.ItemReasoning, u.Content, u.MessageId)
		}
	case "tool_call":
		var u wire.SessionUpdateToolCall
		if ok = json.Unmarshal(n.Update, &u) == nil && u.ToolCallId != ""; ok {
			kind, title, status := u.Kind, u.Title, u.Status
			t.tool(e, wire.ToolCallUpdate{ToolCallId: u.ToolCallId, Kind: &kind, Title: &title, Status: &status,
				Content: u.Content, Locations: u.Locations, RawInput: u.RawInput, RawOutput: u.RawOutput, Meta: u.Meta})
		}
	case "tool_call_update":
		var u wire.SessionToolCallUpdate
		if ok = json.Unmarshal(n.Update, &u) == nil && u.ToolCallId != ""; ok {
			if tl := t.tools[string(u.ToolCallId)]; tl != nil && tl.done {
				// A late word on a finished call (e.g. the agent's own
				// failure after a denial) is kept, not applied.
				e.native("tool_call_update", n.Update)
				break
			}
			t.tool(e, wire.ToolCallUpdate{ToolCallId: u.ToolCallId, Kind: u.Kind, Title: u.Title, Status: u.Status,
				Content: u.Content, Locations: u.Locations, RawInput: u.RawInput, RawOutput: u.RawOutput, Meta: u.Meta})
		}
	case "plan":
		var u wire.SessionUpdatePlan
		if ok = json.Unmarshal(n.Update, &u) == nil; ok {
			t.closeText(e)
			// Each plan update is the whole plan: one completed snapshot.
			it := event.Item{ID: t.newID(), Kind: event.ItemPlan, Status: event.StatusCompleted, Entries: []event.PlanEntry{}}
			for _, pe := range u.Entries {
				it.Entries = append(it.Entries, event.PlanEntry{Content: pe.Content, Status: planStatus(string(pe.Status)), Priority: string(pe.Priority)})
			}
			started := it
			started.Status = event.StatusInProgress
			e.emit(&event.ItemStarted{Item: started})
			e.emit(&event.ItemCompleted{Item: it})
		}
	case "usage_update":
		var u wire.SessionUsageUpdate
		if ok = json.Unmarshal(n.Update, &u) == nil; ok {
			t.usage = &u
			e.native("usage_update", n.Update)
		}
	default:
		// available_commands_update, current_mode_update,
		// config_option_update, session_info_update, user_message_chunk
		// (history replayed by session/load) and kinds this adapter does
		// not know: no universal equivalent, so kept as they are.
		e.native(orDefault(disc.Kind, "session/update"), n.Update)
	}
	if !ok {
		e.native(orDefault(disc.Kind, "session/update"), n.Update)
	}
	return e.evs
}

func validOrNull(b json.RawMessage) json.RawMessage {
	if json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(b))
	return s
}

// chunk appends a message or thought chunk to its open item, opening one
// when needed. Non-text content is not handled (ok false: kept native).
func (t *Translator) chunk(e *emitter, cur **textItem, kind event.ItemKind, c wire.ContentBlock, messageID *string) bool {
	if c.Text == nil {
		return false
	}
	if c.Text.Text == "" {
		return true
	}
	// A message and a thought do not interleave within one item: the one
	// that was open is finished.
	other := &t.thought
	if kind == event.ItemReasoning {
		other = &t.msg
	}
	t.finishText(e, other)
	mid := ""
	if messageID != nil {
		mid = *messageID
	}
	if *cur != nil && mid != "" && (*cur).messageID != "" && (*cur).messageID != mid {
		t.finishText(e, cur)
	}
	if *cur == nil {
		*cur = &textItem{id: t.newID(), messageID: mid}
		it := event.Item{ID: (*cur).id, Kind: kind, Status: event.StatusInProgress}
		if kind == event.ItemMessage {
			it.Role = event.RoleAssistant
		}
		e.emit(&event.ItemStarted{Item: it})
	}
	(*cur).text.WriteString(c.Text.Text)
	e.emit(&event.ItemDelta{ItemID: (*cur).id, Field: event.DeltaText, Delta: c.Text.Text})
	return true
}

func (t *Translator) finishText(e *emitter, cur **textItem) {
	if *cur == nil {
		return
	}
	kind := event.ItemMessage
	if cur == &t.thought {
		kind = event.ItemReasoning
	}
	it := event.Item{ID: (*cur).id, Kind: kind, Status: event.StatusCompleted, Content: []event.ContentPart{event.TextPart((*cur).text.String())}}
	if kind == event.ItemMessage {
		it.Role = event.RoleAssistant
	}
	e.emit(&event.ItemCompleted{Item: it})
	*cur = nil
}

// closeText finishes the open message and thought: text before a tool call
// or a plan is a finished item.
func (t *Translator) closeText(e *emitter) {
	t.finishText(e, &t.thought)
	t.finishText(e, &t.msg)
}

// itemKind maps an ACP tool kind onto an item kind. A call that carries a
// diff is a file change whatever its kind.
func itemKind(k wire.ToolKind, hasDiff bool) event.ItemKind {
	switch {
	case k == wire.ToolKindExecute:
		return event.ItemCommand
	case hasDiff || k == wire.ToolKindEdit || k == wire.ToolKindDelete || k == wire.ToolKindMove:
		return event.ItemFileChange
	}
	return event.ItemToolCall
}

// tool applies a tool_call or tool_call_update (both as an update whose
// fields are set when present), starting the item on first sight.
func (t *Translator) tool(e *emitter, u wire.ToolCallUpdate) *toolItem {
	id := string(u.ToolCallId)
	tl := t.tools[id]
	if tl != nil && tl.done {
		return tl
	}
	if tl == nil {
		t.closeText(e)
		tl = &toolItem{}
		if u.Kind != nil {
			tl.kind = *u.Kind
		}
		hasDiff := false
		for _, c := range u.Content {
			hasDiff = hasDiff || c.Diff != nil
		}
		tl.item = event.Item{ID: t.newID(), Kind: itemKind(tl.kind, hasDiff), Status: event.StatusInProgress, NativeID: id}
		t.tools[id] = tl
		t.order = append(t.order, id)
		t.apply(tl, u)
		e.emit(&event.ItemStarted{Item: tl.snapshot(t)})
	} else {
		if tl.kind == "" && u.Kind != nil {
			tl.kind = *u.Kind
		}
		t.apply(tl, u)
	}
	if u.Status != nil {
		switch *u.Status {
		case wire.ToolCallStatusCompleted:
			t.complete(e, tl, event.StatusCompleted)
		case wire.ToolCallStatusFailed:
			t.complete(e, tl, event.StatusFailed)
		}
	}
	return tl
}

// apply merges an update's fields into the item.
func (t *Translator) apply(tl *toolItem, u wire.ToolCallUpdate) {
	it := &tl.item
	if name := toolName(u.Meta); name != "" {
		it.Name = name
	} else if it.Name == "" && u.Title != nil {
		it.Name = strings.Trim(*u.Title, "`")
	}
	if u.RawInput != nil {
		if b, err := json.Marshal(u.RawInput); err == nil && !isEmptyJSON(b) {
			it.Input = b
		}
	}
	if it.Kind == event.ItemCommand {
		t.command(it, u)
	}
	var texts []string
	for _, c := range u.Content {
		switch {
		case c.Diff != nil:
			tl.addDiff(fileDiff{path: c.Diff.Path, old: c.Diff.OldText, new: c.Diff.NewText, deleted: tl.kind == wire.ToolKindDelete})
		case c.Content != nil && c.Content.Content.Text != nil:
			texts = append(texts, c.Content.Content.Text.Text)
		}
	}
	if u.Content != nil && len(texts) > 0 {
		tl.text = strings.Join(texts, "\n")
	}
	if it.Kind == event.ItemFileChange {
		for _, l := range u.Locations {
			if l.Path != "" && !tl.hasPath(l.Path) {
				tl.diffs = append(tl.diffs, fileDiff{path: l.Path, noDetail: true, deleted: tl.kind == wire.ToolKindDelete})
			}
		}
	}
	if out := rawOutputText(u.RawOutput); out != "" && tl.text == "" {
		tl.text = out
	}
	if code, ok := exitCode(u.RawOutput); ok {
		it.ExitCode = &code
	}
}

func (tl *toolItem) hasPath(p string) bool {
	for _, d := range tl.diffs {
		if d.path == p {
			return true
		}
	}
	return false
}

func (tl *toolItem) addDiff(d fileDiff) {
	for i := range tl.diffs {
		if tl.diffs[i].path == d.path {
			tl.diffs[i] = d
			return
		}
	}
	tl.diffs = append(tl.diffs, d)
}

// command fills a command item from the call's raw input: a command string
// or argv (codex-acp sends ["/bin/bash","-lc","…"]), else the title.
func (t *Translator) command(it *event.Item, u wire.ToolCallUpdate) {
	if in, ok := u.RawInput.(map[string]any); ok {
		switch c := in["command"].(type) {
		case string:
			it.Command = c
		case []any:
			it.Argv = nil
			for _, a := range c {
				if s, ok := a.(string); ok {
					it.Argv = append(it.Argv, s)
				}
			}
			it.Command = strings.Join(it.Argv, " ")
			if len(it.Argv) == 3 && (it.Argv[1] == "-lc" || it.Argv[1] == "-c") {
				it.Command = it.Argv[2]
			}
		}
		if cwd, ok := in["cwd"].(string); ok {
			it.Cwd = cwd
		}
	}
	if it.Command == "" && u.Title != nil {
		it.Command = strings.Trim(*u.Title, "`")
	}
}

// snapshot is the item as it stands.
func (tl *toolItem) snapshot(t *Translator) event.Item {
	it := tl.item
	switch it.Kind {
	case event.ItemFileChange:
		it.Changes = nil
		for _, d := range tl.diffs {
			rel := t.rel(d.path)
			fc := event.FileChange{Path: rel, Kind: event.FileUpdate}
			switch {
			case d.deleted:
				fc.Kind = event.FileDelete
			case d.noDetail:
			case d.old == nil || *d.old == "":
				// No old text: a new file (Gemini sends "" rather than
				// null; an emptied file reads the same, a rare case).
				fc.Kind = event.FileAdd
				fc.Diff = textdiff.Unified(rel, "", d.new, true)
			default:
				fc.Diff = textdiff.Unified(rel, *d.old, d.new, false)
			}
			it.Changes = append(it.Changes, fc)
		}
		it.Output = tl.text
	default:
		it.Output = tl.text
	}
	if it.Status == event.StatusFailed && it.Error == "" {
		it.Error = tl.text
	}
	return it
}

func (t *Translator) complete(e *emitter, tl *toolItem, st event.ItemStatus) {
	if tl.done {
		return
	}
	tl.done = true
	tl.item.Status = st
	e.emit(&event.ItemCompleted{Item: tl.snapshot(t)})
}

// rel makes a path inside the session's directory relative to it.
func (t *Translator) rel(p string) string {
	if t.cwd == "" || !filepath.IsAbs(p) {
		return p
	}
	if r, err := filepath.Rel(t.cwd, p); err == nil && filepath.IsLocal(r) {
		return r
	}
	return p
}

// toolName is the agent's own tool name when it says (claude-code-acp puts
// it in _meta.claudeCode.toolName).
func toolName(meta map[string]any) string {
	for _, v := range meta {
		if m, ok := v.(map[string]any); ok {
			if s, ok := m["toolName"].(string); ok {
				return s
			}
		}
	}
	return ""
}

func isEmptyJSON(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) == 0 || string(b) == "{}" || string(b) == "null"
}

// rawOutputText is a tool's output from its raw output: a string, or the
// output field agents use (codex-acp aggregated_output/formatted_output,
// opencode output).
func rawOutputText(raw any) string {
	switch v := raw.(type) {
	case string:
		return v
	case map[string]any:
		for _, k := range []string{"aggregated_output", "formatted_output", "output", "stdout"} {
			if s, ok := v[k].(string); ok && s != "" {
				return s
			}
		}
	}
	return ""
}

// exitCode finds a command's exit code in its raw output (codex-acp
// exit_code, opencode metadata.exit).
func exitCode(raw any) (int, bool) {
	m, ok := raw.(map[string]any)
	if !ok {
		return 0, false
	}
	for _, src := range []map[string]any{m, asMap(m["metadata"])} {
		for _, k := range []string{"exit_code", "exitCode", "exit"} {
			if f, ok := src[k].(float64); ok {
				return int(f), true
			}
		}
	}
	return 0, false
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func planStatus(s string) string {
	switch s {
	case event.PlanInProgress, event.PlanCompleted:
		return s
	}
	return event.PlanPending
}

// Permission builds the universal request for a session/request_permission
// call. Its tool call is started as an item first when the agent has not
// announced it (Gemini and codex-acp ask before they report the call); the
// returned events come before the request.
func (t *Translator) Permission(params json.RawMessage, req wire.RequestPermissionRequest) (agent.PermissionRequest, []event.Event) {
	e := &emitter{t: t, raw: params}
	tl := t.tools[string(req.ToolCall.ToolCallId)]
	if req.ToolCall.ToolCallId != "" && (tl == nil || !tl.done) {
		tl = t.tool(e, req.ToolCall)
	}
	pr := agent.PermissionRequest{Kind: event.PermTool, Title: "Run a tool"}
	if tl != nil {
		it := tl.snapshot(t)
		pr.ItemID, pr.Input = it.ID, it.Input
		pr.Tool = orDefault(it.Name, string(tl.kind))
		title := orDefault(firstLine(strings.Trim(deref(req.ToolCall.Title), "`")), orDefault(it.Name, "Run a tool"))
		pr.Title = title
		switch it.Kind {
		case event.ItemCommand:
			pr.Kind = event.PermCommand
			if it.Command != "" {
				pr.Title = "Run " + firstLine(it.Command)
			}
		case event.ItemFileChange:
			pr.Kind = event.PermFileWrite
			var paths, diffs []string
			for _, c := range it.Changes {
				paths = append(paths, c.Path)
				diffs = append(diffs, c.Diff)
			}
			if len(paths) > 0 {
				pr.Title = "Change " + strings.Join(paths, ", ")
			}
			pr.Detail = strings.Join(diffs, "")
		}
		if pr.Detail == "" {
			pr.Detail = tl.text
		}
		if tl.kind == wire.ToolKindFetch {
			pr.Kind = event.PermNetwork
		}
	}
	for _, o := range req.Options {
		pr.Options = append(pr.Options, event.PermissionOption{ID: string(o.OptionId), Kind: optionKind(o.Kind), Label: o.Name})
	}
	return pr, e.evs
}

// Denied completes the item of a tool call whose permission was denied
// (Gemini says nothing more about it); later updates of it are kept as
// native events.
func (t *Translator) Denied(toolCallID string) []event.Event {
	e := &emitter{t: t}
	if tl := t.tools[toolCallID]; tl != nil {
		t.complete(e, tl, event.StatusDeclined)
	}
	return e.evs
}

func optionKind(k wire.PermissionOptionKind) event.OptionKind {
	switch k {
	case wire.PermissionOptionKindAllowAlways:
		return event.OptionAllowAlways
	case wire.PermissionOptionKindRejectOnce:
		return event.OptionDenyOnce
	case wire.PermissionOptionKindRejectAlways:
		return event.OptionDenyAlways
	}
	return event.OptionAllowOnce
}

// ChooseOption picks the agent's option for a decision: the option the
// answer names when it is one of the request's and agrees with the
// decision, else the first once-only option of the decision's side. An
// allow_always option is never picked unless named. ok is false when the
// agent offered no fitting option.
func ChooseOption(opts []wire.PermissionOption, ans agent.PermissionAnswer) (wire.PermissionOptionId, bool) {
	allow := ans.Decision == event.DecisionAllow
	isAllow := func(k wire.PermissionOptionKind) bool {
		return k == wire.PermissionOptionKindAllowOnce || k == wire.PermissionOptionKindAllowAlways
	}
	if ans.OptionID != "" {
		for _, o := range opts {
			if string(o.OptionId) == ans.OptionID && isAllow(o.Kind) == allow {
				return o.OptionId, true
			}
		}
	}
	want := []wire.PermissionOptionKind{wire.PermissionOptionKindAllowOnce}
	if !allow {
		// Rejecting for good is still a rejection: better than none.
		want = []wire.PermissionOptionKind{wire.PermissionOptionKindRejectOnce, wire.PermissionOptionKindRejectAlways}
	}
	for _, k := range want {
		for _, o := range opts {
			if o.Kind == k {
				return o.OptionId, true
			}
		}
	}
	return "", false
}

// Finish ends the turn's items: the open message and thought are completed,
// and tool calls the agent left open are failed (the turn is over, so they
// will not finish). It returns the turn's usage as far as the agent said.
func (t *Translator) Finish(resp *wire.PromptResponse) ([]event.Event, *event.Usage) {
	e := &emitter{t: t}
	t.closeText(e)
	for _, id := range t.order {
		tl := t.tools[id]
		if !tl.done {
			if tl.text == "" {
				tl.text = "the turn ended before the tool call finished"
			}
			t.complete(e, tl, event.StatusFailed)
		}
	}
	t.tools, t.order = map[string]*toolItem{}, nil
	u := turnUsage(resp, t.usage)
	t.usage = nil
	return e.evs, u
}

// turnUsage is the turn's token usage: the prompt response's usage
// (unstable in ACP; OpenCode sends it), else Gemini's
// _meta.quota.token_count; the cost comes from the last usage_update.
func turnUsage(resp *wire.PromptResponse, last *wire.SessionUsageUpdate) *event.Usage {
	var u *event.Usage
	if resp != nil && resp.Usage != nil {
		u = &event.Usage{InputTokens: int64(resp.Usage.InputTokens), OutputTokens: int64(resp.Usage.OutputTokens)}
		if r := resp.Usage.CachedReadTokens; r != nil {
			u.CacheReadTokens = int64(*r)
		}
		if w := resp.Usage.CachedWriteTokens; w != nil {
			u.CacheWriteTokens = int64(*w)
		}
	} else if resp != nil {
		tc := asMap(asMap(resp.Meta["quota"])["token_count"])
		in, _ := tc["input_tokens"].(float64)
		out, _ := tc["output_tokens"].(float64)
		if in > 0 || out > 0 {
			u = &event.Usage{InputTokens: int64(in), OutputTokens: int64(out)}
		}
	}
	if last != nil && last.Cost != nil && strings.EqualFold(last.Cost.Currency, "USD") {
		if u == nil {
			u = &event.Usage{}
		}
		c := last.Cost.Amount
		u.CostUSD = &c
	}
	return u
}

// StopReason maps the prompt's stop reason. cancelled is an interrupt when
// we asked for it; an agent that cancels on its own (codex-acp after a
// rejected permission) ended the turn.
func StopReason(r wire.StopReason, cancelRequested bool) (event.StopReason, string) {
	switch r {
	case wire.StopReasonEndTurn:
		return event.StopEndTurn, ""
	case wire.StopReasonMaxTokens:
		return event.StopMaxTokens, ""
	case wire.StopReasonMaxTurnRequests:
		return event.StopMaxTokens, "the agent reached its limit of model requests in one turn"
	case wire.StopReasonRefusal:
		return event.StopRefusal, ""
	case wire.StopReasonCancelled:
		if cancelRequested {
			return event.StopInterrupted, ""
		}
		return event.StopEndTurn, "the agent cancelled the turn itself"
	}
	return event.StopEndTurn, fmt.Sprintf("the agent ended the turn with stop reason %q", r)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

package opencode

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/ids"
)

// Mapper translates the events of OpenCode's `GET /event` stream that
// belong to one OpenCode session into universal events. It is a pure
// function of its input (plus the ids it makes), so transcripts replay
// through it without a server. It is not safe for concurrent use.
type Mapper struct {
	// SessionID is the OpenCode session whose events are translated; the
	// events of other sessions and of the server itself are dropped.
	SessionID string
	// Cwd makes file paths relative in file_change items and titles.
	Cwd string
	// Raw keeps the original event in each universal event.
	Raw bool
	// NewID makes item ids (ids.New("item") by default).
	NewID func() string

	roles  map[string]string // message id → role
	parts  map[string]*part  // part id → state
	calls  map[string]*part  // tool call id → state
	denied map[string]bool   // tool call ids whose permission was denied
	usage  *event.Usage      // this turn's usage, summed over steps
	finish string            // the last step's finish reason
	errMsg string            // the last error reported in this turn
}

// part is what the mapper remembers of one message part.
type part struct {
	itemID   string
	kind     event.ItemKind
	tool     string
	callID   string
	text     string // streamed text (text/reasoning) or output (tools)
	input    json.RawMessage
	started  bool
	finished bool
}

// Output is what one native event turns into.
type Output struct {
	Events []event.Event
	// Permission is set for permission.asked: the session asks the host
	// and replies to OpenCode.
	Permission *PermissionAsked
	// Question is set for question.asked (the session rejects it: the
	// adapter does not support OpenCode's questions yet).
	Question string
	// Retry is set when OpenCode retries a failed model request.
	Retry *Retry
	// Idle is set when the session went idle: the turn is over.
	Idle bool
}

// Retry is a session.status of type retry.
type Retry struct {
	Attempt int    `json:"attempt"`
	Message string `json:"message"`
}

// PermissionAsked is OpenCode's permission.asked event.
type PermissionAsked struct {
	ID         string          `json:"id"`
	SessionID  string          `json:"sessionID"`
	Permission string          `json:"permission"`
	Patterns   []string        `json:"patterns"`
	Metadata   json.RawMessage `json:"metadata"`
	Always     []string        `json:"always"`
	Tool       struct {
		MessageID string `json:"messageID"`
		CallID    string `json:"callID"`
	} `json:"tool"`
}

// NewMapper returns a mapper for one OpenCode session.
func NewMapper(sessionID, cwd string) *Mapper {
	return &Mapper{SessionID: sessionID, Cwd: cwd, NewID: func() string { return ids.New("item") },
		roles: map[string]string{}, parts: map[string]*part{}, calls: map[string]*part{}, denied: map[string]bool{}}
}

// native wire shapes.
type nativeEvent struct {
	Type       string          `json:"type"`
	Properties json.RawMessage `json:"properties"`
}

type props struct {
	SessionID string       `json:"sessionID"`
	Info      *messageInfo `json:"info"`
	Part      *nativePart  `json:"part"`
	Status    *status      `json:"status"`
	Error     *nativeError `json:"error"`
	MessageID string       `json:"messageID"`
	PartID    string       `json:"partID"`
	Field     string       `json:"field"`
	Delta     string       `json:"delta"`
	ID        string       `json:"id"`
}

type messageInfo struct {
	ID        string       `json:"id"`
	SessionID string       `json:"sessionID"`
	Role      string       `json:"role"`
	Error     *nativeError `json:"error"`
}

type nativeError struct {
	Name string `json:"name"`
	Data struct {
		Message     string `json:"message"`
		StatusCode  int    `json:"statusCode"`
		IsRetryable bool   `json:"isRetryable"`
	} `json:"data"`
}

type status struct {
	Type    string `json:"type"`
	Attempt int    `json:"attempt"`
	Message string `json:"message"`
}

type nativePart struct {
	ID        string     `json:"id"`
	MessageID string     `json:"messageID"`
	Type      string     `json:"type"`
	Text      string     `json:"text"`
	Tool      string     `json:"tool"`
	CallID    string     `json:"callID"`
	State     *toolState `json:"state"`
	Reason    string     `json:"reason"`
	Tokens    *tokens    `json:"tokens"`
	Cost      *float64   `json:"cost"`
	Time      *struct {
		End *int64 `json:"end"`
	} `json:"time"`
}

type toolState struct {
	Status   string          `json:"status"`
	Input    json.RawMessage `json:"input"`
	Output   string          `json:"output"`
	Error    string          `json:"error"`
	Title    string          `json:"title"`
	Metadata json.RawMessage `json:"metadata"`
}

type tokens struct {
	Input     int64 `json:"input"`
	Output    int64 `json:"output"`
	Reasoning int64 `json:"reasoning"`
	Cache     struct {
		Read  int64 `json:"read"`
		Write int64 `json:"write"`
	} `json:"cache"`
}

type toolMeta struct {
	Output   *string `json:"output"`
	Exit     *int    `json:"exit"`
	Exists   *bool   `json:"exists"`
	Filepath string  `json:"filepath"`
	Diff     string  `json:"diff"`
}

// Events that carry nothing a client needs: session bookkeeping the
// universal log has in its own terms.
var dropped = map[string]bool{
	"session.created": true, "session.updated": true, "session.diff": true, "session.idle": true,
	"permission.replied": true,
}

// Map translates one event (the data of one SSE event).
func (m *Mapper) Map(data []byte) Output {
	var ev nativeEvent
	if err := json.Unmarshal(data, &ev); err != nil || ev.Type == "" {
		return Output{}
	}
	var p props
	if err := json.Unmarshal(ev.Properties, &p); err != nil {
		return Output{}
	}
	sid := p.SessionID
	if sid == "" && p.Info != nil {
		sid = p.Info.SessionID
	}
	if sid == "" || sid != m.SessionID {
		return Output{} // another session's, or the server's own
	}
	var out Output
	switch ev.Type {
	case "message.updated":
		if p.Info == nil {
			break
		}
		if p.Info.Role != "" {
			m.roles[p.Info.ID] = p.Info.Role
		}
		if e := p.Info.Error; e != nil {
			m.errorEvent(&out, e)
		}
	case "message.part.updated":
		if p.Part != nil {
			m.part(&out, p.Part)
		}
	case "message.part.delta":
		st := m.parts[p.PartID]
		if st == nil || !st.started || st.finished || p.Delta == "" || (p.Field != "text" && p.Field != "output") {
			break
		}
		field := event.DeltaText
		if st.kind != event.ItemMessage && st.kind != event.ItemReasoning {
			field = event.DeltaOutput
		}
		st.text += p.Delta
		out.add(m, data, &event.ItemDelta{ItemID: st.itemID, Field: field, Delta: p.Delta})
	case "session.status":
		switch {
		case p.Status == nil, p.Status.Type == "busy":
		case p.Status.Type == "idle":
			out.Idle = true
		case p.Status.Type == "retry":
			out.Retry = &Retry{Attempt: p.Status.Attempt, Message: p.Status.Message}
		default:
			out.add(m, data, &event.Native{NativeType: ev.Type, Payload: ev.Properties})
		}
	case "session.error":
		if p.Error != nil {
			m.errorEvent(&out, p.Error)
		}
	case "permission.asked":
		var pa PermissionAsked
		if json.Unmarshal(ev.Properties, &pa) == nil && pa.ID != "" {
			out.Permission = &pa
		}
	case "question.asked":
		out.Question = p.ID
		out.add(m, data, &event.Native{NativeType: ev.Type, Payload: ev.Properties})
	default:
		if !dropped[ev.Type] {
			out.add(m, data, &event.Native{NativeType: ev.Type, Payload: ev.Properties})
		}
	}
	return out
}

func (o *Output) add(m *Mapper, raw []byte, p event.Payload) {
	e := event.New(event.SourceAgent, p)
	if m.Raw {
		e.Raw = append(json.RawMessage(nil), raw...)
	}
	o.Events = append(o.Events, e)
}

func (m *Mapper) errorEvent(out *Output, e *nativeError) {
	if e.Name == "MessageAbortedError" {
		return // an interrupt, reported as such by the turn
	}
	msg := e.Data.Message
	if msg == "" {
		msg = e.Name
	}
	if msg == m.errMsg {
		return // message.updated and session.error report the same failure
	}
	m.errMsg = msg
	code := "agent_error"
	if e.Name == "APIError" {
		code = "api_error"
	}
	retry := e.Data.IsRetryable || e.Data.StatusCode == 429 || e.Data.StatusCode >= 500
	out.add(m, nil, &event.Error{Code: code, Message: msg, Retryable: retry})
}

// part handles message.part.updated.
func (m *Mapper) part(out *Output, np *nativePart) {
	if m.roles[np.MessageID] == "user" {
		return // the user's own input, which the engine records
	}
	switch np.Type {
	case "text", "reasoning":
		kind := event.ItemMessage
		if np.Type == "reasoning" {
			kind = event.ItemReasoning
		}
		st := m.state(np.ID, kind)
		m.start(out, st, func(*event.Item) {})
		if np.Time == nil || np.Time.End == nil || st.finished {
			if np.Text != "" && st.text == "" {
				// A snapshot without deltas so far: the text as one delta.
				st.text = np.Text
				out.add(m, nil, &event.ItemDelta{ItemID: st.itemID, Field: event.DeltaText, Delta: np.Text})
			}
			return
		}
		st.finished, st.text = true, np.Text
		it := m.item(st, event.StatusCompleted)
		if np.Text != "" {
			it.Content = []event.ContentPart{event.TextPart(np.Text)}
		}
		out.add(m, nil, &event.ItemCompleted{Item: it})
	case "tool":
		m.tool(out, np)
	case "step-start", "patch", "snapshot":
	case "step-finish":
		m.finish = np.Reason
		if t := np.Tokens; t != nil {
			if m.usage == nil {
				m.usage = &event.Usage{}
			}
			m.usage.InputTokens += t.Input
			m.usage.OutputTokens += t.Output + t.Reasoning
			m.usage.CacheReadTokens += t.Cache.Read
			m.usage.CacheWriteTokens += t.Cache.Write
			if np.Cost != nil {
				c := *np.Cost
				if m.usage.CostUSD != nil {
					c += *m.usage.CostUSD
				}
				m.usage.CostUSD = &c
			}
		}
	default:
		b, _ := json.Marshal(np)
		out.add(m, nil, &event.Native{NativeType: "part/" + np.Type, Payload: b})
	}
}

func (m *Mapper) state(id string, kind event.ItemKind) *part {
	st := m.parts[id]
	if st == nil {
		st = &part{itemID: m.NewID(), kind: kind}
		m.parts[id] = st
	}
	return st
}

func (m *Mapper) item(st *part, status event.ItemStatus) event.Item {
	it := event.Item{ID: st.itemID, Kind: st.kind, Status: status}
	switch st.kind {
	case event.ItemMessage:
		it.Role = event.RoleAssistant
	case event.ItemToolCall, event.ItemWebSearch:
		it.Name, it.NativeID = st.tool, st.callID
	default:
		it.NativeID = st.callID
	}
	return it
}

func (m *Mapper) start(out *Output, st *part, fill func(*event.Item)) {
	if st.started {
		return
	}
	st.started = true
	it := m.item(st, event.StatusInProgress)
	fill(&it)
	out.add(m, nil, &event.ItemStarted{Item: it})
}

// toolKind says which item a tool becomes.
func toolKind(tool string) event.ItemKind {
	switch tool {
	case "bash":
		return event.ItemCommand
	case "write", "edit":
		return event.ItemFileChange
	case "todowrite":
		return event.ItemPlan
	case "webfetch", "websearch":
		return event.ItemWebSearch
	}
	return event.ItemToolCall
}

func (m *Mapper) tool(out *Output, np *nativePart) {
	st := m.state(np.ID, toolKind(np.Tool))
	st.tool, st.callID = np.Tool, np.CallID
	if np.CallID != "" {
		m.calls[np.CallID] = st
	}
	if st.finished || np.State == nil {
		return
	}
	s := np.State
	if len(s.Input) > 0 && string(s.Input) != "{}" && string(s.Input) != "null" {
		st.input = s.Input
	}
	var meta toolMeta
	_ = json.Unmarshal(s.Metadata, &meta)
	if !st.started && s.Status == "pending" && len(st.input) == 0 {
		return // start once the input is known, so the item says what it does
	}
	m.start(out, st, func(it *event.Item) { m.fillTool(it, st, s, meta, false) })
	switch s.Status {
	case "pending", "running":
		if meta.Output != nil && st.kind == event.ItemCommand && strings.HasPrefix(*meta.Output, st.text) && len(*meta.Output) > len(st.text) {
			d := (*meta.Output)[len(st.text):]
			st.text = *meta.Output
			out.add(m, nil, &event.ItemDelta{ItemID: st.itemID, Field: event.DeltaOutput, Delta: d})
		}
	case "completed", "error":
		st.finished = true
		status := event.StatusCompleted
		if s.Status == "error" {
			status = event.StatusFailed
			if m.denied[np.CallID] || strings.Contains(s.Error, "rejected permission") {
				status = event.StatusDeclined
			}
		}
		it := m.item(st, status)
		m.fillTool(&it, st, s, meta, true)
		it.Error = s.Error
		out.add(m, nil, &event.ItemCompleted{Item: it})
	}
}

// fillTool sets the kind-specific fields of a tool's item.
func (m *Mapper) fillTool(it *event.Item, st *part, s *toolState, meta toolMeta, done bool) {
	var in struct {
		Command  string `json:"command"`
		FilePath string `json:"filePath"`
		Content  *string
		URL      string `json:"url"`
		Query    string `json:"query"`
		Todos    []struct {
			Content  string `json:"content"`
			Status   string `json:"status"`
			Priority string `json:"priority"`
		} `json:"todos"`
	}
	_ = json.Unmarshal(st.input, &in)
	output := s.Output
	if output == "" && meta.Output != nil {
		output = *meta.Output
	}
	switch st.kind {
	case event.ItemCommand:
		it.Command, it.Cwd = in.Command, m.Cwd
		if done {
			it.Output, it.ExitCode = output, meta.Exit
		}
	case event.ItemFileChange:
		path := in.FilePath
		if path == "" {
			path = meta.Filepath
		}
		if path == "" {
			return
		}
		fc := event.FileChange{Path: m.rel(path), Kind: event.FileUpdate}
		if st.tool == "write" && meta.Exists != nil && !*meta.Exists {
			fc.Kind = event.FileAdd
		}
		if done {
			switch {
			case meta.Diff != "":
				fc.Diff = meta.Diff
			case fc.Kind == event.FileAdd && in.Content != nil:
				fc.Diff = newFileDiff(fc.Path, *in.Content)
			}
			it.Output = output
		}
		it.Changes = []event.FileChange{fc}
	case event.ItemPlan:
		for _, t := range in.Todos {
			it.Entries = append(it.Entries, event.PlanEntry{Content: t.Content, Status: t.Status, Priority: t.Priority})
		}
	case event.ItemWebSearch:
		it.Query = in.Query
		if it.Query == "" {
			it.Query = in.URL
		}
		if done {
			it.Output = output
		}
	default:
		it.Input = st.input
		if done {
			it.Output = output
		}
	}
}

func (m *Mapper) rel(path string) string {
	if m.Cwd != "" {
		if r, err := filepath.Rel(m.Cwd, path); err == nil && !strings.HasPrefix(r, "..") {
			return r
		}
	}
	return path
}

// ItemID returns the item of a tool call ("" when unknown).
func (m *Mapper) ItemID(callID string) string {
	if st := m.calls[callID]; st != nil {
		return st.itemID
	}
	return ""
}

// Tool returns the tool name and input of a tool call.
func (m *Mapper) Tool(callID string) (string, json.RawMessage) {
	if st := m.calls[callID]; st != nil {
		return st.tool, st.input
	}
	return "", nil
}

// Denied records that the permission for a tool call was denied, so its
// failure is reported as declined.
func (m *Mapper) Denied(callID string) { m.denied[callID] = true }

// EndTurn completes every item still open (failed, with reason) and
// returns the turn's usage and the last step's finish reason; the turn
// state is reset.
func (m *Mapper) EndTurn(reason string) (evs []event.Event, usage *event.Usage, finish string, errMsg string) {
	var out Output
	for _, st := range m.parts {
		if st.started && !st.finished {
			st.finished = true
			it := m.item(st, event.StatusFailed)
			if st.kind == event.ItemMessage || st.kind == event.ItemReasoning {
				if st.text != "" {
					it.Content = []event.ContentPart{event.TextPart(st.text)}
				}
			}
			it.Error = reason
			out.add(m, nil, &event.ItemCompleted{Item: it})
		}
	}
	usage, finish, errMsg = m.usage, m.finish, m.errMsg
	m.usage, m.finish, m.errMsg = nil, "", ""
	m.parts = map[string]*part{}
	return out.Events, usage, finish, errMsg
}

// newFileDiff is a unified diff creating path with content.
func newFileDiff(path, content string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- /dev/null\n+++ b/%s\n", path)
	if content == "" {
		return sb.String()
	}
	noEOL := !strings.HasSuffix(content, "\n")
	lines := strings.Split(strings.TrimSuffix(content, "\n"), "\n")
	if len(lines) == 1 {
		sb.WriteString("@@ -0,0 +1 @@\n")
	} else {
		fmt.Fprintf(&sb, "@@ -0,0 +1,%d @@\n", len(lines))
	}
	for _, l := range lines {
		sb.WriteString("+" + l + "\n")
	}
	if noEOL {
		sb.WriteString("\\ No newline at end of file\n")
	}
	return sb.String()
}

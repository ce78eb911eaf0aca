package codex

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/ids"
)

// Output is what one server message means for a session.
type Output struct {
	Events []event.Event
	// TurnID is the native turn id when the message started a turn.
	TurnID string
	// Result is set when the message ended the turn.
	Result *agent.Result
}

// Mapper translates one thread's notifications into universal events. It
// is pure (no I/O) and not safe for concurrent use.
type Mapper struct {
	// NewID makes item ids (ids.New(ids.Item) by default).
	NewID func() string
	// Raw keeps the original message in each event.
	Raw bool

	items map[string]*event.Item // by native item id
	usage *event.Usage           // summed over the turn's model calls
}

// NewMapper returns a Mapper.
func NewMapper() *Mapper {
	return &Mapper{NewID: func() string { return ids.New(ids.Item) }, items: map[string]*event.Item{}}
}

// wire shapes (only what is read).
type (
	itemParams struct {
		Item json.RawMessage `json:"item"`
	}
	wireItem struct {
		Type string `json:"type"`
		ID   string `json:"id"`
		// agentMessage, plan
		Text string `json:"text"`
		// reasoning
		Summary json.RawMessage `json:"summary"`
		Content json.RawMessage `json:"content"`
		// commandExecution
		Command          string  `json:"command"`
		Cwd              string  `json:"cwd"`
		Status           string  `json:"status"`
		AggregatedOutput *string `json:"aggregatedOutput"`
		ExitCode         *int    `json:"exitCode"`
		// fileChange
		Changes []struct {
			Path string `json:"path"`
			Kind struct {
				Type     string `json:"type"`
				MovePath string `json:"move_path"`
			} `json:"kind"`
			Diff string `json:"diff"`
		} `json:"changes"`
		// mcpToolCall, dynamicToolCall
		Server    string          `json:"server"`
		Tool      string          `json:"tool"`
		Arguments json.RawMessage `json:"arguments"`
		Result    json.RawMessage `json:"result"`
		Error     json.RawMessage `json:"error"`
		// webSearch
		Query string `json:"query"`
	}
	deltaParams struct {
		ItemID string `json:"itemId"`
		Delta  string `json:"delta"`
	}
	turnParams struct {
		Turn struct {
			ID         string `json:"id"`
			Status     string `json:"status"`
			DurationMS int64  `json:"durationMs"`
			Error      *struct {
				Message           string `json:"message"`
				AdditionalDetails string `json:"additionalDetails"`
			} `json:"error"`
		} `json:"turn"`
	}
	usageParams struct {
		TokenUsage struct {
			Last struct {
				InputTokens           int64 `json:"inputTokens"`
				CachedInputTokens     int64 `json:"cachedInputTokens"`
				CacheWriteInputTokens int64 `json:"cacheWriteInputTokens"`
				OutputTokens          int64 `json:"outputTokens"`
			} `json:"last"`
		} `json:"tokenUsage"`
	}
	errorParams struct {
		Error struct {
			Message           string          `json:"message"`
			CodexErrorInfo    json.RawMessage `json:"codexErrorInfo"`
			AdditionalDetails string          `json:"additionalDetails"`
		} `json:"error"`
		WillRetry bool `json:"willRetry"`
	}
	planParams struct {
		Explanation string `json:"explanation"`
		Plan        []struct {
			Step   string `json:"step"`
			Status string `json:"status"`
		} `json:"plan"`
	}
)

// Map translates one notification.
func (m *Mapper) Map(method string, params json.RawMessage) Output {
	var out Output
	raw := func(e event.Event) event.Event {
		if m.Raw {
			b, err := json.Marshal(map[string]any{"method": method, "params": params})
			if err == nil {
				e.Raw = b
			}
		}
		return e
	}
	emit := func(p event.Payload) { out.Events = append(out.Events, raw(event.New(event.SourceAgent, p))) }
	native := func() {
		var payload json.RawMessage
		if json.Valid(params) {
			payload = params
		}
		emit(&event.Native{NativeType: method, Payload: payload})
	}
	switch method {
	case "turn/started":
		var p turnParams
		_ = json.Unmarshal(params, &p)
		m.usage = nil
		out.TurnID = p.Turn.ID
	case "item/started", "item/completed":
		var p itemParams
		var w wireItem
		if json.Unmarshal(params, &p) != nil || json.Unmarshal(p.Item, &w) != nil || w.ID == "" {
			native()
			break
		}
		it, ok := m.item(&w)
		if !ok {
			if w.Type != "userMessage" { // the engine records the user's input itself
				native()
			}
			break
		}
		if method == "item/started" {
			emit(&event.ItemStarted{Item: *it})
		} else {
			if it.Status == event.StatusInProgress {
				it.Status = event.StatusCompleted
			}
			delete(m.items, w.ID)
			emit(&event.ItemCompleted{Item: *it})
		}
	case "item/agentMessage/delta", "item/reasoning/summaryTextDelta", "item/reasoning/textDelta",
		"item/commandExecution/outputDelta", "item/plan/delta":
		var p deltaParams
		if json.Unmarshal(params, &p) != nil || p.Delta == "" {
			break
		}
		it := m.items[p.ItemID]
		if it == nil {
			native()
			break
		}
		field := event.DeltaText
		if method == "item/commandExecution/outputDelta" {
			field = event.DeltaOutput
			it.Output += p.Delta
		} else if len(it.Content) == 0 {
			it.Content = []event.ContentPart{event.TextPart(p.Delta)}
		} else {
			it.Content[0].Text += p.Delta
		}
		emit(&event.ItemDelta{ItemID: it.ID, Field: field, Delta: p.Delta})
	case "turn/plan/updated":
		var p planParams
		if json.Unmarshal(params, &p) != nil {
			native()
			break
		}
		it := event.Item{ID: m.NewID(), Kind: event.ItemPlan, Status: event.StatusCompleted}
		for _, s := range p.Plan {
			st := s.Status
			if st == "inProgress" {
				st = "in_progress"
			}
			it.Entries = append(it.Entries, event.PlanEntry{Content: s.Step, Status: st})
		}
		if p.Explanation != "" {
			it.Content = []event.ContentPart{event.TextPart(p.Explanation)}
		}
		emit(&event.ItemStarted{Item: it})
		emit(&event.ItemCompleted{Item: it})
	case "thread/tokenUsage/updated":
		var p usageParams
		if json.Unmarshal(params, &p) != nil {
			break
		}
		if m.usage == nil {
			m.usage = &event.Usage{}
		}
		l := p.TokenUsage.Last
		m.usage.InputTokens += l.InputTokens
		m.usage.OutputTokens += l.OutputTokens
		m.usage.CacheReadTokens += l.CachedInputTokens
		m.usage.CacheWriteTokens += l.CacheWriteInputTokens
	case "error":
		var p errorParams
		_ = json.Unmarshal(params, &p)
		code, retryable := errorCode(p.Error.CodexErrorInfo)
		msg := p.Error.Message
		if what := errorWhat[code]; what != "" && !strings.Contains(strings.ToLower(msg), what) {
			// Codex replaces the provider's message with its own ("high
			// demand"); say what actually failed.
			msg = what + ": " + msg
		}
		if p.Error.AdditionalDetails != "" {
			msg += ": " + p.Error.AdditionalDetails
		}
		if p.WillRetry {
			code, retryable = code+"_retrying", true
		}
		emit(&event.Error{Code: code, Message: msg, Retryable: retryable})
	case "turn/completed":
		var p turnParams
		_ = json.Unmarshal(params, &p)
		r := agent.Result{StopReason: event.StopEndTurn, Usage: m.usage}
		switch p.Turn.Status {
		case "interrupted":
			r.StopReason = event.StopInterrupted
		case "failed":
			r.StopReason = event.StopError
		}
		if p.Turn.Error != nil {
			r.Message = p.Turn.Error.Message
		}
		m.usage = nil
		out.Result = &r
	case "thread/started", "thread/status/changed", "serverRequest/resolved", "account/rateLimits/updated",
		"item/fileChange/outputDelta", "remoteControl/status/changed", "turn/diff/updated":
		// Bookkeeping with no meaning for the log (diffs come with the
		// file changes themselves).
	default:
		native()
	}
	return out
}

// item converts a thread item, keeping it for deltas. ok is false for
// kinds without a universal equivalent.
func (m *Mapper) item(w *wireItem) (*event.Item, bool) {
	it := m.items[w.ID]
	if it == nil {
		it = &event.Item{ID: m.NewID(), NativeID: w.ID, Status: event.StatusInProgress}
	}
	it.Status = status(w.Status, it.Status)
	switch w.Type {
	case "agentMessage":
		it.Kind, it.Role = event.ItemMessage, event.RoleAssistant
		if w.Text != "" || it.Content == nil {
			it.Content = textContent(w.Text)
		}
	case "reasoning":
		it.Kind = event.ItemReasoning
		var summary, content []string
		_ = json.Unmarshal(w.Summary, &summary)
		_ = json.Unmarshal(w.Content, &content)
		if t := strings.Join(append(summary, content...), "\n\n"); t != "" {
			it.Content = textContent(t)
		}
	case "plan":
		it.Kind = event.ItemPlan
		if w.Text != "" {
			it.Content = textContent(w.Text)
		}
	case "commandExecution":
		it.Kind, it.Command, it.Cwd, it.ExitCode = event.ItemCommand, w.Command, w.Cwd, w.ExitCode
		if w.AggregatedOutput != nil {
			it.Output = *w.AggregatedOutput
		}
		if w.ExitCode != nil && *w.ExitCode != 0 && it.Status == event.StatusCompleted {
			it.Status = event.StatusFailed
		}
	case "fileChange":
		it.Kind, it.Changes = event.ItemFileChange, nil
		for _, c := range w.Changes {
			k := event.FileUpdate
			switch c.Kind.Type {
			case "add":
				k = event.FileAdd
			case "delete":
				k = event.FileDelete
			}
			it.Changes = append(it.Changes, event.FileChange{Path: c.Path, Kind: k, Diff: unifiedDiff(k, c.Diff)})
		}
	case "mcpToolCall", "dynamicToolCall":
		it.Kind, it.Name, it.Server = event.ItemMCPToolCall, w.Tool, w.Server
		if w.Type == "dynamicToolCall" {
			it.Kind = event.ItemToolCall
		}
		if len(w.Arguments) > 0 && json.Valid(w.Arguments) {
			it.Input = w.Arguments
		}
		if len(w.Result) > 0 && string(w.Result) != "null" {
			it.Output = string(w.Result)
		}
		if len(w.Error) > 0 && string(w.Error) != "null" {
			var e struct {
				Message string `json:"message"`
			}
			if json.Unmarshal(w.Error, &e) == nil && e.Message != "" {
				it.Error = e.Message
			} else {
				it.Error = string(w.Error)
			}
		}
	case "webSearch":
		it.Kind, it.Query = event.ItemWebSearch, w.Query
	default:
		return nil, false
	}
	m.items[w.ID] = it
	cp := *it
	cp.Content = append([]event.ContentPart(nil), it.Content...)
	return &cp, true
}

// status maps an item status; an item without one keeps cur.
func status(s string, cur event.ItemStatus) event.ItemStatus {
	switch s {
	case "inProgress":
		return event.StatusInProgress
	case "completed":
		return event.StatusCompleted
	case "failed":
		return event.StatusFailed
	case "declined":
		return event.StatusDeclined
	}
	return cur
}

func textContent(s string) []event.ContentPart {
	if s == "" {
		return nil
	}
	return []event.ContentPart{event.TextPart(s)}
}

// errorWhat describes error codes whose Codex message hides the cause.
var errorWhat = map[string]string{
	"upstream_error": "upstream internal error (HTTP 5xx)",
	"rate_limited":   "upstream rate limit (HTTP 429)",
	"unauthorized":   "upstream refused the API key (HTTP 401)",
}

// errorCode maps codexErrorInfo onto a stable code and whether retrying
// may help.
func errorCode(info json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(info, &s) == nil && s != "" {
		switch s {
		case "rateLimitExceeded", "usageLimitExceeded":
			return "rate_limited", true
		case "serverOverloaded", "internalServerError":
			return "upstream_error", true
		case "contextWindowExceeded":
			return "context_window_exceeded", false
		case "unauthorized":
			return "unauthorized", false
		}
		return "codex_" + s, false
	}
	var obj map[string]struct {
		HTTPStatusCode *int `json:"httpStatusCode"`
	}
	if json.Unmarshal(info, &obj) == nil {
		for k, v := range obj {
			retry := v.HTTPStatusCode == nil || *v.HTTPStatusCode == 429 || *v.HTTPStatusCode >= 500
			return "codex_" + k, retry
		}
	}
	return "codex_error", false
}

// Item returns a copy of the open item with the native id, or nil.
func (m *Mapper) Item(nativeID string) *event.Item {
	it := m.items[nativeID]
	if it == nil {
		return nil
	}
	cp := *it
	return &cp
}

// unifiedDiff turns the whole-file content Codex gives for an added or
// deleted file into a unified diff; an update's diff already is one.
func unifiedDiff(k event.FileChangeKind, d string) string {
	if d == "" || k == event.FileUpdate || strings.HasPrefix(d, "@@") || strings.HasPrefix(d, "--- ") {
		return d
	}
	lines := strings.SplitAfter(d, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	var b strings.Builder
	sign := "+"
	if k == event.FileAdd {
		fmt.Fprintf(&b, "@@ -0,0 +1,%d @@\n", len(lines))
	} else {
		sign = "-"
		fmt.Fprintf(&b, "@@ -1,%d +0,0 @@\n", len(lines))
	}
	for _, l := range lines {
		b.WriteString(sign + l)
		if !strings.HasSuffix(l, "\n") {
			b.WriteString("\n\\ No newline at end of file\n")
		}
	}
	return b.String()
}

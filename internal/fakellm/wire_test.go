package fakellm_test

// Small readers of what the server sends, written from the providers'
// documented wire formats and independent of the server's code: each one
// checks the shape of a stream or a JSON answer and reduces it to a result.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// result is an answer reduced to what the scenarios script.
type result struct {
	Thinking string
	Text     string
	Chunks   int // text deltas (1 for a non-streamed answer)
	Calls    []gotCall
	Stop     string // normalised: "end_turn" or "tool_use"
	Usage    bool   // usage figures were sent
}

// gotCall is a tool call as the client would run it.
type gotCall struct {
	Name  string
	Args  map[string]any // JSON arguments
	Input string         // freeform input (custom tools)
	ID    string
}

type sseEvent struct {
	Event string
	Data  string
}

// readSSE parses a text/event-stream body. Every event must end with a
// blank line.
func readSSE(r io.Reader) ([]sseEvent, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var out []sseEvent
	var cur sseEvent
	var data []string
	open := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if open {
				cur.Data = strings.Join(data, "\n")
				out = append(out, cur)
			}
			cur, data, open = sseEvent{}, nil, false
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			cur.Event, open = value, true
		case "data":
			data, open = append(data, value), true
		case "id", "retry":
		default:
			return nil, fmt.Errorf("sse: unknown field in %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if open {
		return nil, fmt.Errorf("sse: the last event is not terminated by a blank line")
	}
	return out, nil
}

func decodeObj(s string) (map[string]any, error) {
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("decode %q: %w", s, err)
	}
	return m, nil
}

func argsOf(s string) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("tool arguments %q: %w", s, err)
	}
	return m, nil
}

// Accessors on decoded JSON.
func o(v any) map[string]any { m, _ := v.(map[string]any); return m }
func a(v any) []any          { s, _ := v.([]any); return s }
func s(v any) string         { x, _ := v.(string); return x }
func n(v any) int {
	switch x := v.(type) {
	case json.Number:
		i, _ := x.Int64()
		return int(i)
	case float64:
		return int(x)
	}
	return -1
}

// ---- Anthropic Messages ----

func readAnthropicStream(body []byte) (result, error) {
	evs, err := readSSE(bytes.NewReader(body))
	if err != nil {
		return result{}, err
	}
	var res result
	if len(evs) < 3 {
		return res, fmt.Errorf("anthropic: only %d events", len(evs))
	}
	type blk struct {
		typ   string
		text  string
		json  string
		name  string
		id    string
		open  bool
		seenS bool
	}
	var blocks []*blk
	state := "start"
	for i, ev := range evs {
		m, err := decodeObj(ev.Data)
		if err != nil {
			return res, err
		}
		typ := s(m["type"])
		if typ != ev.Event {
			return res, fmt.Errorf("anthropic: event %q carries type %q", ev.Event, typ)
		}
		switch typ {
		case "message_start":
			if i != 0 {
				return res, fmt.Errorf("anthropic: message_start at %d", i)
			}
			msg := o(m["message"])
			if s(msg["role"]) != "assistant" || s(msg["type"]) != "message" || !strings.HasPrefix(s(msg["id"]), "msg_") ||
				len(a(msg["content"])) != 0 || o(msg["usage"]) == nil {
				return res, fmt.Errorf("anthropic: bad message_start %s", ev.Data)
			}
			state = "blocks"
		case "ping":
		case "content_block_start":
			if state != "blocks" {
				return res, fmt.Errorf("anthropic: block after %s", state)
			}
			if n(m["index"]) != len(blocks) {
				return res, fmt.Errorf("anthropic: block index %d, want %d", n(m["index"]), len(blocks))
			}
			if len(blocks) > 0 && blocks[len(blocks)-1].open {
				return res, fmt.Errorf("anthropic: block %d still open", len(blocks)-1)
			}
			cb := o(m["content_block"])
			b := &blk{typ: s(cb["type"]), open: true, name: s(cb["name"]), id: s(cb["id"])}
			switch b.typ {
			case "text", "thinking":
			case "tool_use":
				if b.name == "" || !strings.HasPrefix(b.id, "toolu_") || o(cb["input"]) == nil {
					return res, fmt.Errorf("anthropic: bad tool_use start %s", ev.Data)
				}
			default:
				return res, fmt.Errorf("anthropic: block type %q", b.typ)
			}
			blocks = append(blocks, b)
		case "content_block_delta":
			idx := n(m["index"])
			if idx < 0 || idx >= len(blocks) || !blocks[idx].open {
				return res, fmt.Errorf("anthropic: delta for block %d not open", idx)
			}
			b, d := blocks[idx], o(m["delta"])
			switch dt := s(d["type"]); {
			case dt == "text_delta" && b.typ == "text":
				b.text += s(d["text"])
				res.Chunks++
			case dt == "thinking_delta" && b.typ == "thinking" && !b.seenS:
				b.text += s(d["thinking"])
			case dt == "signature_delta" && b.typ == "thinking":
				b.seenS = s(d["signature"]) != ""
			case dt == "input_json_delta" && b.typ == "tool_use":
				b.json += s(d["partial_json"])
			default:
				return res, fmt.Errorf("anthropic: delta %q in a %s block", dt, b.typ)
			}
		case "content_block_stop":
			idx := n(m["index"])
			if idx < 0 || idx >= len(blocks) || !blocks[idx].open {
				return res, fmt.Errorf("anthropic: stop for block %d not open", idx)
			}
			blocks[idx].open = false
		case "message_delta":
			if len(blocks) > 0 && blocks[len(blocks)-1].open {
				return res, fmt.Errorf("anthropic: message_delta with a block open")
			}
			res.Stop = s(o(m["delta"])["stop_reason"])
			res.Usage = n(o(m["usage"])["output_tokens"]) > 0
			state = "delta"
		case "message_stop":
			if state != "delta" || i != len(evs)-1 {
				return res, fmt.Errorf("anthropic: message_stop misplaced")
			}
			state = "stopped"
		default:
			return res, fmt.Errorf("anthropic: unknown event %q", typ)
		}
	}
	if state != "stopped" {
		return res, fmt.Errorf("anthropic: stream ended in state %s", state)
	}
	for _, b := range blocks {
		switch b.typ {
		case "text":
			res.Text += b.text
		case "thinking":
			if !b.seenS {
				return res, fmt.Errorf("anthropic: thinking block without signature")
			}
			res.Thinking += b.text
		case "tool_use":
			args, err := argsOf(b.json)
			if err != nil {
				return res, err
			}
			res.Calls = append(res.Calls, gotCall{Name: b.name, Args: args, ID: b.id})
		}
	}
	return res, checkStop(res, "end_turn", "tool_use")
}

func readAnthropicJSON(body []byte) (result, error) {
	m, err := decodeObj(string(body))
	if err != nil {
		return result{}, err
	}
	res := result{Stop: s(m["stop_reason"]), Usage: n(o(m["usage"])["output_tokens"]) > 0}
	if s(m["type"]) != "message" || s(m["role"]) != "assistant" || !strings.HasPrefix(s(m["id"]), "msg_") {
		return res, fmt.Errorf("anthropic: bad message %s", body)
	}
	for _, b := range a(m["content"]) {
		bl := o(b)
		switch s(bl["type"]) {
		case "text":
			res.Text += s(bl["text"])
			res.Chunks++
		case "thinking":
			if s(bl["signature"]) == "" {
				return res, fmt.Errorf("anthropic: thinking without signature")
			}
			res.Thinking += s(bl["thinking"])
		case "tool_use":
			raw, _ := json.Marshal(bl["input"])
			args, err := argsOf(string(raw))
			if err != nil {
				return res, err
			}
			res.Calls = append(res.Calls, gotCall{Name: s(bl["name"]), Args: args, ID: s(bl["id"])})
		default:
			return res, fmt.Errorf("anthropic: block %v", bl)
		}
	}
	return res, checkStop(res, "end_turn", "tool_use")
}

// checkStop checks the stop reason agrees with the calls and normalises it.
func checkStop(res result, end, tool string) error {
	want := end
	if len(res.Calls) > 0 {
		want = tool
	}
	if res.Stop != want {
		return fmt.Errorf("stop reason %q, want %q", res.Stop, want)
	}
	return nil
}

// ---- OpenAI Responses ----

func readResponsesStream(body []byte) (result, error) {
	evs, err := readSSE(bytes.NewReader(body))
	if err != nil {
		return result{}, err
	}
	var res result
	if len(evs) < 3 {
		return res, fmt.Errorf("responses: only %d events", len(evs))
	}
	type item struct {
		added, done map[string]any
		text        string // output_text / arguments / input / summary deltas
		final       string // the .done value
	}
	var items []*item
	var completed map[string]any
	for i, ev := range evs {
		m, err := decodeObj(ev.Data)
		if err != nil {
			return res, err
		}
		typ := s(m["type"])
		if typ != ev.Event {
			return res, fmt.Errorf("responses: event %q carries type %q", ev.Event, typ)
		}
		if n(m["sequence_number"]) != i {
			return res, fmt.Errorf("responses: sequence_number %v at %d", m["sequence_number"], i)
		}
		if completed != nil {
			return res, fmt.Errorf("responses: %s after response.completed", typ)
		}
		cur := func() (*item, error) {
			idx := n(m["output_index"])
			if idx != len(items)-1 || items[idx].done != nil {
				return nil, fmt.Errorf("responses: %s for output %d, not the open item", typ, idx)
			}
			it := items[idx]
			if id := m["item_id"]; id != nil && id != it.added["id"] {
				return nil, fmt.Errorf("responses: %s item_id %v, want %v", typ, id, it.added["id"])
			}
			return it, nil
		}
		switch typ {
		case "response.created", "response.in_progress":
			r := o(m["response"])
			if (i == 0) != (typ == "response.created") || s(r["status"]) != "in_progress" || !strings.HasPrefix(s(r["id"]), "resp_") {
				return res, fmt.Errorf("responses: bad %s at %d", typ, i)
			}
		case "response.output_item.added":
			if n(m["output_index"]) != len(items) || (len(items) > 0 && items[len(items)-1].done == nil) {
				return res, fmt.Errorf("responses: item added out of order")
			}
			items = append(items, &item{added: o(m["item"])})
		case "response.content_part.added", "response.content_part.done",
			"response.reasoning_summary_part.added", "response.reasoning_summary_part.done":
			if _, err := cur(); err != nil {
				return res, err
			}
		case "response.output_text.delta", "response.function_call_arguments.delta",
			"response.custom_tool_call_input.delta", "response.reasoning_summary_text.delta":
			it, err := cur()
			if err != nil {
				return res, err
			}
			it.text += s(m["delta"])
			if typ == "response.output_text.delta" {
				res.Chunks++
			}
		case "response.output_text.done", "response.reasoning_summary_text.done":
			it, err := cur()
			if err != nil {
				return res, err
			}
			it.final = s(m["text"])
		case "response.function_call_arguments.done":
			it, err := cur()
			if err != nil {
				return res, err
			}
			it.final = s(m["arguments"])
		case "response.custom_tool_call_input.done":
			it, err := cur()
			if err != nil {
				return res, err
			}
			it.final = s(m["input"])
		case "response.output_item.done":
			it, err := cur()
			if err != nil {
				return res, err
			}
			it.done = o(m["item"])
		case "response.completed":
			completed = o(m["response"])
		default:
			return res, fmt.Errorf("responses: unknown event %q", typ)
		}
	}
	if completed == nil || s(completed["status"]) != "completed" {
		return res, fmt.Errorf("responses: no response.completed")
	}
	res.Usage = n(o(completed["usage"])["output_tokens"]) > 0 && n(o(completed["usage"])["total_tokens"]) > 0
	output := a(completed["output"])
	if len(output) != len(items) {
		return res, fmt.Errorf("responses: completed has %d items, stream %d", len(output), len(items))
	}
	for i, it := range items {
		if it.done == nil {
			return res, fmt.Errorf("responses: item %d not done", i)
		}
		a1, _ := json.Marshal(it.done)
		a2, _ := json.Marshal(output[i])
		if !bytes.Equal(a1, a2) {
			return res, fmt.Errorf("responses: item %d differs in response.completed", i)
		}
		if it.added["id"] != it.done["id"] || it.added["type"] != it.done["type"] {
			return res, fmt.Errorf("responses: item %d changed id or type", i)
		}
		switch s(it.done["type"]) {
		case "message", "reasoning", "function_call", "custom_tool_call":
			if it.text != it.final {
				return res, fmt.Errorf("responses: item %d deltas %q != done %q", i, it.text, it.final)
			}
		}
	}
	return readResponsesItems(output, res)
}

func readResponsesJSON(body []byte) (result, error) {
	m, err := decodeObj(string(body))
	if err != nil {
		return result{}, err
	}
	if s(m["object"]) != "response" || s(m["status"]) != "completed" {
		return result{}, fmt.Errorf("responses: bad response %s", body)
	}
	res := result{Usage: n(o(m["usage"])["output_tokens"]) > 0}
	res, err = readResponsesItems(a(m["output"]), res)
	if res.Text != "" {
		res.Chunks = 1
	}
	return res, err
}

func readResponsesItems(output []any, res result) (result, error) {
	for _, x := range output {
		it := o(x)
		switch s(it["type"]) {
		case "reasoning":
			for _, p := range a(it["summary"]) {
				res.Thinking += s(o(p)["text"])
			}
		case "message":
			if s(it["role"]) != "assistant" {
				return res, fmt.Errorf("responses: message role %v", it["role"])
			}
			for _, p := range a(it["content"]) {
				if s(o(p)["type"]) != "output_text" {
					return res, fmt.Errorf("responses: content part %v", p)
				}
				res.Text += s(o(p)["text"])
			}
		case "function_call":
			args, err := argsOf(s(it["arguments"]))
			if err != nil {
				return res, err
			}
			if !strings.HasPrefix(s(it["call_id"]), "call_") {
				return res, fmt.Errorf("responses: call_id %v", it["call_id"])
			}
			res.Calls = append(res.Calls, gotCall{Name: s(it["name"]), Args: args, ID: s(it["call_id"])})
		case "custom_tool_call":
			res.Calls = append(res.Calls, gotCall{Name: s(it["name"]), Input: s(it["input"]), ID: s(it["call_id"])})
		default:
			return res, fmt.Errorf("responses: item type %v", it["type"])
		}
	}
	res.Stop = "end_turn"
	if len(res.Calls) > 0 {
		res.Stop = "tool_use"
	}
	return res, nil
}

// ---- OpenAI Chat Completions ----

func readChatStream(body []byte, wantUsage bool) (result, error) {
	evs, err := readSSE(bytes.NewReader(body))
	if err != nil {
		return result{}, err
	}
	var res result
	if len(evs) < 3 || evs[len(evs)-1].Data != "[DONE]" {
		return res, fmt.Errorf("chat: no [DONE] at the end")
	}
	type call struct{ id, name, args string }
	var calls []*call
	var id string
	finished, usage := false, false
	for i, ev := range evs[:len(evs)-1] {
		if ev.Event != "" {
			return res, fmt.Errorf("chat: event name %q", ev.Event)
		}
		m, err := decodeObj(ev.Data)
		if err != nil {
			return res, err
		}
		if s(m["object"]) != "chat.completion.chunk" || (id != "" && s(m["id"]) != id) {
			return res, fmt.Errorf("chat: bad chunk %s", ev.Data)
		}
		id = s(m["id"])
		choices := a(m["choices"])
		if len(choices) == 0 {
			if !finished || o(m["usage"]) == nil {
				return res, fmt.Errorf("chat: chunk without choices %s", ev.Data)
			}
			usage = n(o(m["usage"])["total_tokens"]) > 0
			continue
		}
		if finished {
			return res, fmt.Errorf("chat: chunk after finish_reason")
		}
		ch := o(choices[0])
		d := o(ch["delta"])
		if i == 0 && s(d["role"]) != "assistant" {
			return res, fmt.Errorf("chat: first delta without role")
		}
		if c := s(d["content"]); c != "" {
			res.Text += c
			res.Chunks++
		}
		res.Thinking += s(d["reasoning_content"])
		for _, tc := range a(d["tool_calls"]) {
			t := o(tc)
			idx := n(t["index"])
			f := o(t["function"])
			switch {
			case idx == len(calls):
				if s(t["id"]) == "" || s(f["name"]) == "" {
					return res, fmt.Errorf("chat: a new tool call without id or name")
				}
				calls = append(calls, &call{id: s(t["id"]), name: s(f["name"]), args: s(f["arguments"])})
			case idx == len(calls)-1:
				calls[idx].args += s(f["arguments"])
			default:
				return res, fmt.Errorf("chat: tool call index %d with %d calls", idx, len(calls))
			}
		}
		if fr := s(ch["finish_reason"]); fr != "" {
			finished = true
			res.Stop = map[string]string{"stop": "end_turn", "tool_calls": "tool_use"}[fr]
		}
	}
	if !finished {
		return res, fmt.Errorf("chat: no finish_reason")
	}
	if usage != wantUsage {
		return res, fmt.Errorf("chat: usage chunk %v, want %v", usage, wantUsage)
	}
	res.Usage = usage
	for _, c := range calls {
		args, err := argsOf(c.args)
		if err != nil {
			return res, err
		}
		res.Calls = append(res.Calls, gotCall{Name: c.name, Args: args, ID: c.id})
	}
	return res, checkStop(res, "end_turn", "tool_use")
}

func readChatJSON(body []byte) (result, error) {
	m, err := decodeObj(string(body))
	if err != nil {
		return result{}, err
	}
	choices := a(m["choices"])
	if s(m["object"]) != "chat.completion" || len(choices) != 1 {
		return result{}, fmt.Errorf("chat: bad completion %s", body)
	}
	ch := o(choices[0])
	msg := o(ch["message"])
	res := result{Text: s(msg["content"]), Thinking: s(msg["reasoning_content"]),
		Usage: n(o(m["usage"])["total_tokens"]) > 0}
	if res.Text != "" {
		res.Chunks = 1
	}
	res.Stop = map[string]string{"stop": "end_turn", "tool_calls": "tool_use"}[s(ch["finish_reason"])]
	for _, tc := range a(msg["tool_calls"]) {
		f := o(o(tc)["function"])
		args, err := argsOf(s(f["arguments"]))
		if err != nil {
			return res, err
		}
		res.Calls = append(res.Calls, gotCall{Name: s(f["name"]), Args: args, ID: s(o(tc)["id"])})
	}
	return res, checkStop(res, "end_turn", "tool_use")
}

// ---- Gemini ----

// readGemini reads generateContent (one object), streamGenerateContent
// with alt=sse (SSE data events) or without (a JSON array).
func readGemini(body []byte, mode string) (result, error) {
	var chunks []map[string]any
	switch mode {
	case "json":
		m, err := decodeObj(string(body))
		if err != nil {
			return result{}, err
		}
		chunks = append(chunks, m)
	case "sse":
		evs, err := readSSE(bytes.NewReader(body))
		if err != nil {
			return result{}, err
		}
		for _, ev := range evs {
			if ev.Event != "" {
				return result{}, fmt.Errorf("gemini: event name %q", ev.Event)
			}
			m, err := decodeObj(ev.Data)
			if err != nil {
				return result{}, err
			}
			chunks = append(chunks, m)
		}
	case "array":
		d := json.NewDecoder(bytes.NewReader(body))
		d.UseNumber()
		if err := d.Decode(&chunks); err != nil {
			return result{}, fmt.Errorf("gemini: array: %w", err)
		}
	}
	var res result
	if len(chunks) == 0 {
		return res, fmt.Errorf("gemini: no chunks")
	}
	for i, m := range chunks {
		cands := a(m["candidates"])
		if len(cands) != 1 {
			return res, fmt.Errorf("gemini: %d candidates", len(cands))
		}
		c := o(cands[0])
		content := o(c["content"])
		if s(content["role"]) != "model" {
			return res, fmt.Errorf("gemini: role %v", content["role"])
		}
		last := i == len(chunks)-1
		if fr := s(c["finishReason"]); (fr != "") != last || (last && fr != "STOP") {
			return res, fmt.Errorf("gemini: finishReason %q in chunk %d of %d", fr, i, len(chunks))
		}
		if last {
			res.Usage = n(o(m["usageMetadata"])["totalTokenCount"]) > 0
		}
		for _, p := range a(content["parts"]) {
			part := o(p)
			switch {
			case part["functionCall"] != nil:
				fc := o(part["functionCall"])
				raw, _ := json.Marshal(fc["args"])
				args, err := argsOf(string(raw))
				if err != nil {
					return res, err
				}
				res.Calls = append(res.Calls, gotCall{Name: s(fc["name"]), Args: args})
			case part["thought"] == true:
				res.Thinking += s(part["text"])
			case part["text"] != nil:
				res.Text += s(part["text"])
				res.Chunks++
			default:
				return res, fmt.Errorf("gemini: part %v", part)
			}
		}
	}
	res.Stop = "end_turn"
	if len(res.Calls) > 0 {
		res.Stop = "tool_use"
	}
	return res, nil
}

// errorShape checks an error body and returns its message.
func errorShape(api string, status int, body []byte) (string, error) {
	m, err := decodeObj(string(body))
	if err != nil {
		return "", err
	}
	e := o(m["error"])
	switch api {
	case "anthropic":
		want := map[int]string{429: "rate_limit_error", 500: "api_error", 404: "not_found_error", 400: "invalid_request_error", 401: "authentication_error", 529: "overloaded_error"}[status]
		if s(m["type"]) != "error" || s(e["type"]) != want {
			return "", fmt.Errorf("anthropic error %s, want type %q", body, want)
		}
	case "responses", "chat":
		want := map[int]string{429: "requests", 500: "server_error", 404: "invalid_request_error", 400: "invalid_request_error", 401: "invalid_request_error"}[status]
		if s(e["type"]) != want {
			return "", fmt.Errorf("openai error %s, want type %q", body, want)
		}
		if status == 429 && s(e["code"]) != "rate_limit_exceeded" {
			return "", fmt.Errorf("openai 429 code %v", e["code"])
		}
		if status == 401 && s(e["code"]) != "invalid_api_key" {
			return "", fmt.Errorf("openai 401 code %v", e["code"])
		}
	case "gemini":
		want := map[int]string{429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 404: "NOT_FOUND", 400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED"}[status]
		if n(e["code"]) != status || s(e["status"]) != want {
			return "", fmt.Errorf("gemini error %s, want %d %q", body, status, want)
		}
	}
	if s(e["message"]) == "" {
		return "", fmt.Errorf("%s error without a message: %s", api, body)
	}
	return s(e["message"]), nil
}

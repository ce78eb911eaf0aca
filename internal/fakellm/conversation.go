package fakellm

import (
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Tool kinds: how a call to the tool is sent back.
const (
	toolFunction   = "function"    // JSON arguments (every API)
	toolCustom     = "custom"      // Responses freeform tool: raw input text
	toolLocalShell = "local_shell" // Responses local_shell tool: command array
)

// tool is a tool a request offers.
type tool struct {
	name   string
	schema map[string]any // JSON schema of the arguments (nil for custom tools)
	kind   string
}

// entry is one message of a request's history, reduced to what the turn
// count needs.
type entry uint8

const (
	entryOther      entry = iota // system, developer, …
	entryUser                    // a real user message
	entryToolResult              // the client's answer to tool calls
	entryAssistant               // model output without a tool call
	entryCall                    // model output with a tool call
)

// conversation is what the server reads from a generate request.
type conversation struct {
	model   string
	stream  bool
	tools   []tool
	history []entry
	// schema is the JSON schema of the output asked for, nil if none
	// (an empty map for "any JSON object").
	schema       map[string]any
	wantsJSON    bool
	includeUsage bool // Chat stream_options.include_usage
	body         map[string]any
	size         int // body size in bytes (for the usage figures)
	// parts are the content parts of the user messages (Request.Parts).
	parts []Part
}

// position returns the 0-based user prompt the next answer belongs to (the
// number of final answers before the last real user message) and the
// number of tool rounds since that message. Consecutive model outputs
// (Responses items, split Gemini contents) count as one answer.
func position(h []entry) (prompt, turn int) {
	last := -1
	for i, e := range h {
		if e == entryUser {
			last = i
		}
	}
	open, start, call := false, 0, false
	flush := func() {
		if !open {
			return
		}
		open = false
		switch {
		case start < last && !call:
			prompt++
		case start > last && call:
			turn++
		}
	}
	for i, e := range h {
		switch e {
		case entryAssistant, entryCall:
			if !open {
				open, start, call = true, i, false
			}
			call = call || e == entryCall
		default:
			flush()
		}
	}
	flush()
	return prompt, turn
}

// Accessors for decoded JSON that never panic.

func obj(v any) map[string]any { m, _ := v.(map[string]any); return m }
func arr(v any) []any          { a, _ := v.([]any); return a }
func str(v any) string         { s, _ := v.(string); return s }
func truthy(v any) bool        { b, _ := v.(bool); return b }

func parseAnthropic(b map[string]any) *conversation {
	c := &conversation{model: str(b["model"]), stream: truthy(b["stream"]), body: b}
	for _, t := range arr(b["tools"]) {
		m := obj(t)
		name, typ := str(m["name"]), str(m["type"])
		if name == "" || (typ != "" && typ != "custom") { // server tools (web_search_…)
			continue
		}
		c.tools = append(c.tools, tool{name: name, schema: obj(m["input_schema"]), kind: toolFunction})
	}
	for _, msg := range arr(b["messages"]) {
		m := obj(msg)
		blocks := arr(m["content"])
		has := func(typ string) bool {
			for _, bl := range blocks {
				if str(obj(bl)["type"]) == typ {
					return true
				}
			}
			return false
		}
		switch str(m["role"]) {
		case "user":
			if has("tool_result") {
				c.history = append(c.history, entryToolResult)
			} else {
				c.history = append(c.history, entryUser)
				anthropicParts(c, m["content"])
			}
		case "assistant":
			if has("tool_use") {
				c.history = append(c.history, entryCall)
			} else {
				c.history = append(c.history, entryAssistant)
			}
		default:
			c.history = append(c.history, entryOther)
		}
	}
	format := obj(b["output_format"])
	if format == nil {
		format = obj(obj(b["output_config"])["format"])
	}
	if str(format["type"]) == "json_schema" {
		c.wantsJSON, c.schema = true, obj(format["schema"])
	}
	return c
}

func parseChat(b map[string]any) *conversation {
	c := &conversation{model: str(b["model"]), stream: truthy(b["stream"]), body: b}
	c.includeUsage = truthy(obj(b["stream_options"])["include_usage"])
	for _, t := range arr(b["tools"]) {
		f := obj(obj(t)["function"])
		if name := str(f["name"]); name != "" {
			c.tools = append(c.tools, tool{name: name, schema: obj(f["parameters"]), kind: toolFunction})
		}
	}
	for _, f := range arr(b["functions"]) { // the legacy form
		if name := str(obj(f)["name"]); name != "" {
			c.tools = append(c.tools, tool{name: name, schema: obj(obj(f)["parameters"]), kind: toolFunction})
		}
	}
	for _, msg := range arr(b["messages"]) {
		m := obj(msg)
		switch str(m["role"]) {
		case "user":
			c.history = append(c.history, entryUser)
			chatParts(c, m["content"])
		case "tool", "function":
			c.history = append(c.history, entryToolResult)
		case "assistant":
			if len(arr(m["tool_calls"])) > 0 || obj(m["function_call"]) != nil {
				c.history = append(c.history, entryCall)
			} else {
				c.history = append(c.history, entryAssistant)
			}
		default:
			c.history = append(c.history, entryOther)
		}
	}
	rf := obj(b["response_format"])
	switch str(rf["type"]) {
	case "json_schema":
		c.wantsJSON, c.schema = true, obj(obj(rf["json_schema"])["schema"])
	case "json_object":
		c.wantsJSON = true
	}
	return c
}

func parseResponses(b map[string]any) *conversation {
	c := &conversation{model: str(b["model"]), stream: truthy(b["stream"]), body: b}
	for _, t := range arr(b["tools"]) {
		m := obj(t)
		switch str(m["type"]) {
		case "function":
			name, params := str(m["name"]), obj(m["parameters"])
			if f := obj(m["function"]); name == "" && f != nil { // Chat-style, seen in some clients
				name, params = str(f["name"]), obj(f["parameters"])
			}
			if name != "" {
				c.tools = append(c.tools, tool{name: name, schema: params, kind: toolFunction})
			}
		case "custom":
			if name := str(m["name"]); name != "" {
				c.tools = append(c.tools, tool{name: name, kind: toolCustom})
			}
		case "local_shell":
			c.tools = append(c.tools, tool{name: "local_shell", kind: toolLocalShell})
		}
	}
	switch in := b["input"].(type) {
	case string:
		c.history = append(c.history, entryUser)
		responsesParts(c, in)
	case []any:
		for _, it := range in {
			m := obj(it)
			typ := str(m["type"])
			switch {
			case typ == "" || typ == "message":
				switch str(m["role"]) {
				case "user":
					c.history = append(c.history, entryUser)
					responsesParts(c, m["content"])
				case "assistant":
					c.history = append(c.history, entryAssistant)
				default:
					c.history = append(c.history, entryOther)
				}
			case typ == "function_call" || typ == "custom_tool_call" || typ == "local_shell_call":
				c.history = append(c.history, entryCall)
			case strings.HasSuffix(typ, "_output"):
				c.history = append(c.history, entryToolResult)
			case typ == "reasoning" || strings.HasSuffix(typ, "_call"):
				c.history = append(c.history, entryAssistant)
			default:
				c.history = append(c.history, entryOther)
			}
		}
	}
	format := obj(obj(b["text"])["format"])
	switch str(format["type"]) {
	case "json_schema":
		c.wantsJSON, c.schema = true, obj(format["schema"])
	case "json_object":
		c.wantsJSON = true
	}
	return c
}

func parseGemini(b map[string]any, model string, stream bool) *conversation {
	c := &conversation{model: model, stream: stream, body: b}
	for _, t := range arr(b["tools"]) {
		m := obj(t)
		decls := arr(m["functionDeclarations"])
		if decls == nil {
			decls = arr(m["function_declarations"])
		}
		for _, d := range decls {
			f := obj(d)
			name := str(f["name"])
			if name == "" {
				continue
			}
			schema := obj(f["parametersJsonSchema"])
			if schema == nil {
				schema = obj(f["parameters"])
			}
			c.tools = append(c.tools, tool{name: name, schema: schema, kind: toolFunction})
		}
	}
	for _, ct := range arr(b["contents"]) {
		m := obj(ct)
		parts := arr(m["parts"])
		has := func(key string) bool {
			for _, p := range parts {
				if _, ok := obj(p)[key]; ok {
					return true
				}
			}
			return false
		}
		switch str(m["role"]) {
		case "", "user":
			if has("functionResponse") {
				c.history = append(c.history, entryToolResult)
			} else {
				c.history = append(c.history, entryUser)
				geminiParts(c, parts)
			}
		case "model":
			if has("functionCall") {
				c.history = append(c.history, entryCall)
			} else {
				c.history = append(c.history, entryAssistant)
			}
		case "function", "tool":
			c.history = append(c.history, entryToolResult)
		default:
			c.history = append(c.history, entryOther)
		}
	}
	gc := obj(b["generationConfig"])
	if gc == nil {
		gc = obj(b["generation_config"])
	}
	mime := str(gc["responseMimeType"])
	if mime == "" {
		mime = str(gc["response_mime_type"])
	}
	if mime == "application/json" {
		c.wantsJSON = true
		for _, k := range []string{"responseJsonSchema", "responseSchema", "response_json_schema", "response_schema"} {
			if s := obj(gc[k]); s != nil {
				c.schema = s
				break
			}
		}
	}
	return c
}

// The ways agents state their working directory, most specific first:
// Codex's <cwd>, Claude Code's and OpenCode's "Working directory:", pi's
// "Current working directory:", Gemini's "Workspace Directories" list and
// its older sentence.
var cwdPatterns = []*regexp.Regexp{
	regexp.MustCompile(`<cwd>\s*(/[^<\n]*?)\s*</cwd>`),
	regexp.MustCompile(`(?i)working directory:[ \t*]*(/[^\s"'<>\x60]+)`),
	regexp.MustCompile(`Workspace Directories:[ \t*]*\n?\s*(?:[-*]\s*)?(/[^\s"'<>\x60]+)`),
	regexp.MustCompile(`(?i)currently working in the directory:?[ \t*]*(/[^\s"'<>\x60]+)`),
	regexp.MustCompile(`(?i)\bcwd:[ \t]*(/[^\s"'<>\x60]+)`),
}

// maxScan bounds how much of a request's text the cwd search reads.
const maxScan = 4 << 20

// guessCwd returns the working directory the agent states in the request,
// "" if none.
func guessCwd(body any) string {
	var b strings.Builder
	var walk func(v any)
	walk = func(v any) {
		if b.Len() > maxScan {
			return
		}
		switch x := v.(type) {
		case string:
			b.WriteString(x)
			b.WriteByte('\n')
		case map[string]any:
			for _, k := range []string{"system", "instructions", "systemInstruction", "system_instruction"} {
				if y, ok := x[k]; ok {
					walk(y)
				}
			}
			for _, k := range slices.Sorted(maps.Keys(x)) {
				y := x[k]
				switch k {
				case "system", "instructions", "systemInstruction", "system_instruction", "tools":
					continue
				}
				walk(y)
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	walk(body)
	text := b.String()
	for _, re := range cwdPatterns {
		if m := re.FindStringSubmatch(text); m != nil {
			d := strings.TrimRight(strings.TrimSpace(m[1]), ".,;:)]*")
			if len(d) > 1 {
				d = strings.TrimRight(d, "/")
			}
			if strings.HasPrefix(d, "/") {
				return d
			}
		}
	}
	return ""
}

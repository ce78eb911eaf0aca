package fakellm

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// toolCall is a concrete call of one of the request's tools.
type toolCall struct {
	name string
	// namespace is a raw call's Call.Namespace (Responses API only).
	namespace string
	kind      string // toolFunction, toolCustom, toolLocalShell
	// arguments is the JSON object text (toolFunction), input the raw
	// text (toolCustom), command the argv (toolLocalShell).
	arguments string
	input     string
	command   []string
}

// object returns the arguments as a JSON object.
func (c *toolCall) object() json.RawMessage {
	switch c.kind {
	case toolCustom:
		return marshal(map[string]any{"input": c.input})
	case toolLocalShell:
		return marshal(map[string]any{"command": c.command})
	}
	return json.RawMessage(c.arguments)
}

// summary describes the call for the request log.
func (c *toolCall) summary() string {
	var s string
	switch c.kind {
	case toolCustom:
		s = c.input
	case toolLocalShell:
		s = strings.Join(c.command, " ")
	default:
		s = c.arguments
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return c.name + " " + s
}

// Tool names each abstract call looks for, in order of preference.
var (
	writeTools = []string{"Write", "write", "write_file", "WriteFile", "create_file", "file_write", "writeFile"}
	editTools  = []string{"Edit", "edit", "replace", "str_replace", "edit_file", "MultiEdit", "search_replace"}
	shellTools = []string{"Bash", "bash", "shell_command", "exec_command", "shell", "run_shell_command",
		"local_shell", "run_terminal_cmd", "terminal", "execute", "run_command"}
	patchTools = []string{"apply_patch"}
)

// Argument names, in order of preference.
var (
	pathArgs    = []string{"file_path", "filePath", "absolute_path", "path", "filename", "file", "target_file"}
	contentArgs = []string{"content", "contents", "text", "data", "file_text", "file_content"}
	oldArgs     = []string{"old_string", "oldString", "old_str", "oldText", "old_text", "old"}
	newArgs     = []string{"new_string", "newString", "new_str", "newText", "new_text", "new"}
	commandArgs = []string{"command", "cmd", "commands", "script"}
	dirArgs     = []string{"workdir", "cwd", "dir_path", "directory"}
)

// findTool returns the first tool named in names, else the first whose
// lower-cased name contains one of the fragments.
func findTool(tools []tool, names []string, fragments ...string) *tool {
	for _, n := range names {
		for i := range tools {
			if tools[i].name == n {
				return &tools[i]
			}
		}
	}
	for _, f := range fragments {
		for i := range tools {
			if strings.Contains(strings.ToLower(tools[i].name), f) {
				return &tools[i]
			}
		}
	}
	return nil
}

func props(schema map[string]any) map[string]any { return obj(schema["properties"]) }

func required(schema map[string]any) []string {
	var out []string
	for _, r := range arr(schema["required"]) {
		if s := str(r); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// argName returns the first candidate the schema has, else def.
func argName(p map[string]any, candidates []string, def string) string {
	for _, c := range candidates {
		if _, ok := p[c]; ok {
			return c
		}
	}
	return def
}

// fillRequired adds a schema value for every required argument not set.
func fillRequired(args map[string]any, schema map[string]any) {
	p := props(schema)
	f := filler{root: schema, budget: maxSchemaValues}
	for _, r := range required(schema) {
		if _, ok := args[r]; !ok {
			args[r] = f.fill(obj(p[r]), 1)
		}
	}
}

func absPath(p, workdir string) string {
	if p == "" || strings.HasPrefix(p, "/") || workdir == "" {
		return p
	}
	return path.Join(workdir, p)
}

// mapCall maps an abstract call onto the request's tools.
func mapCall(c Call, tools []tool, workdir string) (toolCall, error) {
	if c.Name != "" {
		return rawCall(c, tools), nil
	}
	names := func() []string {
		var n []string
		for _, t := range tools {
			n = append(n, t.name)
		}
		return n
	}
	switch c.Kind {
	case KindWrite, KindEdit:
		var t *tool
		if c.Kind == KindWrite {
			t = findTool(tools, writeTools, "write_file", "writefile")
		} else {
			t = findTool(tools, editTools)
		}
		if t != nil && t.kind == toolFunction {
			return fileCall(c, t, workdir), nil
		}
		if p := findTool(tools, patchTools); p != nil {
			return patchCall(c, p), nil
		}
		if s := findTool(tools, shellTools, "shell", "bash"); s != nil {
			return shellCall(s, fileCommand(c, absPath(c.Path, workdir)), workdir), nil
		}
	case KindShell:
		if s := findTool(tools, shellTools, "shell", "bash"); s != nil {
			return shellCall(s, c.Command, workdir), nil
		}
	}
	return toolCall{}, fmt.Errorf("no tool for a %s call among %v", c.Kind, names())
}

// rawCall sends a named call as given.
func rawCall(c Call, tools []tool) toolCall {
	kind := toolFunction
	if t := findTool(tools, []string{c.Name}); t != nil {
		kind = t.kind
	}
	var v any
	if len(c.Arguments) > 0 {
		_ = json.Unmarshal(c.Arguments, &v) // validated with the scenario
	}
	s, isString := v.(string)
	switch kind {
	case toolCustom:
		if !isString {
			s = string(compactJSON(c.Arguments, "{}"))
		}
		return toolCall{name: c.Name, kind: toolCustom, input: s}
	case toolLocalShell:
		var cmd []string
		for _, x := range arr(obj(v)["command"]) {
			cmd = append(cmd, str(x))
		}
		if isString {
			cmd = []string{"bash", "-lc", s}
		}
		return toolCall{name: c.Name, kind: toolLocalShell, command: cmd}
	}
	if isString {
		return toolCall{name: c.Name, kind: toolFunction, arguments: string(marshal(map[string]any{"input": s}))}
	}
	return toolCall{name: c.Name, namespace: c.Namespace, kind: toolFunction, arguments: string(compactJSON(c.Arguments, "{}"))}
}

// fileCall calls a write or edit tool, with the argument names its schema
// uses.
func fileCall(c Call, t *tool, workdir string) toolCall {
	p := props(t.schema)
	args := map[string]any{argName(p, pathArgs, "file_path"): absPath(c.Path, workdir)}
	if c.Kind == KindWrite {
		args[argName(p, contentArgs, "content")] = c.Content
	} else {
		oldKey := argName(p, oldArgs, "")
		edits := obj(p["edits"])
		if oldKey == "" && edits != nil { // edits: [{oldText, newText}] (pi, MultiEdit)
			ip := props(obj(edits["items"]))
			args["edits"] = []any{map[string]any{
				argName(ip, oldArgs, "oldText"): c.Old,
				argName(ip, newArgs, "newText"): c.New,
			}}
		} else {
			if oldKey == "" {
				oldKey = "old_string"
			}
			args[oldKey] = c.Old
			args[argName(p, newArgs, "new_string")] = c.New
		}
	}
	fillRequired(args, t.schema)
	return toolCall{name: t.name, kind: toolFunction, arguments: string(marshal(args))}
}

// patchCall writes or edits through apply_patch (a freeform tool, or a
// function with an input argument). The path stays as given: apply_patch
// resolves relative paths against the agent's cwd.
func patchCall(c Call, t *tool) toolCall {
	var b strings.Builder
	b.WriteString("*** Begin Patch\n")
	if c.Kind == KindWrite {
		fmt.Fprintf(&b, "*** Add File: %s\n", c.Path)
		for l := range strings.Lines(c.Content) {
			b.WriteString("+" + strings.TrimSuffix(l, "\n") + "\n")
		}
	} else {
		fmt.Fprintf(&b, "*** Update File: %s\n@@\n", c.Path)
		for l := range strings.Lines(c.Old) {
			b.WriteString("-" + strings.TrimSuffix(l, "\n") + "\n")
		}
		for l := range strings.Lines(c.New) {
			b.WriteString("+" + strings.TrimSuffix(l, "\n") + "\n")
		}
	}
	b.WriteString("*** End Patch\n")
	if t.kind == toolCustom {
		return toolCall{name: t.name, kind: toolCustom, input: b.String()}
	}
	args := map[string]any{argName(props(t.schema), []string{"input", "patch"}, "input"): b.String()}
	fillRequired(args, t.schema)
	return toolCall{name: t.name, kind: toolFunction, arguments: string(marshal(args))}
}

// shellCall runs command with a shell tool: a string command, or an argv
// (bash -lc) when the schema says array.
func shellCall(t *tool, command, workdir string) toolCall {
	argv := []string{"bash", "-lc", command}
	if t.kind == toolLocalShell {
		return toolCall{name: t.name, kind: toolLocalShell, command: argv}
	}
	if t.kind == toolCustom {
		return toolCall{name: t.name, kind: toolCustom, input: command}
	}
	p := props(t.schema)
	key := argName(p, commandArgs, "command")
	args := map[string]any{}
	if strings.ToLower(str(obj(p[key])["type"])) == "array" {
		args[key] = argv
	} else {
		args[key] = command
	}
	if _, ok := p["description"]; ok {
		args["description"] = "Run a shell command"
	}
	if workdir != "" {
		for _, r := range required(t.schema) {
			for _, d := range dirArgs {
				if r == d {
					args[r] = workdir
				}
			}
		}
	}
	fillRequired(args, t.schema)
	return toolCall{name: t.name, kind: toolFunction, arguments: string(marshal(args))}
}

// fileCommand is the shell command that does a write or an edit.
func fileCommand(c Call, p string) string {
	if c.Kind == KindWrite {
		return "printf %s " + shellQuote(c.Content) + " > " + shellQuote(p)
	}
	return "sed -i " + shellQuote("s/"+sedEscape(c.Old)+"/"+sedEscape(c.New)+"/") + " " + shellQuote(p)
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./@%+=:,-]+$`)

func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func sedEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '\\', '/', '.', '*', '[', ']', '^', '$', '&':
			b.WriteByte('\\')
		case '\n':
			b.WriteString(`\n`)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// compactJSON returns raw compacted, or def if raw is empty or invalid.
func compactJSON(raw json.RawMessage, def string) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage(def)
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return json.RawMessage(def)
	}
	return marshal(v)
}

package fakellm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultNoToolsText answers requests that offer no tools when the scenario
// sets no NoToolsText.
const DefaultNoToolsText = "Fake title"

// doneText answers a request that is past the end of the script.
const doneText = "done"

// Scenario is a script of model answers. It is plain data: JSON files
// load with LoadScenario, and mockllm.py scenario files load too.
type Scenario struct {
	// Name is informative; the name a scenario is selected by is its key
	// in Options.Scenarios (or its built-in name).
	Name string `json:"name,omitempty"`
	// Turns are the answers, in order (see the package doc).
	Turns []Turn `json:"turns"`
	// NoToolsText answers requests that offer no tools (title
	// generation). Empty means DefaultNoToolsText.
	NoToolsText string `json:"no_tools_text,omitempty"`
	// Workdir, when set, makes relative paths absolute instead of the cwd
	// found in the agent's prompt.
	Workdir string `json:"workdir,omitempty"`
}

// Turn is one model answer: thinking, then text, then tool calls; or an
// upstream error instead.
type Turn struct {
	// Text is streamed in two chunks (split in the middle).
	Text string `json:"text,omitempty"`
	// Chunks, instead of Text, are streamed exactly as given.
	Chunks []string `json:"chunks,omitempty"`
	// Thinking is streamed before the text as a thinking block (Anthropic),
	// a reasoning item (Responses), reasoning_content (Chat) or thought
	// parts (Gemini).
	Thinking string `json:"thinking,omitempty"`
	// Calls are made in one answer (parallel tool calls). A turn with
	// calls is a tool round; a turn without calls is a final answer.
	// In JSON, "call": {…} is accepted for a single call.
	Calls []Call `json:"calls,omitempty"`
	// Error, when set, is returned instead of an answer.
	Error *Error `json:"error,omitempty"`
	// Delay is slept before each streamed chunk (before a non-streamed
	// answer: once per chunk it would have had).
	Delay Duration `json:"delay,omitempty"`
}

// Call is an abstract tool call, mapped onto the tools a request offers.
// Either Kind is set (write, shell or edit) or Name (a raw call sent as
// given, with Arguments).
type Call struct {
	Kind    string `json:"kind,omitempty"`    // "write", "shell", "edit"
	Path    string `json:"path,omitempty"`    // write, edit
	Content string `json:"content,omitempty"` // write
	Command string `json:"command,omitempty"` // shell
	Old     string `json:"old,omitempty"`     // edit
	New     string `json:"new,omitempty"`     // edit

	Name string `json:"name,omitempty"`
	// Namespace of a raw call, for APIs whose tools come in namespaces
	// (the Responses API's namespace tools, e.g. Codex's MCP tools
	// "mcp__SERVER" holding TOOL): sent as the call's namespace; other
	// APIs ignore it.
	Namespace string `json:"namespace,omitempty"`
	// Arguments of a raw call: a JSON object, or a JSON string that is the
	// input of a freeform (custom) tool.
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Call kinds.
const (
	KindWrite = "write"
	KindShell = "shell"
	KindEdit  = "edit"
)

// Error is an upstream error, returned with the provider's error body.
type Error struct {
	// Status is the HTTP status, 400…599 (e.g. 429, 500, 529).
	Status int `json:"status"`
	// Message defaults to a description of the status.
	Message string `json:"message,omitempty"`
	// Type overrides the provider's error type: Anthropic error.type,
	// OpenAI error.type, Gemini error.status.
	Type string `json:"type,omitempty"`
	// Retry lets SDKs retry. By default the answer carries
	// "x-should-retry: false", which the Anthropic and OpenAI SDKs honour,
	// so that a test does not wait through a retry loop.
	Retry bool `json:"retry,omitempty"`
}

// Duration is a time.Duration that reads and writes JSON as a string such
// as "50ms"; a bare JSON number is milliseconds.
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads "50ms" or 50 (milliseconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	ms, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("duration: want a string such as \"50ms\" or milliseconds, got %s", b)
	}
	*d = Duration(ms * float64(time.Millisecond))
	return nil
}

// UnmarshalJSON accepts "call" (one call, as in mockllm.py files) besides
// "calls".
func (t *Turn) UnmarshalJSON(b []byte) error {
	type plain Turn
	var v struct {
		plain
		Call *Call `json:"call,omitempty"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	*t = Turn(v.plain)
	if v.Call != nil {
		t.Calls = append([]Call{*v.Call}, t.Calls...)
	}
	return nil
}

// final reports whether the turn ends the answer to a user prompt.
func (t *Turn) final() bool { return len(t.Calls) == 0 }

// chunks returns the pieces of text to stream.
func (t *Turn) chunks() []string {
	if len(t.Chunks) > 0 {
		return t.Chunks
	}
	return splitN(t.Text, 2)
}

// Validate reports the first problem that would make the scenario
// misbehave.
func (s *Scenario) Validate() error {
	if len(s.Turns) == 0 {
		return errors.New("scenario: no turns")
	}
	for i := range s.Turns {
		t := &s.Turns[i]
		where := fmt.Sprintf("scenario: turn %d", i)
		if t.Text != "" && len(t.Chunks) > 0 {
			return fmt.Errorf("%s: text and chunks are exclusive", where)
		}
		if t.Delay < 0 {
			return fmt.Errorf("%s: negative delay", where)
		}
		if t.Error != nil {
			if t.Error.Status < 400 || t.Error.Status > 599 {
				return fmt.Errorf("%s: error status %d not in 400…599", where, t.Error.Status)
			}
			if t.Text != "" || len(t.Chunks) > 0 || t.Thinking != "" || len(t.Calls) > 0 {
				return fmt.Errorf("%s: an error turn has nothing else", where)
			}
			continue
		}
		if t.Text == "" && len(t.Chunks) == 0 && t.Thinking == "" && len(t.Calls) == 0 {
			return fmt.Errorf("%s: empty (set text, chunks, thinking, calls or error)", where)
		}
		for j, c := range t.Calls {
			if err := c.validate(); err != nil {
				return fmt.Errorf("%s: call %d: %w", where, j, err)
			}
		}
	}
	return nil
}

func (c *Call) validate() error {
	switch {
	case c.Name != "" && c.Kind != "":
		return errors.New("kind and name are exclusive")
	case c.Name != "":
		if len(c.Arguments) > 0 {
			var v any
			if err := json.Unmarshal(c.Arguments, &v); err != nil {
				return fmt.Errorf("arguments: %w", err)
			}
			switch v.(type) {
			case map[string]any, string:
			default:
				return errors.New("arguments: want a JSON object or string")
			}
		}
		return nil
	case c.Kind == KindWrite || c.Kind == KindEdit:
		if c.Path == "" {
			return fmt.Errorf("%s: no path", c.Kind)
		}
		if c.Kind == KindEdit && c.Old == "" {
			return errors.New("edit: no old text")
		}
		return nil
	case c.Kind == KindShell:
		if c.Command == "" {
			return errors.New("shell: no command")
		}
		return nil
	case c.Kind == "":
		return errors.New("neither kind nor name")
	default:
		return fmt.Errorf("unknown kind %q (want write, shell or edit)", c.Kind)
	}
}

// pick returns the turn that answers the prompt-th user prompt after round
// tool rounds, and its index in Turns (-1 past the end of the script).
func (s *Scenario) pick(prompt, round int) (Turn, int) {
	var groups [][]int // indexes into Turns
	var cur []int
	for i := range s.Turns {
		cur = append(cur, i)
		if s.Turns[i].final() {
			groups = append(groups, cur)
			cur = nil
		}
	}
	if len(cur) > 0 {
		groups = append(groups, cur)
	}
	if len(groups) == 0 {
		return Turn{Text: doneText}, -1
	}
	g := groups[min(prompt, len(groups)-1)]
	if round < len(g) {
		return s.Turns[g[round]], g[round]
	}
	return Turn{Text: doneText}, -1
}

func (s *Scenario) noToolsText() string {
	if s.NoToolsText != "" {
		return s.NoToolsText
	}
	return DefaultNoToolsText
}

// clone returns a deep copy.
func (s *Scenario) clone() *Scenario {
	c := *s
	c.Turns = slices.Clone(s.Turns)
	for i := range c.Turns {
		t := &c.Turns[i]
		t.Chunks = slices.Clone(t.Chunks)
		t.Calls = slices.Clone(t.Calls)
		for j := range t.Calls {
			t.Calls[j].Arguments = bytes.Clone(t.Calls[j].Arguments)
		}
		if t.Error != nil {
			e := *t.Error
			t.Error = &e
		}
	}
	return &c
}

// LoadScenario reads a scenario from a JSON file. Unknown fields are an
// error. The name defaults to the file name without its extension.
func LoadScenario(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := ParseScenario(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.Name == "" {
		s.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return s, nil
}

// ParseScenario decodes and validates a JSON scenario.
func ParseScenario(b []byte) (*Scenario, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s Scenario
	if err := dec.Decode(&s); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the scenario")
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Built-in scenario names.
const (
	ScenarioText       = "text"
	ScenarioWrite      = "write"
	ScenarioShell      = "shell"
	ScenarioPermission = "permission"
	ScenarioEdit       = "edit"
	ScenarioMulti      = "multi"
	ScenarioLong       = "long"
	ScenarioError429   = "error429"
	ScenarioError500   = "error500"
	ScenarioSlow       = "slow"
	ScenarioThinking   = "thinking"
)

// Sizes of the long and slow scenarios. The slow one lasts 20 s: tests cut
// it mid-stream (an interrupt, a kill) once its first delta arrives, and on
// a loaded machine an agent's first delta can reach the client seconds
// after the fake LLM sent it; a stream that has ended by then leaves
// nothing to cut.
const (
	LongChunks = 2000
	SlowChunks = 400
	SlowDelay  = 50 * time.Millisecond
)

func builtins() map[string]*Scenario {
	write := Call{Kind: KindWrite, Path: "hello.txt", Content: "hi"}
	done := Turn{Text: doneText}
	long := make([]string, LongChunks)
	for i := range long {
		long[i] = fmt.Sprintf("word%04d ", i+1)
	}
	slow := make([]string, SlowChunks)
	for i := range slow {
		slow[i] = fmt.Sprintf("tick%03d ", i+1)
	}
	return map[string]*Scenario{
		ScenarioText:  {Turns: []Turn{done}},
		ScenarioWrite: {Turns: []Turn{{Calls: []Call{write}}, done}},
		ScenarioShell: {Turns: []Turn{{Calls: []Call{{Kind: KindShell, Command: "printf hi > hello.txt"}}}, done}},
		ScenarioPermission: {Turns: []Turn{
			{Calls: []Call{{Kind: KindShell, Command: "printf approved > approved.txt"}}}, done}},
		ScenarioEdit: {Turns: []Turn{
			{Calls: []Call{write}},
			{Calls: []Call{{Kind: KindEdit, Path: "hello.txt", Old: "hi", New: "hello"}}},
			done}},
		// First prompt: write, then "done"; second prompt: "second answer".
		ScenarioMulti: {Turns: []Turn{{Calls: []Call{write}}, done, {Text: "second answer"}}},
		ScenarioLong:  {Turns: []Turn{{Chunks: long}}},
		ScenarioError429: {Turns: []Turn{{Error: &Error{Status: 429,
			Message: "fakellm: rate limited (scenario error429)"}}}},
		ScenarioError500: {Turns: []Turn{{Error: &Error{Status: 500,
			Message: "fakellm: internal error (scenario error500)"}}}},
		ScenarioSlow: {Turns: []Turn{{Chunks: slow, Delay: Duration(SlowDelay)}}},
		ScenarioThinking: {Turns: []Turn{{Thinking: "The user wants an answer. I will say done.",
			Text: doneText}}},
	}
}

// Builtin returns a fresh copy of a built-in scenario.
func Builtin(name string) (*Scenario, bool) {
	s, ok := builtins()[name]
	if !ok {
		return nil, false
	}
	s.Name = name
	return s, true
}

// BuiltinNames lists the built-in scenarios, sorted.
func BuiltinNames() []string {
	var names []string
	for n := range builtins() {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// splitN splits s into up to n pieces of about the same number of runes.
func splitN(s string, n int) []string {
	r := []rune(s)
	if len(r) < 2 || n < 2 {
		if s == "" {
			return nil
		}
		return []string{s}
	}
	size := (len(r) + n - 1) / n
	var out []string
	for i := 0; i < len(r); i += size {
		out = append(out, string(r[i:min(i+size, len(r))]))
	}
	return out
}

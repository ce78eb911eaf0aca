package mock

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/agentbox/agentbox/event"
)

// Kind names what a Step does.
type Kind string

// Step kinds.
const (
	// KindText streams an assistant message: item.started, one item.delta
	// per Chunk runes of Text, item.completed.
	KindText Kind = "text"
	// KindReasoning streams Text as a reasoning item.
	KindReasoning Kind = "reasoning"
	// KindTool reports a tool_call item with Name, Input and Output (or
	// Error). Nothing is executed.
	KindTool Kind = "tool"
	// KindCommand really runs /bin/sh -c Command in the session's working
	// directory, streams its combined output as output deltas and records
	// the exit code. It fails after Timeout (default 60s).
	KindCommand Kind = "command"
	// KindWrite really writes Content to Path, which must be relative and
	// stay inside the working directory, and reports a file_change item
	// with a unified diff.
	KindWrite Kind = "write"
	// KindPermission makes the next tool, command or write step risky: it
	// asks the host for permission first (subject to the permission mode).
	// Text, if set, is the request's title.
	KindPermission Kind = "permission"
	// KindQuestion asks the user Text (with Options, FreeText) and replies
	// with the answer as a message.
	KindQuestion Kind = "question"
	// KindPlan reports a plan item with Entries.
	KindPlan Kind = "plan"
	// KindError emits an error event (Code, Text as message, Retryable) and
	// ends the turn with stop reason "error"; later steps do not run. With
	// Fatal, Prompt instead returns an error and emits nothing.
	KindError Kind = "error"
	// KindSleep waits Duration, or until the turn is interrupted.
	KindSleep Kind = "sleep"
	// KindLong streams a message of Count deltas, for stream tests.
	KindLong Kind = "long"
	// KindNative emits a native event of NativeType with Payload.
	KindNative Kind = "native"
)

var kinds = []Kind{KindText, KindReasoning, KindTool, KindCommand, KindWrite, KindPermission, KindQuestion, KindPlan, KindError, KindSleep, KindLong, KindNative}

// Step is one action of a mock script. Kind selects the action; the other
// fields are used by the kinds noted on them (see the Kind constants).
type Step struct {
	Kind Kind `json:"kind"`

	// Text is the text of text and reasoning, the prompt of question, the
	// message of error and the title of permission.
	Text string `json:"text,omitempty"`
	// Chunk is the number of runes per delta of text and reasoning
	// (default 16).
	Chunk int `json:"chunk,omitempty"`
	// Delay is the pause before each delta of text, reasoning and long.
	Delay Duration `json:"delay,omitempty"`

	// tool
	Name   string          `json:"name,omitempty"`
	Input  json.RawMessage `json:"input,omitempty"`
	Output string          `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`

	// command
	Command string   `json:"command,omitempty"`
	Timeout Duration `json:"timeout,omitempty"`

	// write
	Path    string `json:"path,omitempty"`
	Content string `json:"content,omitempty"`

	// plan
	Entries []event.PlanEntry `json:"entries,omitempty"`

	// question
	Options  []event.QuestionOption `json:"options,omitempty"`
	FreeText bool                   `json:"free_text,omitempty"`

	// error
	Code      string `json:"code,omitempty"`
	Retryable bool   `json:"retryable,omitempty"`
	Fatal     bool   `json:"fatal,omitempty"`

	// sleep
	Duration Duration `json:"duration,omitempty"`

	// long
	Count int `json:"count,omitempty"`

	// native
	NativeType string          `json:"native_type,omitempty"`
	Payload    json.RawMessage `json:"payload,omitempty"`
}

// Duration is a time.Duration that reads from JSON as a Go duration string
// ("1.5s") or a number of milliseconds, and writes as a string.
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON implements json.Unmarshaler.
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
	var ms int64
	if err := json.Unmarshal(b, &ms); err != nil {
		return errors.New("a duration is a string such as \"1.5s\" or a number of milliseconds")
	}
	*d = Duration(time.Duration(ms) * time.Millisecond)
	return nil
}

// Limits that keep a script from exhausting the daemon.
const (
	maxLongCount   = 1_000_000
	defaultChunk   = 16
	defaultTimeout = 60 * time.Second
)

// ScriptPrompt returns the user text that makes the mock agent run steps,
// for tests and demos of other packages. It panics if a step's Input or
// Payload is not valid JSON.
func ScriptPrompt(steps ...Step) string {
	b, err := json.Marshal(steps)
	if err != nil {
		panic(fmt.Sprintf("mock: marshal steps: %v", err)) // cannot happen for valid RawMessages
	}
	return scriptCommand + " " + string(b)
}

// The commands a turn's text can start with.
const (
	scriptCommand   = "/mock"
	scenarioCommand = "/scenario"
)

// parseScript reads the JSON array of steps of a /mock prompt.
func parseScript(s string) ([]Step, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	var steps []Step
	if err := dec.Decode(&steps); err != nil {
		return nil, fmt.Errorf("invalid /mock script: %w", err)
	}
	if dec.More() {
		return nil, errors.New("invalid /mock script: text after the JSON array")
	}
	if err := validate(steps); err != nil {
		return nil, fmt.Errorf("invalid /mock script: %w", err)
	}
	return steps, nil
}

// validate checks each step for the fields its kind needs.
func validate(steps []Step) error {
	if len(steps) == 0 {
		return errors.New("no steps")
	}
	for i, st := range steps {
		var problem string
		switch st.Kind {
		case KindText, KindReasoning, KindQuestion:
			if st.Text == "" {
				problem = "needs text"
			}
		case KindTool:
			if st.Name == "" {
				problem = "needs name"
			}
		case KindCommand:
			if strings.TrimSpace(st.Command) == "" {
				problem = "needs command"
			}
		case KindWrite:
			if st.Path == "" {
				problem = "needs path"
			}
		case KindPlan:
			if len(st.Entries) == 0 {
				problem = "needs entries"
			}
		case KindSleep:
			if st.Duration <= 0 {
				problem = "needs a positive duration"
			}
		case KindLong:
			if st.Count <= 0 || st.Count > maxLongCount {
				problem = fmt.Sprintf("needs a count between 1 and %d", maxLongCount)
			}
		case KindPermission, KindError, KindNative:
		default:
			problem = fmt.Sprintf("unknown kind (want one of %s)", joinKinds())
		}
		switch {
		case problem != "":
		case st.Chunk < 0 || st.Delay < 0 || st.Timeout < 0:
			problem = "chunk, delay and timeout cannot be negative"
		case len(st.Input) > 0 && !json.Valid(st.Input), len(st.Payload) > 0 && !json.Valid(st.Payload):
			problem = "input and payload must be JSON"
		}
		if problem != "" {
			return fmt.Errorf("step %d (%q): %s", i, st.Kind, problem)
		}
	}
	return nil
}

func joinKinds() string {
	s := make([]string, len(kinds))
	for i, k := range kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// Default texts of the scenarios.
const (
	defaultCommand = `echo "hello from the mock agent"; echo "this line went to stderr" >&2`
	defaultPath    = "mock.txt"
	defaultContent = "Hello from the mock agent.\nThis file was written by the write scenario.\n"
	helloText      = "Hello! I am the mock agent. I answer from a script, without any language model, so every run of this scenario looks the same."
)

// scenarios are the named scripts of /scenario NAME [ARG].
var scenarios = map[string]func(arg string) ([]Step, error){
	"text": func(arg string) ([]Step, error) {
		return []Step{{Kind: KindText, Text: orDefault(arg, helloText)}}, nil
	},
	"reasoning": func(string) ([]Step, error) {
		return []Step{
			{Kind: KindReasoning, Text: "The user asked for the reasoning scenario. Nothing here needs a tool, so I think briefly and answer."},
			{Kind: KindText, Text: "I thought about it first; this is the answer."},
		}, nil
	},
	"tool": func(string) ([]Step, error) {
		return []Step{
			{Kind: KindTool, Name: "read_file", Input: json.RawMessage(`{"path":"README.md"}`), Output: "# Example\n\nThe mock agent made this content up; no file was read.\n"},
			{Kind: KindText, Text: "The file starts with a heading called Example."},
		}, nil
	},
	"command": func(arg string) ([]Step, error) {
		c := orDefault(arg, defaultCommand)
		return []Step{{Kind: KindText, Text: "I will run a command."}, {Kind: KindCommand, Command: c}}, nil
	},
	"write": func(arg string) ([]Step, error) {
		p := orDefault(arg, defaultPath)
		return []Step{{Kind: KindText, Text: "I will write " + p + "."}, {Kind: KindWrite, Path: p, Content: defaultContent}}, nil
	},
	"permission-write": func(arg string) ([]Step, error) {
		p := orDefault(arg, defaultPath)
		return []Step{
			{Kind: KindText, Text: "I need your permission to write " + p + "."},
			{Kind: KindPermission},
			{Kind: KindWrite, Path: p, Content: defaultContent},
		}, nil
	},
	"permission-command": func(arg string) ([]Step, error) {
		return []Step{
			{Kind: KindText, Text: "I need your permission to run a command."},
			{Kind: KindPermission},
			{Kind: KindCommand, Command: orDefault(arg, defaultCommand)},
		}, nil
	},
	"question": func(string) ([]Step, error) {
		return []Step{{Kind: KindQuestion, Text: "Which colour should the mock agent use?", FreeText: true, Options: []event.QuestionOption{
			{ID: "red", Label: "Red"}, {ID: "green", Label: "Green"}, {ID: "blue", Label: "Blue"},
		}}}, nil
	},
	"plan": func(string) ([]Step, error) {
		return []Step{
			{Kind: KindPlan, Entries: []event.PlanEntry{
				{Content: "Read the code", Status: event.PlanCompleted},
				{Content: "Make the change", Status: event.PlanInProgress, Priority: "high"},
				{Content: "Run the tests", Status: event.PlanPending},
			}},
			{Kind: KindText, Text: "That is the plan."},
		}, nil
	},
	"error": func(string) ([]Step, error) {
		return []Step{
			{Kind: KindText, Text: "Something is about to go wrong."},
			{Kind: KindError, Code: "mock_error", Text: "The mock agent failed on purpose (scenario error)."},
		}, nil
	},
	"long": func(arg string) ([]Step, error) {
		n := 10_000
		if arg != "" {
			v, err := strconv.Atoi(arg)
			if err != nil || v <= 0 || v > maxLongCount {
				return nil, fmt.Errorf("long: the argument is a number of deltas between 1 and %d", maxLongCount)
			}
			n = v
		}
		return []Step{{Kind: KindLong, Count: n}}, nil
	},
	"slow": func(arg string) ([]Step, error) {
		d := 200 * time.Millisecond
		if arg != "" {
			v, err := time.ParseDuration(arg)
			if err != nil || v < 0 {
				return nil, errors.New("slow: the argument is the delay before each delta, such as 200ms")
			}
			d = v
		}
		return []Step{{Kind: KindText, Chunk: 4, Delay: Duration(d), Text: "This reply arrives slowly, a few characters at a time."}}, nil
	},
	"sleep": func(arg string) ([]Step, error) {
		d := 5 * time.Second
		if arg != "" {
			v, err := time.ParseDuration(arg)
			if err != nil || v <= 0 {
				return nil, errors.New("sleep: the argument is a duration, such as 5s")
			}
			d = v
		}
		return []Step{{Kind: KindSleep, Duration: Duration(d)}, {Kind: KindText, Text: "I slept for " + d.String() + "."}}, nil
	},
	"native": func(string) ([]Step, error) {
		return []Step{{Kind: KindNative, NativeType: "mock/status", Payload: json.RawMessage(`{"state":"thinking","progress":0.5}`)}}, nil
	},
	"all": func(string) ([]Step, error) {
		return []Step{
			{Kind: KindReasoning, Text: "The user wants to see a bit of everything. I make a plan, look around, change a file and ask before running a command."},
			{Kind: KindPlan, Entries: []event.PlanEntry{
				{Content: "Look at the workspace", Status: event.PlanInProgress},
				{Content: "Write " + defaultPath, Status: event.PlanPending},
				{Content: "Run a command, with permission", Status: event.PlanPending},
			}},
			{Kind: KindTool, Name: "list_files", Input: json.RawMessage(`{"path":"."}`), Output: "(the mock agent does not really list files)\n"},
			{Kind: KindCommand, Command: "pwd"},
			{Kind: KindWrite, Path: defaultPath, Content: defaultContent},
			{Kind: KindPermission},
			{Kind: KindCommand, Command: defaultCommand},
			{Kind: KindQuestion, Text: "Shall I finish?", Options: []event.QuestionOption{{ID: "yes", Label: "Yes"}, {ID: "no", Label: "No"}}},
			{Kind: KindNative, NativeType: "mock/status", Payload: json.RawMessage(`{"state":"done"}`)},
			{Kind: KindPlan, Entries: []event.PlanEntry{
				{Content: "Look at the workspace", Status: event.PlanCompleted},
				{Content: "Write " + defaultPath, Status: event.PlanCompleted},
				{Content: "Run a command, with permission", Status: event.PlanCompleted},
			}},
			{Kind: KindText, Text: "All done: that was a bit of everything the mock agent can do."},
		}, nil
	},
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func scenarioNames() string {
	names := make([]string, 0, len(scenarios))
	for n := range scenarios {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// script chooses the steps of a turn from the user's text: a /mock script,
// a /scenario, or else an echo of the text.
func script(text string) ([]Step, error) {
	text = strings.TrimSpace(text)
	if rest, ok := cutCommand(text, scriptCommand); ok {
		return parseScript(rest)
	}
	if rest, ok := cutCommand(text, scenarioCommand); ok {
		name, arg := rest, ""
		if i := strings.IndexFunc(rest, unicode.IsSpace); i >= 0 {
			name, arg = rest[:i], strings.TrimSpace(rest[i:])
		}
		f, ok := scenarios[name]
		if !ok {
			return nil, fmt.Errorf("unknown scenario %q; the scenarios are: %s", name, scenarioNames())
		}
		steps, err := f(arg)
		if err != nil {
			return nil, err
		}
		return steps, validate(steps)
	}
	if text == "" {
		return []Step{{Kind: KindText, Text: "You sent no text I can read."}}, nil
	}
	return []Step{{Kind: KindText, Text: "You said: " + text}}, nil
}

// cutCommand returns the rest of text after cmd when text is that command,
// alone or followed by white space.
func cutCommand(text, cmd string) (string, bool) {
	rest, ok := strings.CutPrefix(text, cmd)
	if !ok || (rest != "" && !unicode.IsSpace(rune(rest[0]))) {
		return "", false
	}
	return strings.TrimSpace(rest), true
}

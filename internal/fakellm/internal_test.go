package fakellm

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

func TestPosition(t *testing.T) {
	const (
		U = entryUser
		R = entryToolResult
		A = entryAssistant
		C = entryCall
		O = entryOther
	)
	for _, tc := range []struct {
		h            []entry
		prompt, turn int
	}{
		{nil, 0, 0},
		{[]entry{O, U}, 0, 0},
		{[]entry{U, U, U}, 0, 0}, // leading context messages (Codex)
		{[]entry{U, C, R}, 0, 1},
		{[]entry{U, C, R, C, R}, 0, 2},
		{[]entry{U, A, C, R}, 0, 1},    // text item then call item: one answer
		{[]entry{U, C, A, R}, 0, 1},    // call item then text item: one answer
		{[]entry{U, A, A, C, R}, 0, 1}, // reasoning, message, call
		{[]entry{U, C, R, A, U}, 1, 0},
		{[]entry{U, C, R, A, U, C, R}, 1, 1},
		{[]entry{U, A, U, A, U}, 2, 0},
		{[]entry{U, C, R, A, O, U}, 1, 0},
		{[]entry{U, C, R, U, C, R}, 0, 1}, // a user message between rounds restarts the count
		{[]entry{C, R, U}, 0, 0},
	} {
		p, tr := position(tc.h)
		if p != tc.prompt || tr != tc.turn {
			t.Errorf("%v: prompt %d turn %d, want %d %d", tc.h, p, tr, tc.prompt, tc.turn)
		}
	}
}

func TestPick(t *testing.T) {
	c := func(cmd string) Turn { return Turn{Calls: []Call{{Kind: KindShell, Command: cmd}}} }
	sc := &Scenario{Turns: []Turn{c("a"), {Text: "A"}, {Text: "B"}, c("c"), c("d")}}
	for _, tc := range []struct {
		prompt, turn, step int
	}{
		{0, 0, 0}, {0, 1, 1}, {0, 2, -1},
		{1, 0, 2}, {1, 1, -1},
		{2, 0, 3}, {2, 1, 4}, {2, 2, -1},
		{9, 0, 3}, // past the last group: the last group again
	} {
		got, step := sc.pick(tc.prompt, tc.turn)
		if step != tc.step {
			t.Errorf("pick(%d, %d) = step %d, want %d", tc.prompt, tc.turn, step, tc.step)
		}
		if step == -1 && got.Text != doneText {
			t.Errorf("pick(%d, %d) past the end = %+v", tc.prompt, tc.turn, got)
		}
	}
}

func TestFillSchema(t *testing.T) {
	for _, tc := range []struct{ schema, want string }{
		{`{}`, `"fake"`},
		{`{"type":"string","enum":["b","a"]}`, `"b"`},
		{`{"const":3}`, `3`},
		{`{"type":"integer"}`, `1`},
		{`{"type":"integer","minimum":0}`, `1`},
		{`{"type":"integer","minimum":5,"maximum":9}`, `5`},
		{`{"type":"number","exclusiveMinimum":2.5}`, `3`},
		{`{"type":"integer","maximum":0}`, `0`},
		{`{"type":["null","boolean"]}`, `false`},
		{`{"anyOf":[{"type":"null"},{"type":"integer"}]}`, `1`},
		{`{"type":"array","items":{"type":"string"},"minItems":2}`, `["fake","fake"]`},
		{`{"type":"OBJECT","properties":{"s":{"type":"STRING"},"n":{"type":"INTEGER"}}}`, `{"n":1,"s":"fake"}`},
		{`{"$defs":{"x":{"type":"boolean"}},"type":"object","properties":{"a":{"$ref":"#/$defs/x"}}}`, `{"a":false}`},
		{`{"allOf":[{"properties":{"a":{"type":"integer"}}},{"type":"object"}]}`, `{"a":1}`},
	} {
		var s map[string]any
		if err := json.Unmarshal([]byte(tc.schema), &s); err != nil {
			t.Fatal(err)
		}
		if got := string(marshal(fillSchema(s))); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.schema, got, tc.want)
		}
	}
	// A recursive schema with wide arrays stays bounded.
	var s map[string]any
	_ = json.Unmarshal([]byte(`{"type":"object","properties":{"a":{"$ref":"#"},"b":{"type":"array","minItems":16,"items":{"$ref":"#"}}}}`), &s)
	if n := len(marshal(fillSchema(s))); n > 1<<20 {
		t.Errorf("recursive schema: %d bytes", n)
	}
}

func TestSplitN(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want []string
	}{
		{"", 2, nil},
		{"a", 2, []string{"a"}},
		{"done", 2, []string{"do", "ne"}},
		{"héllo", 2, []string{"hél", "lo"}},
		{"abcdefg", 3, []string{"abc", "def", "g"}},
	} {
		if got := splitN(tc.s, tc.n); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("splitN(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

func TestGuessCwd(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"system":"x\n - Primary working directory: /a/b\n - Is a git repository"}`, "/a/b"},
		{`{"input":[{"content":[{"text":"<environment_context>\n  <cwd>/c d/e</cwd>"}]}]}`, "/c d/e"},
		{`{"messages":[{"content":"Working directory: /x/y."}]}`, "/x/y"},
		{`{"systemInstruction":{"parts":[{"text":"- **Workspace Directories:**\n  - /g/w\n"}]}}`, "/g/w"},
		{`{"messages":[{"content":"cwd: /q"}]}`, "/q"},
		{`{"messages":[{"content":"no directory here"}]}`, ""},
		// The system prompt wins over what a tool printed later.
		{`{"messages":[{"content":"Working directory: /from/tool"}],"system":"Working directory: /from/system"}`, "/from/system"},
		// Tool descriptions are not the agent's cwd.
		{`{"tools":[{"description":"Working directory: /not/this"}]}`, ""},
	} {
		var b map[string]any
		if err := json.Unmarshal([]byte(tc.body), &b); err != nil {
			t.Fatal(err)
		}
		if got := guessCwd(b); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.body, got, tc.want)
		}
	}
}

func TestRedactHelpers(t *testing.T) {
	h := http.Header{"Authorization": {"Bearer k"}, "X-Api-Key": {"k"}, "X-Auth-Token": {"k"},
		"Anthropic-Version": {"2023-06-01"}, "X-Stainless-Os": {"Linux"}}
	r := redactHeader(h)
	for _, k := range []string{"Authorization", "X-Api-Key", "X-Auth-Token"} {
		if r.Get(k) != Redacted {
			t.Errorf("%s not redacted", k)
		}
	}
	for _, k := range []string{"Anthropic-Version", "X-Stainless-Os"} {
		if r.Get(k) != h.Get(k) {
			t.Errorf("%s redacted", k)
		}
	}
	if h.Get("Authorization") != "Bearer k" {
		t.Error("the original header changed")
	}
	for in, want := range map[string]string{
		"":                        "",
		"beta=true":               "beta=true",
		"alt=sse&key=s":           "alt=sse&key=REDACTED",
		"access_token=s&x=1":      "access_token=REDACTED&x=1",
		"%zz":                     Redacted,
		"client_secret=s":         "client_secret=REDACTED",
		"api-version=2024-10-21":  "api-version=2024-10-21",
		"key=a&key=b&alt=sse":     "alt=sse&key=REDACTED&key=REDACTED",
		"sig=s&se=2025-01-01":     "se=2025-01-01&sig=REDACTED",
		"x-goog-api-key=s&alt=ss": "alt=ss&x-goog-api-key=REDACTED",
	} {
		if got := redactQuery(in); got != want {
			t.Errorf("redactQuery(%q) = %q, want %q", in, got, want)
		}
	}
	req, _ := http.NewRequest("POST", "http://x/v1?key=q", strings.NewReader(""))
	if apiKey(req) != "q" {
		t.Error("query key")
	}
	req.Header.Set("Authorization", "Bearer  tok ")
	if apiKey(req) != "tok" {
		t.Errorf("bearer: %q", apiKey(req))
	}
}

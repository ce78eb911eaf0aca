package fakellm_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/fakellm"
)

func call(name, args string) gotCall {
	var m map[string]any
	if err := json.Unmarshal([]byte(args), &m); err != nil {
		panic(err)
	}
	return gotCall{Name: name, Args: m}
}

func custom(name, input string) gotCall { return gotCall{Name: name, Input: input} }

// expectation is what each abstract call becomes with an agent's tools;
// the argument names agree with the tool inputs in the recorded
// transcripts (see testdata/tools.json).
type expectation struct {
	write, shellHi, permission, edit gotCall
}

var expectations = map[string]expectation{
	"claude": {
		write:      call("Write", `{"file_path":"/w/proj/hello.txt","content":"hi"}`),
		shellHi:    call("Bash", `{"command":"printf hi > hello.txt","description":"Run a shell command"}`),
		permission: call("Bash", `{"command":"printf approved > approved.txt","description":"Run a shell command"}`),
		edit:       call("Edit", `{"file_path":"/w/proj/hello.txt","old_string":"hi","new_string":"hello"}`),
	},
	"codex": {
		write:      custom("apply_patch", "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n"),
		shellHi:    call("exec_command", `{"cmd":"printf hi > hello.txt"}`),
		permission: call("exec_command", `{"cmd":"printf approved > approved.txt"}`),
		edit:       custom("apply_patch", "*** Begin Patch\n*** Update File: hello.txt\n@@\n-hi\n+hello\n*** End Patch\n"),
	},
	"codex-exec": {
		write:      call("exec_command", `{"cmd":"printf %s hi > /w/proj/hello.txt"}`),
		shellHi:    call("exec_command", `{"cmd":"printf hi > hello.txt"}`),
		permission: call("exec_command", `{"cmd":"printf approved > approved.txt"}`),
		edit:       call("exec_command", `{"cmd":"sed -i s/hi/hello/ /w/proj/hello.txt"}`),
	},
	"codex-shell": {
		write:      call("shell", `{"command":["bash","-lc","printf %s hi > /w/proj/hello.txt"],"workdir":"/w/proj"}`),
		shellHi:    call("shell", `{"command":["bash","-lc","printf hi > hello.txt"],"workdir":"/w/proj"}`),
		permission: call("shell", `{"command":["bash","-lc","printf approved > approved.txt"],"workdir":"/w/proj"}`),
		edit:       call("shell", `{"command":["bash","-lc","sed -i s/hi/hello/ /w/proj/hello.txt"],"workdir":"/w/proj"}`),
	},
	"opencode": {
		write:      call("write", `{"filePath":"/w/proj/hello.txt","content":"hi"}`),
		shellHi:    call("bash", `{"command":"printf hi > hello.txt","description":"Run a shell command"}`),
		permission: call("bash", `{"command":"printf approved > approved.txt","description":"Run a shell command"}`),
		edit:       call("edit", `{"filePath":"/w/proj/hello.txt","oldString":"hi","newString":"hello"}`),
	},
	"pi": {
		write:      call("write", `{"path":"/w/proj/hello.txt","content":"hi"}`),
		shellHi:    call("bash", `{"command":"printf hi > hello.txt"}`),
		permission: call("bash", `{"command":"printf approved > approved.txt"}`),
		edit:       call("edit", `{"path":"/w/proj/hello.txt","edits":[{"oldText":"hi","newText":"hello"}]}`),
	},
	"gemini": {
		write:      call("write_file", `{"file_path":"/w/proj/hello.txt","content":"hi"}`),
		shellHi:    call("run_shell_command", `{"command":"printf hi > hello.txt","description":"Run a shell command"}`),
		permission: call("run_shell_command", `{"command":"printf approved > approved.txt","description":"Run a shell command"}`),
		edit:       call("replace", `{"file_path":"/w/proj/hello.txt","instruction":"fake","old_string":"hi","new_string":"hello"}`),
	},
}

// answer is an expected answer: text, or one call.
type answer struct {
	text, thinking string
	call           *gotCall
}

func text(s string) answer        { return answer{text: s} }
func calls(c gotCall) answer      { return answer{call: &c} }
func thought(th, s string) answer { return answer{text: s, thinking: th} }

func checkAnswers(t *testing.T, got []result, want []answer) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d answers, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if !g.Usage {
			t.Errorf("answer %d: no usage", i)
		}
		if g.Thinking != w.thinking {
			t.Errorf("answer %d: thinking %q, want %q", i, g.Thinking, w.thinking)
		}
		if w.call == nil {
			if g.Text != w.text || len(g.Calls) != 0 {
				t.Errorf("answer %d: text %q calls %+v, want text %q", i, g.Text, g.Calls, w.text)
			}
			continue
		}
		if len(g.Calls) != 1 {
			t.Fatalf("answer %d: calls %+v, want %+v", i, g.Calls, *w.call)
		}
		c := g.Calls[0]
		if c.Name != w.call.Name || c.Input != w.call.Input || !reflect.DeepEqual(c.Args, w.call.Args) {
			t.Errorf("answer %d: call %s %v %q\nwant %s %v %q", i, c.Name, c.Args, c.Input, w.call.Name, w.call.Args, w.call.Input)
		}
	}
}

// TestScenarios runs every built-in scenario with each agent's tools, on
// its API, streaming and not.
func TestScenarios(t *testing.T) {
	srv := start(t, fakellm.Options{Default: "write"})
	for name, ag := range agents(t) {
		e := expectations[name]
		for _, stream := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stream=%v", name, stream), func(t *testing.T) {
				t.Parallel()
				newSession := func(scenario string) *session {
					return &session{t: t, base: srv.ScenarioURL(scenario), p: protocolByName(ag.API), tools: ag.Tools, stream: stream}
				}
				tests := []struct {
					scenario string
					want     []answer
				}{
					{"text", []answer{text("done")}},
					{"write", []answer{calls(e.write), text("done")}},
					{"shell", []answer{calls(e.shellHi), text("done")}},
					{"permission", []answer{calls(e.permission), text("done")}},
					{"edit", []answer{calls(e.write), calls(e.edit), text("done")}},
					{"thinking", []answer{thought("The user wants an answer. I will say done.", "done")}},
				}
				for _, tc := range tests {
					got := newSession(tc.scenario).ask("Create the file please")
					t.Run(tc.scenario, func(t *testing.T) { checkAnswers(t, got, tc.want) })
				}

				// multi: a second user message continues the script, a
				// third repeats its last part.
				s := newSession("multi")
				checkAnswers(t, s.ask("first"), []answer{calls(e.write), text("done")})
				checkAnswers(t, s.ask("second"), []answer{text("second answer")})
				checkAnswers(t, s.ask("third"), []answer{text("second answer")})

				// the default scenario (no /s/ prefix) is "write".
				s = newSession("")
				s.base = srv.URL()
				checkAnswers(t, s.ask("go"), []answer{calls(e.write), text("done")})

				// long: 2000 chunks.
				got := newSession("long").ask("go")
				var want strings.Builder
				for i := 1; i <= fakellm.LongChunks; i++ {
					fmt.Fprintf(&want, "word%04d ", i)
				}
				checkAnswers(t, got, []answer{text(want.String())})
				if stream && got[0].Chunks != fakellm.LongChunks {
					t.Errorf("long: %d chunks, want %d", got[0].Chunks, fakellm.LongChunks)
				}
			})
		}
	}
}

// TestTurnCounting checks which answer each request gets from the history
// it carries, on every API, with one server for every session.
func TestTurnCounting(t *testing.T) {
	sc := &fakellm.Scenario{Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{{Kind: fakellm.KindShell, Command: "one"}}},
		{Calls: []fakellm.Call{{Kind: fakellm.KindShell, Command: "two"}}},
		{Text: "first done"},
		{Text: "I will run three", Calls: []fakellm.Call{{Kind: fakellm.KindShell, Command: "three"}}},
		{Text: "second done"},
	}}
	srv := start(t, fakellm.Options{Default: "script", Scenarios: map[string]*fakellm.Scenario{"script": sc}})
	for _, name := range []string{"claude", "codex", "opencode", "gemini"} {
		ag := agents(t)[name]
		t.Run(name, func(t *testing.T) {
			s := &session{t: t, base: srv.URL(), p: protocolByName(ag.API), tools: ag.Tools, stream: true}
			cmd := func(r result) string {
				if len(r.Calls) != 1 {
					return "text:" + r.Text
				}
				for _, k := range []string{"command", "cmd"} {
					if v, ok := r.Calls[0].Args[k].(string); ok {
						return "call:" + v
					}
				}
				return "call:?"
			}
			var got []string
			for _, prompt := range []string{"a", "b", "c"} {
				for _, r := range s.ask(prompt) {
					got = append(got, cmd(r))
				}
			}
			want := []string{"call:one", "call:two", "text:first done", "call:three", "text:second done", "call:three", "text:second done"}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("answers %q\nwant %q", got, want)
			}
			// The text of a turn with a call comes before the call.
			reqs := srv.Requests()
			var turns []string
			for _, r := range reqs {
				if strings.HasPrefix(r.Path, "/v1") && r.Reply != "" {
					turns = append(turns, fmt.Sprintf("%d/%d/%d", r.Prompt, r.Turn, r.Step))
				}
			}
			wantTurns := []string{"0/0/0", "0/1/1", "0/2/2", "1/0/3", "1/1/4", "2/0/3", "2/1/4"}
			if len(turns) < len(wantTurns) || !reflect.DeepEqual(turns[len(turns)-len(wantTurns):], wantTurns) {
				t.Errorf("prompt/turn/step %v, want to end with %v", turns, wantTurns)
			}
		})
	}
}

func TestTextBeforeCall(t *testing.T) {
	sc := &fakellm.Scenario{Turns: []fakellm.Turn{
		{Thinking: "plan", Text: "Writing.", Calls: []fakellm.Call{
			{Kind: fakellm.KindWrite, Path: "a.txt", Content: "A"},
			{Kind: fakellm.KindWrite, Path: "/abs/b.txt", Content: "B"}}},
		{Text: "done"},
	}}
	srv := start(t, fakellm.Options{Default: "two", Scenarios: map[string]*fakellm.Scenario{"two": sc}})
	for _, name := range []string{"claude", "codex", "opencode", "gemini"} {
		ag := agents(t)[name]
		for _, stream := range []bool{true, false} {
			s := &session{t: t, base: srv.URL(), p: protocolByName(ag.API), tools: ag.Tools, stream: stream}
			got := s.ask("go")
			if len(got) != 2 || got[0].Text != "Writing." || got[0].Thinking != "plan" || len(got[0].Calls) != 2 || got[1].Text != "done" {
				t.Errorf("%s stream=%v: %+v", name, stream, got)
			}
		}
	}
}

func TestErrors(t *testing.T) {
	srv := start(t, fakellm.Options{Default: "error429"})
	for _, p := range protocols {
		tools := agents(t)[map[string]string{"anthropic": "claude", "responses": "codex", "chat": "opencode", "gemini": "gemini"}[p.name]].Tools
		for _, stream := range []bool{true, false} {
			for _, tc := range []struct {
				base   string
				status int
			}{
				{srv.URL(), 429},
				{srv.ScenarioURL("error429"), 429},
				{srv.ScenarioURL("error500"), 500},
				{srv.ScenarioURL("nope"), 404},
			} {
				body := p.body(tools, []msg{{role: "user", text: "hi"}}, stream)
				status, h, b := post(t, tc.base+p.path(stream), body, nil)
				if status != tc.status {
					t.Errorf("%s %s stream=%v: status %d, want %d: %s", p.name, tc.base, stream, status, tc.status, b)
					continue
				}
				if !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
					t.Errorf("%s: error Content-Type %q", p.name, h.Get("Content-Type"))
				}
				if h.Get("X-Should-Retry") != "false" {
					t.Errorf("%s: x-should-retry %q", p.name, h.Get("X-Should-Retry"))
				}
				msg, err := errorShape(p.name, status, b)
				if err != nil {
					t.Errorf("%s stream=%v: %v", p.name, stream, err)
				}
				if tc.status == 404 && !strings.Contains(msg, `unknown scenario "nope"`) {
					t.Errorf("%s: 404 message %q", p.name, msg)
				}
			}
		}
		// Bad JSON is a 400 in the API's shape.
		status, _, b := post(t, srv.URL()+p.path(false), "{not json", nil)
		if _, err := errorShape(p.name, status, b); status != 400 || err != nil {
			t.Errorf("%s bad JSON: %d %s %v", p.name, status, b, err)
		}
	}
	// Unknown routes are 404.
	status, _, _ := post(t, srv.URL()+"/v1/nothing", map[string]any{}, nil)
	if status != 404 {
		t.Errorf("unknown route: %d", status)
	}
	// A scenario error with a type of its own and retries allowed.
	sc := &fakellm.Scenario{Turns: []fakellm.Turn{{Error: &fakellm.Error{Status: 529, Message: "busy", Retry: true}}}}
	srv2 := start(t, fakellm.Options{Default: "x", Scenarios: map[string]*fakellm.Scenario{"x": sc}})
	p := protocolByName("anthropic")
	status, h, b := post(t, srv2.URL()+p.path(true), p.body(agents(t)["claude"].Tools, []msg{{role: "user", text: "hi"}}, true), nil)
	if msg, err := errorShape("anthropic", status, b); status != 529 || err != nil || msg != "busy" || h.Get("X-Should-Retry") != "" {
		t.Errorf("529: %d %s %v %q", status, b, err, h.Get("X-Should-Retry"))
	}
}

func TestNoToolsAndJSON(t *testing.T) {
	srv := start(t, fakellm.Options{Default: "write"})
	schema := map[string]any{"type": "object", "properties": map[string]any{
		"reasoning":        map[string]any{"type": "string"},
		"complexity_score": map[string]any{"type": "integer", "minimum": 1, "maximum": 100},
		"model_choice":     map[string]any{"type": "string", "enum": []any{"flash", "pro"}},
		"count":            map[string]any{"type": "integer"},
		"tags":             map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
	}, "required": []any{"reasoning", "complexity_score"}}
	wantJSON := map[string]any{"reasoning": "fake", "complexity_score": 1.0, "model_choice": "flash", "count": 1.0, "tags": []any{}}
	userOnly := []msg{{role: "user", text: "Create a title"}}
	for _, p := range protocols {
		for _, stream := range []bool{true, false} {
			// No tools: the fixed text.
			body := p.body(nil, userOnly, stream)
			delete(body, "tools")
			status, _, b := post(t, srv.URL()+p.path(stream), body, nil)
			res, err := p.read(b, stream)
			if status != 200 || err != nil || res.Text != fakellm.DefaultNoToolsText {
				t.Errorf("%s stream=%v no tools: %d %v %q", p.name, stream, status, err, res.Text)
			}
			// JSON asked for: an object from the schema.
			body = p.body(nil, userOnly, stream)
			delete(body, "tools")
			switch p.name {
			case "anthropic":
				body["output_format"] = map[string]any{"type": "json_schema", "schema": schema}
			case "responses":
				body["text"] = map[string]any{"format": map[string]any{"type": "json_schema", "name": "x", "schema": schema}}
			case "chat":
				body["response_format"] = map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x", "schema": schema}}
			case "gemini":
				body["generationConfig"] = map[string]any{"responseMimeType": "application/json", "responseJsonSchema": schema}
			}
			status, _, b = post(t, srv.URL()+p.path(stream), body, nil)
			res, err = p.read(b, stream)
			var got map[string]any
			if status != 200 || err != nil || json.Unmarshal([]byte(res.Text), &got) != nil || !reflect.DeepEqual(got, wantJSON) {
				t.Errorf("%s stream=%v JSON: %d %v %q", p.name, stream, status, err, res.Text)
			}
		}
	}
	// Gemini's routing classifier with an upper-case responseSchema.
	p := protocolByName("gemini")
	body := p.body(nil, userOnly, false)
	delete(body, "tools")
	body["generationConfig"] = map[string]any{"responseMimeType": "application/json", "responseSchema": map[string]any{
		"type": "OBJECT", "properties": map[string]any{"complexity_score": map[string]any{"type": "INTEGER"},
			"next_speaker": map[string]any{"type": "STRING", "enum": []any{"user", "model"}}}}}
	_, _, b := post(t, srv.URL()+"/v1beta/models/gemini-3.5-flash-lite:generateContent", body, nil)
	res, err := p.read(b, false)
	if err != nil || res.Text != `{"complexity_score":1,"next_speaker":"user"}` {
		t.Errorf("classifier: %v %q", err, res.Text)
	}
	// The no-tools text of a scenario.
	sc := &fakellm.Scenario{Turns: []fakellm.Turn{{Text: "x"}}, NoToolsText: "My title"}
	srv2 := start(t, fakellm.Options{Scenarios: map[string]*fakellm.Scenario{"t": sc}})
	p = protocolByName("chat")
	_, _, b = post(t, srv2.ScenarioURL("t")+p.path(false), p.body(nil, userOnly, false), nil)
	if res, err := p.read(b, false); err != nil || res.Text != "My title" {
		t.Errorf("no-tools text: %v %q", err, res.Text)
	}
}

func TestOtherRoutes(t *testing.T) {
	srv := start(t, fakellm.Options{})
	get := func(path string) (int, map[string]any) {
		resp, err := client.Get(srv.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	if st, m := get("/v1/models"); st != 200 || len(a(m["data"])) == 0 || s(o(a(m["data"])[0])["id"]) == "" {
		t.Errorf("/v1/models: %d %v", st, m)
	}
	if st, m := get("/s/write/prefix/v1beta/models"); st != 200 || !strings.HasPrefix(s(o(a(m["models"])[0])["name"]), "models/") {
		t.Errorf("gemini models: %d %v", st, m)
	}
	if st, m := get("/v1/models/claude-x"); st != 200 || m["id"] != "claude-x" {
		t.Errorf("one model: %d %v", st, m)
	}
	if st, _ := get("/nope"); st != 404 {
		t.Errorf("GET /nope: %d", st)
	}
	body := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hello there"}}}
	_, _, b := post(t, srv.URL()+"/v1/messages/count_tokens?beta=true", body, nil)
	if m, err := decodeObj(string(b)); err != nil || n(m["input_tokens"]) < 1 {
		t.Errorf("count_tokens: %s %v", b, err)
	}
	_, _, b = post(t, srv.URL()+"/v1beta/models/gemini-x:countTokens", body, nil)
	if m, err := decodeObj(string(b)); err != nil || n(m["totalTokens"]) < 1 {
		t.Errorf("countTokens: %s %v", b, err)
	}
	// A base URL with a prefix, and the Gemini JSON-array stream.
	ag := agents(t)["gemini"]
	p := protocolByName("gemini")
	_, _, b = post(t, srv.ScenarioURL("write")+"/gemini/v1beta/models/g:streamGenerateContent", p.body(ag.Tools, []msg{{role: "user", text: "x"}}, true), nil)
	res, err := readGemini(b, "array")
	if err != nil || len(res.Calls) != 1 || res.Calls[0].Name != "write_file" {
		t.Errorf("JSON array stream: %v %+v", err, res)
	}
	ant := protocolByName("anthropic")
	_, _, b = post(t, srv.ScenarioURL("permission")+"/anthropic/v1/messages", ant.body(agents(t)["claude"].Tools, []msg{{role: "user", text: "x"}}, true), nil)
	res, err = readAnthropicStream(b)
	if err != nil || len(res.Calls) != 1 || res.Calls[0].Args["command"] != "printf approved > approved.txt" {
		t.Errorf("prefixed base URL: %v %+v", err, res)
	}
}

func TestWorkdir(t *testing.T) {
	write := &fakellm.Scenario{Turns: []fakellm.Turn{{Calls: []fakellm.Call{{Kind: fakellm.KindWrite, Path: "sub/x.txt", Content: "x"}}}}}
	fixed := &fakellm.Scenario{Workdir: "/fixed", Turns: write.Turns}
	srv := start(t, fakellm.Options{Workdir: "/fallback", Scenarios: map[string]*fakellm.Scenario{"w": write, "fixed": fixed}})
	p := protocolByName("chat")
	tools := agents(t)["pi"].Tools
	path := func(base string, body map[string]any) any {
		_, _, b := post(t, base+p.path(false), body, nil)
		res, err := p.read(b, false)
		if err != nil || len(res.Calls) != 1 {
			t.Fatalf("%v %+v", err, res)
		}
		return res.Calls[0].Args["path"]
	}
	body := p.body(tools, []msg{{role: "user", text: "x"}}, false)
	if got := path(srv.ScenarioURL("w"), body); got != "/w/proj/sub/x.txt" {
		t.Errorf("from the prompt: %v", got)
	}
	if got := path(srv.ScenarioURL("fixed"), body); got != "/fixed/sub/x.txt" {
		t.Errorf("scenario workdir: %v", got)
	}
	body["messages"] = []any{map[string]any{"role": "user", "content": "no cwd here"}}
	if got := path(srv.ScenarioURL("w"), body); got != "/fallback/sub/x.txt" {
		t.Errorf("Options.Workdir: %v", got)
	}
	for _, tc := range []struct{ prompt, want string }{
		{"Current working directory: /home/u/p\nmore", "/home/u/p"},
		{"You are pi. Current working directory: /tmp/a.", "/tmp/a"},
		{"<environment_context><cwd>/x y/z</cwd></environment_context>", "/x y/z"},
		{"I'm currently working in the directory: /g/h", "/g/h"},
	} {
		body["messages"] = []any{map[string]any{"role": "system", "content": tc.prompt}, map[string]any{"role": "user", "content": "x"}}
		if got := path(srv.ScenarioURL("w"), body); got != tc.want+"/sub/x.txt" {
			t.Errorf("%q: %v", tc.prompt, got)
		}
	}
}

func TestRawCalls(t *testing.T) {
	sc := &fakellm.Scenario{Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{{Name: "Read", Arguments: json.RawMessage(`{"file_path":"/etc/hosts"}`)}}},
		{Calls: []fakellm.Call{{Name: "apply_patch", Arguments: json.RawMessage(`"*** Begin Patch\n*** End Patch\n"`)}}},
		{Text: "done"},
	}}
	srv := start(t, fakellm.Options{Scenarios: map[string]*fakellm.Scenario{"raw": sc}})
	s := &session{t: t, base: srv.ScenarioURL("raw"), p: protocolByName("responses"), tools: agents(t)["codex"].Tools, stream: true}
	checkAnswers(t, s.ask("go"), []answer{
		calls(call("Read", `{"file_path":"/etc/hosts"}`)),
		calls(custom("apply_patch", "*** Begin Patch\n*** End Patch\n")),
		text("done"),
	})
	// A call no tool matches becomes an explanation.
	s = &session{t: t, base: srv.ScenarioURL("write"), p: protocolByName("chat"), tools: agents(t)["pi"].Tools[:1], stream: false}
	got := s.ask("go")
	if len(got) != 1 || !strings.Contains(got[0].Text, "no tool for a write call among [read]") {
		t.Errorf("no matching tool: %+v", got)
	}
}

func TestRedaction(t *testing.T) {
	logFile := filepath.Join(t.TempDir(), "requests.jsonl")
	srv := start(t, fakellm.Options{LogFile: logFile})
	p := protocolByName("anthropic")
	body := p.body(agents(t)["claude"].Tools, []msg{{role: "user", text: "hi"}}, false)
	secrets := []string{"sk-ant-secret-1", "sk-openai-secret-2", "goog-secret-3", "azure-secret-4", "cookie-secret-5", "query-secret-6"}
	post(t, srv.URL()+"/v1/messages", body, map[string]string{"x-api-key": secrets[0], "Cookie": "session=" + secrets[4]})
	post(t, srv.URL()+"/v1/chat/completions", protocolByName("chat").body(nil, []msg{{role: "user", text: "x"}}, false),
		map[string]string{"Authorization": "Bearer " + secrets[1]})
	post(t, srv.URL()+"/v1beta/models/g:generateContent?key="+secrets[5], protocolByName("gemini").body(nil, []msg{{role: "user", text: "x"}}, false),
		map[string]string{"x-goog-api-key": secrets[2]})
	post(t, srv.URL()+"/openai/deployments/x/chat/completions?api-version=1", protocolByName("chat").body(nil, []msg{{role: "user", text: "x"}}, false),
		map[string]string{"api-key": secrets[3]})
	post(t, srv.URL()+"/v1beta/models/g:generateContent?key="+secrets[5], protocolByName("gemini").body(nil, []msg{{role: "user", text: "x"}}, false), nil)

	reqs := srv.Requests()
	if len(reqs) != 5 {
		t.Fatalf("%d requests", len(reqs))
	}
	wantKeys := []string{secrets[0], secrets[1], secrets[2], secrets[3], secrets[5]}
	for i, r := range reqs {
		if r.Seq != i+1 {
			t.Errorf("seq %d at %d", r.Seq, i)
		}
		if !r.HasKey(wantKeys[i]) {
			t.Errorf("request %d: HasKey(%q) false", i, wantKeys[i])
		}
		if r.HasKey("fake") || r.HasKey("") {
			t.Errorf("request %d: HasKey of another key", i)
		}
	}
	for _, h := range []string{"X-Api-Key", "Cookie"} {
		if got := reqs[0].Header.Get(h); got != fakellm.Redacted {
			t.Errorf("%s = %q", h, got)
		}
	}
	if got := reqs[1].Header.Get("Authorization"); got != fakellm.Redacted {
		t.Errorf("Authorization = %q", got)
	}
	if got := reqs[2].Header.Get("X-Goog-Api-Key"); got != fakellm.Redacted {
		t.Errorf("X-Goog-Api-Key = %q", got)
	}
	if got := reqs[3].Header.Get("Api-Key"); got != fakellm.Redacted || reqs[3].Query != "api-version=1" {
		t.Errorf("Api-Key = %q, query %q", got, reqs[3].Query)
	}
	if reqs[4].Query != "key="+fakellm.Redacted {
		t.Errorf("query %q", reqs[4].Query)
	}
	if reqs[0].Header.Get("Content-Type") != "application/json" || reqs[0].API != fakellm.APIAnthropic || reqs[0].Model != "claude-test" {
		t.Errorf("request 0: %+v", reqs[0])
	}
	var b0 map[string]any
	if err := json.Unmarshal(reqs[0].Body, &b0); err != nil || b0["model"] != "claude-test" {
		t.Errorf("body: %v %v", err, b0["model"])
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, sec := range secrets {
		if strings.Contains(string(raw), sec) {
			t.Errorf("the log file holds %q", sec)
		}
		for _, r := range reqs {
			if j, _ := json.Marshal(r); strings.Contains(string(j), sec) {
				t.Errorf("a recorded request holds %q", sec)
			}
		}
	}
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(nil, 16<<20)
	lines := 0
	for sc.Scan() {
		var r fakellm.Request
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		lines++
		if r.Seq != lines || r.KeySHA256 != reqs[lines-1].KeySHA256 {
			t.Errorf("log line %d: %+v", lines, r)
		}
	}
	if lines != 5 {
		t.Errorf("%d log lines", lines)
	}
}

func TestConcurrency(t *testing.T) {
	var seen sync.Map
	srv := start(t, fakellm.Options{Default: "edit", OnRequest: func(r fakellm.Request) { seen.Store(r.Seq, true) }})
	names := []string{"claude", "codex", "codex-exec", "opencode", "pi", "gemini"}
	const sessions = 48
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Go(func() {
			name := names[i%len(names)]
			ag := agents(t)[name]
			e := expectations[name]
			s := &session{t: t, base: srv.URL(), p: protocolByName(ag.API), tools: ag.Tools, stream: i%2 == 0}
			if i%3 == 0 {
				s.base = srv.ScenarioURL("write")
				got, err := s.tryAsk("go")
				if err != nil || len(got) != 2 || len(got[0].Calls) != 1 || got[0].Calls[0].Name != e.write.Name || got[1].Text != "done" {
					t.Errorf("session %d (%s write): %v %+v", i, name, err, got)
				}
				return
			}
			got, err := s.tryAsk("go")
			if err != nil || len(got) != 3 || len(got[1].Calls) != 1 || got[1].Calls[0].Name != e.edit.Name || got[2].Text != "done" {
				t.Errorf("session %d (%s edit): %v %+v", i, name, err, got)
			}
		})
	}
	wg.Wait()
	reqs := srv.Requests()
	want := 0
	for i := range sessions {
		want += map[bool]int{true: 2, false: 3}[i%3 == 0]
	}
	if len(reqs) != want {
		t.Errorf("%d requests, want %d", len(reqs), want)
	}
	for i, r := range reqs {
		if r.Seq != i+1 {
			t.Fatalf("seq %d at %d", r.Seq, i)
		}
		if _, ok := seen.Load(r.Seq); !ok {
			t.Errorf("OnRequest missed %d", r.Seq)
		}
	}
}

func TestWait(t *testing.T) {
	srv := start(t, fakellm.Options{})
	p := protocolByName("chat")
	post(t, srv.URL()+p.path(false), p.body(nil, []msg{{role: "user", text: "x"}}, false), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := srv.Wait(ctx, nil)
	if err != nil || r.Seq != 1 {
		t.Fatalf("earlier request: %v %+v", err, r)
	}
	done := make(chan fakellm.Request)
	go func() {
		r, err := srv.Wait(ctx, func(r fakellm.Request) bool { return r.Scenario == "thinking" })
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	time.Sleep(20 * time.Millisecond)
	post(t, srv.URL()+p.path(false), p.body(nil, []msg{{role: "user", text: "x"}}, false), nil)
	post(t, srv.ScenarioURL("thinking")+p.path(false), p.body(nil, []msg{{role: "user", text: "x"}}, false), nil)
	if r := <-done; r.Seq != 3 {
		t.Errorf("waited for %+v", r)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if _, err := srv.Wait(short, func(fakellm.Request) bool { return false }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait timeout: %v", err)
	}
	go func() { time.Sleep(20 * time.Millisecond); srv.Close() }()
	if _, err := srv.Wait(context.Background(), func(fakellm.Request) bool { return false }); !errors.Is(err, fakellm.ErrClosed) {
		t.Errorf("Wait after Close: %v", err)
	}
}

// TestSlow checks the per-chunk delay, and that a client that goes away
// or a Close ends a slow stream at once.
func TestSlow(t *testing.T) {
	sc := &fakellm.Scenario{Turns: []fakellm.Turn{{Chunks: []string{"a", "b", "c", "d"}, Delay: fakellm.Duration(40 * time.Millisecond)}}}
	srv := start(t, fakellm.Options{Scenarios: map[string]*fakellm.Scenario{"s4": sc}})
	for _, p := range protocols {
		for _, stream := range []bool{true, false} {
			t0 := time.Now()
			s := &session{t: t, base: srv.ScenarioURL("s4"), p: p, tools: agents(t)["claude"].Tools, stream: stream}
			if p.name != "anthropic" {
				s.tools = agents(t)[map[string]string{"responses": "codex", "chat": "pi", "gemini": "gemini"}[p.name]].Tools
			}
			got := s.ask("x")
			if d := time.Since(t0); d < 160*time.Millisecond {
				t.Errorf("%s stream=%v: answered in %v", p.name, stream, d)
			}
			if got[0].Text != "abcd" {
				t.Errorf("%s: %q", p.name, got[0].Text)
			}
		}
	}

	// The built-in slow scenario, cancelled by the client after a few chunks.
	p := protocolByName("anthropic")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, _, _, err := tryPost(ctx, srv.ScenarioURL("slow")+p.path(true), p.body(agents(t)["claude"].Tools, []msg{{role: "user", text: "x"}}, true), nil)
	if err == nil {
		t.Errorf("slow stream finished within 300ms")
	}
	// Close returns quickly although a slow stream is running.
	before := len(srv.Requests())
	done := make(chan error, 1)
	go func() {
		_, _, _, err := tryPost(context.Background(), srv.ScenarioURL("slow")+p.path(true), p.body(agents(t)["claude"].Tools, []msg{{role: "user", text: "x"}}, true), nil)
		done <- err
	}()
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	if _, err := srv.Wait(wctx, func(r fakellm.Request) bool { return r.Scenario == "slow" && r.Seq > before }); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	if err := srv.Close(); err != nil {
		t.Error(err)
	}
	if d := time.Since(t1); d > time.Second {
		t.Errorf("Close took %v", d)
	}
	<-done
	if d := time.Since(t0); d > fakellm.SlowDelay*fakellm.SlowChunks {
		t.Errorf("the slow streams ran %v", d)
	}
}

func TestStartOptions(t *testing.T) {
	ctx := context.Background()
	if _, err := fakellm.Start(ctx, fakellm.Options{Addr: "0.0.0.0:0"}); err == nil {
		t.Error("a non-loopback address was accepted")
	}
	if _, err := fakellm.Start(ctx, fakellm.Options{Default: "nope"}); err == nil {
		t.Error("an unknown default was accepted")
	}
	bad := &fakellm.Scenario{Turns: []fakellm.Turn{{}}}
	if _, err := fakellm.Start(ctx, fakellm.Options{Scenarios: map[string]*fakellm.Scenario{"bad": bad}}); err == nil {
		t.Error("an invalid scenario was accepted")
	}
	// The context ends the server.
	cctx, cancel := context.WithCancel(ctx)
	srv, err := fakellm.Start(cctx, fakellm.Options{Addr: "localhost:0"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(srv.ScenarioURL("a b"), srv.URL()+"/s/a%20b") {
		t.Errorf("ScenarioURL %q", srv.ScenarioURL("a b"))
	}
	cancel()
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if _, err := srv.Wait(wctx, func(fakellm.Request) bool { return false }); !errors.Is(err, fakellm.ErrClosed) {
		t.Errorf("after the context ended: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// A scenario registered under a built-in name replaces it, and the
	// caller's copy can change afterwards.
	mine := &fakellm.Scenario{Turns: []fakellm.Turn{{Text: "mine"}}}
	srv2 := start(t, fakellm.Options{Scenarios: map[string]*fakellm.Scenario{"text": mine}})
	mine.Turns[0].Text = "changed"
	p := protocolByName("chat")
	_, _, b := post(t, srv2.URL()+p.path(false), p.body(agents(t)["pi"].Tools, []msg{{role: "user", text: "x"}}, false), nil)
	if res, err := p.read(b, false); err != nil || res.Text != "mine" {
		t.Errorf("registered scenario: %v %q", err, res.Text)
	}
}

func TestScenarioFiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "my-script.json")
	// The mockllm.py file format, with one call per turn.
	src := `{"turns":[{"call":{"kind":"write","path":"hello.txt","content":"hi"}},
		{"call":{"name":"Bash","arguments":{"command":"ls"}}},
		{"text":"done","delay":"5ms"},{"chunks":["a","b"],"thinking":"t","delay":3}],
		"no_tools_text":"Title","workdir":"/abs/dir"}`
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	sc, err := fakellm.LoadScenario(file)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Name != "my-script" || len(sc.Turns) != 4 || len(sc.Turns[0].Calls) != 1 || sc.Turns[1].Calls[0].Name != "Bash" ||
		sc.Turns[2].Delay != fakellm.Duration(5*time.Millisecond) || sc.Turns[3].Delay != fakellm.Duration(3*time.Millisecond) {
		t.Errorf("loaded %+v", sc)
	}
	// Built-ins round-trip through JSON.
	for _, name := range fakellm.BuiltinNames() {
		b, _ := fakellm.Builtin(name)
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		back, err := fakellm.ParseScenario(raw)
		if err != nil || !reflect.DeepEqual(back, b) {
			t.Errorf("%s: round trip: %v", name, err)
		}
	}
	for _, bad := range []string{
		`{"turns":[]}`,
		`{"turns":[{}]}`,
		`{"turns":[{"text":"x","chunks":["y"]}]}`,
		`{"turns":[{"error":{"status":200}}]}`,
		`{"turns":[{"error":{"status":429},"text":"x"}]}`,
		`{"turns":[{"call":{"kind":"teleport"}}]}`,
		`{"turns":[{"call":{"kind":"write"}}]}`,
		`{"turns":[{"call":{"kind":"shell"}}]}`,
		`{"turns":[{"call":{"name":"x","arguments":[1]}}]}`,
		`{"turns":[{"text":"x","unknown":1}]}`,
		`{"turns":[{"text":"x"}],"extra":1}`,
		`{"turns":[{"text":"x","delay":"soon"}]}`,
		`{"turns":[{"text":"x"}]} {}`,
	} {
		if _, err := fakellm.ParseScenario([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
	if _, ok := fakellm.Builtin("nope"); ok {
		t.Error("Builtin(nope)")
	}
}

package fakellm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/fakellm"
)

// workdir is the cwd the test conversations state in their prompts.
const workdir = "/w/proj"

// msg is one message of an abstract conversation, built into each API's
// native request by the builders below.
type msg struct {
	role  string // "user", "assistant", "tool"
	text  string
	calls []gotCall // assistant: the calls made; tool: the calls answered
}

// agent is a tool set of one agent, in its API's native form
// (testdata/tools.json).
type agent struct {
	API    string            `json:"api"`
	Source string            `json:"source"`
	Tools  []json.RawMessage `json:"tools"`
}

var (
	agentsOnce sync.Once
	agentsMap  map[string]agent
)

func agents(t testing.TB) map[string]agent {
	agentsOnce.Do(func() {
		b, err := os.ReadFile("testdata/tools.json")
		if err != nil {
			panic(err)
		}
		if err := json.Unmarshal(b, &agentsMap); err != nil {
			panic(err)
		}
	})
	return agentsMap
}

// protocol builds requests for one API and reads its answers.
type protocol struct {
	name string
	// path returns the request path (and query) for a model call.
	path func(stream bool) string
	// body builds the native request.
	body func(tools []json.RawMessage, conv []msg, stream bool) map[string]any
	// read reads a 200 answer.
	read func(body []byte, stream bool) (result, error)
}

var protocols = []protocol{
	{
		name: "anthropic",
		path: func(bool) string { return "/v1/messages?beta=true" },
		body: func(tools []json.RawMessage, conv []msg, stream bool) map[string]any {
			var msgs []any
			for _, m := range conv {
				switch m.role {
				case "user":
					msgs = append(msgs, map[string]any{"role": "user", "content": []any{
						map[string]any{"type": "text", "text": "<system-reminder>x</system-reminder>"},
						map[string]any{"type": "text", "text": m.text}}})
				case "assistant":
					var content []any
					if m.text != "" {
						content = append(content, map[string]any{"type": "text", "text": m.text})
					}
					for _, c := range m.calls {
						content = append(content, map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": c.Args})
					}
					msgs = append(msgs, map[string]any{"role": "assistant", "content": content})
				case "tool":
					var content []any
					for _, c := range m.calls {
						content = append(content, map[string]any{"type": "tool_result", "tool_use_id": c.ID, "content": "ok"})
					}
					msgs = append(msgs, map[string]any{"role": "user", "content": content})
				}
			}
			return map[string]any{
				"model":    "claude-test",
				"system":   []any{map[string]any{"type": "text", "text": "You are a coding agent.\n - Primary working directory: " + workdir + "\n - Is a git repository: true"}},
				"messages": msgs, "tools": tools, "max_tokens": 1000, "stream": stream,
				"thinking": map[string]any{"type": "adaptive"},
			}
		},
		read: func(b []byte, stream bool) (result, error) {
			if stream {
				return readAnthropicStream(b)
			}
			return readAnthropicJSON(b)
		},
	},
	{
		name: "responses",
		path: func(bool) string { return "/v1/responses" },
		body: func(tools []json.RawMessage, conv []msg, stream bool) map[string]any {
			// Codex sends its environment context as user messages before
			// the prompt.
			input := []any{
				map[string]any{"type": "message", "role": "developer", "content": []any{map[string]any{"type": "input_text", "text": "<permissions instructions>"}}},
				map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "# AGENTS.md instructions"}}},
				map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text",
					"text": "<environment_context>\n  <cwd>" + workdir + "</cwd>\n  <shell>bash</shell>\n</environment_context>"}}},
			}
			for _, m := range conv {
				switch m.role {
				case "user":
					input = append(input, map[string]any{"type": "message", "role": "user",
						"content": []any{map[string]any{"type": "input_text", "text": m.text}}})
				case "assistant":
					if m.text != "" {
						input = append(input, map[string]any{"type": "message", "role": "assistant",
							"content": []any{map[string]any{"type": "output_text", "text": m.text}}})
					}
					for _, c := range m.calls {
						if c.Args == nil {
							input = append(input, map[string]any{"type": "custom_tool_call", "call_id": c.ID, "name": c.Name, "input": c.Input})
						} else {
							args, _ := json.Marshal(c.Args)
							input = append(input, map[string]any{"type": "function_call", "call_id": c.ID, "name": c.Name, "arguments": string(args)})
						}
					}
				case "tool":
					for _, c := range m.calls {
						typ := "function_call_output"
						if c.Args == nil {
							typ = "custom_tool_call_output"
						}
						input = append(input, map[string]any{"type": typ, "call_id": c.ID, "output": "ok"})
					}
				}
			}
			return map[string]any{"model": "gpt-test", "instructions": "You are Codex.", "input": input,
				"tools": tools, "tool_choice": "auto", "parallel_tool_calls": false, "stream": stream, "store": false,
				"include": []any{"reasoning.encrypted_content"}}
		},
		read: func(b []byte, stream bool) (result, error) {
			if stream {
				return readResponsesStream(b)
			}
			return readResponsesJSON(b)
		},
	},
	{
		name: "chat",
		path: func(bool) string { return "/v1/chat/completions" },
		body: func(tools []json.RawMessage, conv []msg, stream bool) map[string]any {
			msgs := []any{map[string]any{"role": "system", "content": "You are opencode.\n<env>\n  Working directory: " + workdir + "\n  Platform: linux\n</env>"}}
			for _, m := range conv {
				switch m.role {
				case "user":
					msgs = append(msgs, map[string]any{"role": "user", "content": m.text})
				case "assistant":
					am := map[string]any{"role": "assistant", "content": m.text}
					var calls []any
					for _, c := range m.calls {
						args, _ := json.Marshal(c.Args)
						calls = append(calls, map[string]any{"id": c.ID, "type": "function",
							"function": map[string]any{"name": c.Name, "arguments": string(args)}})
					}
					if calls != nil {
						am["tool_calls"] = calls
					}
					msgs = append(msgs, am)
				case "tool":
					for _, c := range m.calls {
						msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": c.ID, "content": "ok"})
					}
				}
			}
			b := map[string]any{"model": "mock-model", "messages": msgs, "tools": tools, "stream": stream}
			if stream {
				b["stream_options"] = map[string]any{"include_usage": true}
			}
			return b
		},
		read: func(b []byte, stream bool) (result, error) {
			if stream {
				return readChatStream(b, true)
			}
			return readChatJSON(b)
		},
	},
	{
		name: "gemini",
		path: func(stream bool) string {
			if stream {
				return "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
			}
			return "/v1beta/models/gemini-test:generateContent"
		},
		body: func(tools []json.RawMessage, conv []msg, _ bool) map[string]any {
			var contents []any
			for _, m := range conv {
				switch m.role {
				case "user":
					contents = append(contents, map[string]any{"role": "user", "parts": []any{map[string]any{"text": m.text}}})
				case "assistant":
					var parts []any
					if m.text != "" {
						parts = append(parts, map[string]any{"text": m.text})
					}
					for _, c := range m.calls {
						parts = append(parts, map[string]any{"functionCall": map[string]any{"name": c.Name, "args": c.Args}})
					}
					contents = append(contents, map[string]any{"role": "model", "parts": parts})
				case "tool":
					var parts []any
					for _, c := range m.calls {
						parts = append(parts, map[string]any{"functionResponse": map[string]any{"name": c.Name, "response": map[string]any{"output": "ok"}}})
					}
					contents = append(contents, map[string]any{"role": "user", "parts": parts})
				}
			}
			return map[string]any{
				"contents": contents, "tools": tools,
				"systemInstruction": map[string]any{"role": "user", "parts": []any{map[string]any{
					"text": "You are an interactive CLI agent.\n- **Workspace Directories:**\n  - " + workdir + "\n- **Directory Structure:**"}}},
				"generationConfig": map[string]any{"temperature": 0},
			}
		},
		read: func(b []byte, stream bool) (result, error) {
			if stream {
				return readGemini(b, "sse")
			}
			return readGemini(b, "json")
		},
	},
}

func protocolByName(name string) protocol {
	for _, p := range protocols {
		if p.name == name {
			return p
		}
	}
	panic("no protocol " + name)
}

// start starts a server for the test.
func start(t testing.TB, opts fakellm.Options) *fakellm.Server {
	t.Helper()
	srv, err := fakellm.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return srv
}

var client = &http.Client{Timeout: 30 * time.Second}

// post sends a JSON body and returns the status, headers and body.
func post(t testing.TB, url string, body any, header map[string]string) (int, http.Header, []byte) {
	t.Helper()
	status, h, b, err := tryPost(context.Background(), url, body, header)
	if err != nil {
		t.Fatal(err)
	}
	return status, h, b
}

func tryPost(ctx context.Context, url string, body any, header map[string]string) (int, http.Header, []byte, error) {
	var raw []byte
	switch b := body.(type) {
	case []byte:
		raw = b
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return 0, nil, nil, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, b, nil
}

// session drives one conversation against the server like an agent does:
// it sends the conversation, reads the answer, runs nothing, answers each
// tool call with "ok", until a final answer.
type session struct {
	t      testing.TB
	base   string
	p      protocol
	tools  []json.RawMessage
	stream bool
	conv   []msg
	ids    int
}

// ask adds a user message and returns every answer up to the final one.
func (s *session) ask(text string) []result {
	s.t.Helper()
	res, err := s.tryAsk(text)
	if err != nil {
		s.t.Fatal(err)
	}
	return res
}

// tryAsk is ask for goroutines other than the test's: it does not stop
// the test.
func (s *session) tryAsk(text string) ([]result, error) {
	s.conv = append(s.conv, msg{role: "user", text: text})
	var out []result
	for range 10 {
		res, err := s.once()
		if err != nil {
			return out, err
		}
		out = append(out, res)
		if len(res.Calls) == 0 {
			return out, nil
		}
	}
	return out, fmt.Errorf("%s: no final answer after 10 rounds", s.p.name)
}

// once sends the conversation once and records the answer in it.
func (s *session) once() (result, error) {
	status, h, body, err := tryPost(context.Background(), s.base+s.p.path(s.stream), s.p.body(s.tools, s.conv, s.stream), nil)
	if err != nil {
		return result{}, err
	}
	if status != http.StatusOK {
		return result{}, fmt.Errorf("%s: status %d: %s", s.p.name, status, body)
	}
	ct := h.Get("Content-Type")
	if s.stream != strings.HasPrefix(ct, "text/event-stream") {
		return result{}, fmt.Errorf("%s: stream=%v but Content-Type %q", s.p.name, s.stream, ct)
	}
	res, err := s.p.read(body, s.stream)
	if err != nil {
		return result{}, fmt.Errorf("%s stream=%v: %w\n%s", s.p.name, s.stream, err, body)
	}
	calls := make([]gotCall, len(res.Calls))
	for i, c := range res.Calls {
		s.ids++
		if c.ID == "" { // Gemini has no call ids
			c.ID = fmt.Sprintf("call_%d", s.ids)
		}
		calls[i] = c
	}
	s.conv = append(s.conv, msg{role: "assistant", text: res.Text, calls: calls})
	if len(calls) > 0 {
		s.conv = append(s.conv, msg{role: "tool", calls: calls})
	}
	return res, nil
}

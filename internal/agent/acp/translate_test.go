package acp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/event"
	wire "github.com/agentbox/agentbox/internal/acpwire"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/golden"
)

const goldenCwd = "/work"

// replay feeds a recorded ACP exchange (one JSON-RPC message a line; lines
// {"_sent": …} are what the client wrote) through a Translator as the
// session does, and returns the events, with the permission requests and
// the turn's end rendered as the events the engine would log for them.
func replay(t testing.TB, lines [][]byte) []event.Event {
	tr := NewTranslator(goldenCwd)
	n := 0
	tr.NewID = func() string { n++; return fmt.Sprintf("item_%d", n) }
	var evs []event.Event
	pending := map[string]wire.RequestPermissionRequest{} // by JSON-RPC id
	for _, line := range lines {
		line = bytes.ReplaceAll(line, []byte("<workdir>"), []byte(goldenCwd))
		var msg struct {
			Sent   json.RawMessage `json:"_sent"`
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(line, &msg); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		switch {
		case msg.Sent != nil:
			// The client's answer to a permission request.
			var sent struct {
				ID     json.RawMessage `json:"id"`
				Result struct {
					Outcome struct {
						OptionID string `json:"optionId"`
					} `json:"outcome"`
				} `json:"result"`
			}
			_ = json.Unmarshal(msg.Sent, &sent)
			req, ok := pending[string(sent.ID)]
			if !ok {
				continue
			}
			delete(pending, string(sent.ID))
			for _, o := range req.Options {
				if string(o.OptionId) == sent.Result.Outcome.OptionID && o.Kind != wire.PermissionOptionKindAllowOnce && o.Kind != wire.PermissionOptionKindAllowAlways {
					evs = append(evs, tr.Denied(string(req.ToolCall.ToolCallId))...)
				}
			}
		case msg.Method == wire.ClientMethodSessionUpdate:
			evs = append(evs, tr.Update(msg.Params)...)
		case msg.Method == wire.ClientMethodSessionRequestPermission:
			var req wire.RequestPermissionRequest
			if err := json.Unmarshal(msg.Params, &req); err != nil {
				t.Fatal(err)
			}
			pr, pre := tr.Permission(msg.Params, req)
			evs = append(evs, pre...)
			evs = append(evs, event.New(event.SourceAgent, &pr))
			pending[string(msg.ID)] = req
		case msg.Result != nil:
			var resp wire.PromptResponse
			if json.Unmarshal(msg.Result, &resp) != nil || resp.StopReason == "" {
				continue // initialize, session/new
			}
			fin, usage := tr.Finish(&resp)
			evs = append(evs, fin...)
			stop, m := StopReason(resp.StopReason, false)
			evs = append(evs, event.New(event.SourceDaemon, &event.TurnCompleted{StopReason: stop, Usage: usage, Message: m}))
		}
	}
	return evs
}

// TestGolden translates the recorded exchanges of testdata (real agents'
// transcripts and hand-written ones for the rarer update kinds) and
// compares the events with the .golden files.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			evs := replay(t, agenttest.ReadLines(t, f))
			golden.Check(t, strings.TrimSuffix(f, ".jsonl")+".golden", agenttest.GoldenEvents(t, evs))
		})
	}
}

// TestGoldenShapes checks what the goldens must show, so that an -update
// cannot bless a regression of the points the capabilities rest on.
func TestGoldenShapes(t *testing.T) {
	type want struct {
		kinds    []event.ItemKind // completed item kinds that must appear
		declined bool             // a declined command
		text     string           // the last assistant message
		diff     string           // a diff line that must appear
	}
	for file, w := range map[string]want{
		"gemini-acp.permission-allow":      {kinds: []event.ItemKind{event.ItemCommand, event.ItemMessage}, text: "done"},
		"gemini-acp.permission-deny":       {kinds: []event.ItemKind{event.ItemCommand}, declined: true, text: "done"},
		"claude-code-acp.write-allow":      {kinds: []event.ItemKind{event.ItemFileChange}, text: "done", diff: "+hi"},
		"claude-code-acp.permission-deny":  {kinds: []event.ItemKind{event.ItemCommand}, declined: true},
		"codex-acp.write-allow":            {kinds: []event.ItemKind{event.ItemFileChange}, text: "done", diff: "+hi"},
		"codex-acp.permission-allow":       {kinds: []event.ItemKind{event.ItemCommand}, text: "done"},
		"opencode-acp.permission-allow":    {kinds: []event.ItemKind{event.ItemCommand}, text: "done"},
		"hand-thoughts-plan":               {kinds: []event.ItemKind{event.ItemReasoning, event.ItemPlan, event.ItemFileChange, event.ItemToolCall}, text: "Second message.", diff: "+\tprintln(2)"},
		"claude-code-acp.permission-allow": {kinds: []event.ItemKind{event.ItemCommand}, text: "done"},
	} {
		t.Run(file, func(t *testing.T) {
			evs := replay(t, agenttest.ReadLines(t, "testdata/"+file+".jsonl"))
			if errs := agenttest.CheckInvariants(withEnvelope(evs)); len(errs) > 0 {
				t.Errorf("invariants: %v", errs)
			}
			its := agenttest.Items(t, evs)
			for _, k := range w.kinds {
				if agenttest.FindItem(its, k) == nil {
					t.Errorf("no completed %s item", k)
				}
			}
			if got := agenttest.LastMessage(its); got != w.text {
				t.Errorf("last message %q, want %q", got, w.text)
			}
			if w.declined {
				if c := agenttest.FindItem(its, event.ItemCommand); c == nil || c.Status != event.StatusDeclined {
					t.Errorf("command %+v, want declined", c)
				}
			}
			if w.diff != "" {
				fc := agenttest.FindItem(its, event.ItemFileChange)
				if fc == nil || len(fc.Changes) == 0 || !strings.Contains(fc.Changes[0].Diff, w.diff) {
					t.Errorf("file change %+v, want a diff with %q", fc, w.diff)
				}
			}
		})
	}
}

// withEnvelope wraps translated events as a log of one turn, for
// CheckInvariants.
func withEnvelope(evs []event.Event) []event.Event {
	var out []event.Event
	add := func(e event.Event) {
		e.Seq = int64(len(out) + 1)
		e.SessionID = "ses_1"
		if e.Type != event.TypeSessionStarted {
			e.TurnID = "turn_1"
		}
		out = append(out, e)
	}
	add(event.New(event.SourceDaemon, &event.SessionStarted{Agent: "acp"}))
	add(event.New(event.SourceDaemon, &event.TurnStarted{TurnID: "turn_1"}))
	for _, e := range evs {
		switch e.Type {
		case event.TypeTurnCompleted:
			p, _ := e.Decode()
			tc := p.(*event.TurnCompleted)
			tc.TurnID = "turn_1"
			add(event.New(event.SourceDaemon, tc))
		case event.TypePermissionRequested:
			p, _ := e.Decode()
			pr := p.(*event.PermissionRequested)
			pr.ID = fmt.Sprintf("perm_%d", len(out))
			add(event.New(event.SourceAgent, pr))
			add(event.New(event.SourceDaemon, &event.PermissionResolved{ID: pr.ID, Decision: event.DecisionAllow, By: event.ByUser}))
		default:
			add(e)
		}
	}
	return out
}

func TestChooseOption(t *testing.T) {
	opts := []wire.PermissionOption{
		{OptionId: "always", Kind: wire.PermissionOptionKindAllowAlways},
		{OptionId: "once", Kind: wire.PermissionOptionKindAllowOnce},
		{OptionId: "never", Kind: wire.PermissionOptionKindRejectAlways},
		{OptionId: "no", Kind: wire.PermissionOptionKindRejectOnce},
	}
	for _, tc := range []struct {
		name string
		opts []wire.PermissionOption
		ans  agent.PermissionAnswer
		want string
		ok   bool
	}{
		{"allow picks once, not always", opts, agent.PermissionAnswer{Decision: event.DecisionAllow}, "once", true},
		{"always only when named", opts, agent.PermissionAnswer{Decision: event.DecisionAllow, OptionID: "always"}, "always", true},
		{"deny picks reject once", opts, agent.PermissionAnswer{Decision: event.DecisionDeny}, "no", true},
		{"named reject always", opts, agent.PermissionAnswer{Decision: event.DecisionDeny, OptionID: "never"}, "never", true},
		{"a named option against the decision is ignored", opts, agent.PermissionAnswer{Decision: event.DecisionDeny, OptionID: "always"}, "no", true},
		{"timeout denies", opts, agent.PermissionAnswer{Decision: event.DecisionDeny, By: event.ByTimeout}, "no", true},
		{"only allow_always offered: not picked", opts[:1], agent.PermissionAnswer{Decision: event.DecisionAllow}, "", false},
		{"deny falls back to reject always", opts[2:3], agent.PermissionAnswer{Decision: event.DecisionDeny}, "never", true},
		{"no reject option", opts[:2], agent.PermissionAnswer{Decision: event.DecisionDeny}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ChooseOption(tc.opts, tc.ans)
			if string(got) != tc.want || ok != tc.ok {
				t.Errorf("ChooseOption = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// FuzzTranslate feeds arbitrary session/update params and permission
// requests to the translator: it must not panic, and every event it makes
// must decode.
func FuzzTranslate(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.jsonl")
	for _, file := range files {
		for _, l := range agenttest.ReadLines(f, file) {
			var msg struct {
				Params json.RawMessage `json:"params"`
			}
			if json.Unmarshal(l, &msg) == nil && msg.Params != nil {
				f.Add([]byte(msg.Params))
			}
		}
	}
	f.Add([]byte(`{"update":{"sessionUpdate":"tool_call_update","toolCallId":"x","status":"completed","content":[{"type":"diff","path":"/work/a","newText":"x"}]}}`))
	f.Add([]byte(`{"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text"}}}`))
	f.Fuzz(func(t *testing.T, params []byte) {
		tr := NewTranslator(goldenCwd)
		evs := tr.Update(params)
		evs = append(evs, tr.Update(params)...)
		var req wire.RequestPermissionRequest
		if json.Unmarshal(params, &req) == nil {
			_, pre := tr.Permission(params, req)
			evs = append(evs, pre...)
			evs = append(evs, tr.Denied(string(req.ToolCall.ToolCallId))...)
		}
		var resp wire.PromptResponse
		_ = json.Unmarshal(params, &resp)
		fin, _ := tr.Finish(&resp)
		evs = append(evs, fin...)
		for _, e := range evs {
			if _, err := e.Decode(); err != nil {
				t.Fatalf("event %s does not decode: %v", e.Type, err)
			}
		}
	})
}

// TestUpstreamWhat: codex-acp's codex_error_info is said in plain words
// (Codex replaces a provider's 500 with "high demand"); other error data
// adds nothing.
func TestUpstreamWhat(t *testing.T) {
	for _, tc := range []struct {
		data any
		want string
	}{
		{map[string]any{"codex_error_info": "internal_server_error", "message": "We're currently experiencing high demand"}, "upstream internal error (HTTP 5xx)"},
		{map[string]any{"codex_error_info": "usage_limit_exceeded"}, "upstream rate limit (HTTP 429)"},
		{map[string]any{"codex_error_info": map[string]any{"http_connection_failed": map[string]any{"http_status_code": 502.0}}}, "upstream http connection failed (HTTP 502)"},
		{map[string]any{"codex_error_info": "something_new"}, ""},
		{map[string]any{"message": "x"}, ""},
		{"a string", ""},
	} {
		if got := upstreamWhat(tc.data); got != tc.want {
			t.Errorf("upstreamWhat(%v) = %q, want %q", tc.data, got, tc.want)
		}
	}
}

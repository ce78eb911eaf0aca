package acp

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/reexec"
)

// The test binary doubles as an ACP agent (TestMain): with
// AGENTBOX_ACP_TEST_AGENT=terminal set it speaks ACP on stdin and stdout
// and, on each prompt, drives the client's terminal/* methods with the
// calls the prompt's text lists, answering with their results as JSON.

const testAgentEnv = "AGENTBOX_ACP_TEST_AGENT"

func TestMain(m *testing.M) {
	reexec.Init()
	if os.Getenv(testAgentEnv) == "terminal" {
		os.Exit(runTerminalAgent())
	}
	os.Exit(m.Run())
}

// agentCall is one request the test agent sends; "$N" in a terminalId is
// the id terminal/create number N (from 0) returned.
type agentCall struct {
	Method string         `json:"method"`
	Params map[string]any `json:"params"`
}

type agentResult struct {
	Result json.RawMessage   `json:"result,omitempty"`
	Error  *sdk.RequestError `json:"error,omitempty"`
	Took   time.Duration     `json:"took"`
}

func runTerminalAgent() int {
	var (
		conn     *sdk.Connection
		terminal bool
	)
	conn = sdk.NewConnection(func(ctx context.Context, method string, params json.RawMessage) (any, *sdk.RequestError) {
		switch method {
		case sdk.AgentMethodInitialize:
			var req sdk.InitializeRequest
			_ = json.Unmarshal(params, &req)
			terminal = req.ClientCapabilities.Terminal
			return sdk.InitializeResponse{ProtocolVersion: sdk.ProtocolVersionNumber}, nil
		case sdk.AgentMethodSessionNew:
			if !terminal {
				return nil, sdk.NewInvalidParams(map[string]any{"error": "the client did not advertise terminal"})
			}
			return sdk.NewSessionResponse{SessionId: "test-session"}, nil
		case sdk.AgentMethodSessionPrompt:
			var req sdk.PromptRequest
			_ = json.Unmarshal(params, &req)
			var calls []agentCall
			if len(req.Prompt) == 0 || req.Prompt[0].Text == nil || json.Unmarshal([]byte(req.Prompt[0].Text.Text), &calls) != nil {
				return nil, sdk.NewInvalidParams(map[string]any{"error": "the prompt is not a list of calls"})
			}
			var ids []string
			var results []agentResult
			for _, c := range calls {
				if id, ok := c.Params["terminalId"].(string); ok && strings.HasPrefix(id, "$") {
					n, _ := strconv.Atoi(id[1:])
					if n < len(ids) {
						c.Params["terminalId"] = ids[n]
					}
				}
				c.Params["sessionId"] = "test-session"
				start := time.Now()
				res, err := sdk.SendRequest[json.RawMessage](conn, ctx, c.Method, c.Params)
				r := agentResult{Result: res, Took: time.Since(start)}
				if err != nil {
					r.Error = &sdk.RequestError{Message: err.Error()}
				}
				if c.Method == sdk.ClientMethodTerminalCreate {
					var cr sdk.CreateTerminalResponse
					_ = json.Unmarshal(res, &cr)
					ids = append(ids, cr.TerminalId)
				}
				results = append(results, r)
			}
			b, _ := json.Marshal(results)
			_ = conn.SendNotification(ctx, sdk.ClientMethodSessionUpdate, sdk.SessionNotification{
				SessionId: "test-session", Update: sdk.UpdateAgentMessageText(string(b))})
			return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn}, nil
		}
		return nil, sdk.NewMethodNotFound(method)
	}, os.Stdout, os.Stdin)
	<-conn.Done()
	return 0
}

// testHost is an agent.Host that keeps the events.
type testHost struct {
	mu  sync.Mutex
	evs []event.Event
}

func (h *testHost) Emit(_ context.Context, evs ...event.Event) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.evs = append(h.evs, evs...)
	return nil
}

func (h *testHost) RequestPermission(context.Context, agent.PermissionRequest) (agent.PermissionAnswer, error) {
	return agent.PermissionAnswer{Decision: event.DecisionDeny, By: event.ByDaemon}, nil
}

func (h *testHost) AskQuestion(context.Context, agent.Question) (agent.Answer, error) {
	return agent.Answer{Cancelled: true}, nil
}

func (h *testHost) SetNativeSessionID(context.Context, string) error { return nil }

// lastText is the text of the last completed assistant message.
func (h *testHost) lastText(t *testing.T) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	text := ""
	for _, e := range h.evs {
		if e.Type == event.TypeItemCompleted {
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			if it := p.(*event.ItemCompleted).Item; it.Kind == event.ItemMessage {
				text = it.Text()
			}
		}
	}
	return text
}

// TestTerminal: an ACP agent that is served terminal/* sees it advertised
// and runs commands through it, in the session's directory with the
// agent's environment and its own variables; it reads their output
// (bounded, cut from the start), waits for their exit code, kills them
// (the whole process tree, reported as SIGKILL) and releases them; a
// command still running when the session ends is killed.
func TestTerminal(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ad, err := FromConfig(Custom{Name: "terminal-test", Command: exe, Env: map[string]string{testAgentEnv: "terminal", "FROM_AGENT": "agent-env"},
		Terminal: true}, t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	cwd := t.TempDir()
	if r, err := filepath.EvalSymlinks(cwd); err == nil {
		cwd = r
	}
	other := t.TempDir()
	pidFile := filepath.Join(cwd, "left.pid")
	h := &testHost{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := ad.Start(ctx, agent.Config{Cwd: cwd}, h)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = s.Close(context.Background())
		}
	}()

	create := func(params map[string]any) agentCall { return agentCall{sdk.ClientMethodTerminalCreate, params} }
	on := func(method string, n int) agentCall {
		return agentCall{method, map[string]any{"terminalId": fmt.Sprintf("$%d", n)}}
	}
	calls := []agentCall{
		// 0: a shell command line, stdout and stderr together, env, cwd.
		create(map[string]any{"command": `printf 'out\n'; printf 'err\n' >&2; echo "$FOO $FROM_AGENT"; pwd; exit 3`,
			"env": []map[string]string{{"name": "FOO", "value": "bar"}}}),
		on(sdk.ClientMethodTerminalWaitForExit, 0),
		on(sdk.ClientMethodTerminalOutput, 0),
		// 3: a program with arguments (no shell parsing of them), in
		// another directory.
		create(map[string]any{"command": "printf", "args": []string{"%s|%s|", "a b", "$HOME"}, "cwd": other}),
		on(sdk.ClientMethodTerminalWaitForExit, 1),
		on(sdk.ClientMethodTerminalOutput, 1),
		// 6: killed while it runs, with a child of its own.
		create(map[string]any{"command": "sleep 60 & echo started; wait"}),
		on(sdk.ClientMethodTerminalKill, 2),
		on(sdk.ClientMethodTerminalWaitForExit, 2),
		on(sdk.ClientMethodTerminalOutput, 2),
		// 10: output beyond the limit keeps its end.
		create(map[string]any{"command": "seq 1 1000", "outputByteLimit": 10}),
		on(sdk.ClientMethodTerminalWaitForExit, 3),
		on(sdk.ClientMethodTerminalOutput, 3),
		// 13: released: gone.
		on(sdk.ClientMethodTerminalRelease, 0),
		on(sdk.ClientMethodTerminalOutput, 0),
		// 15: refused: a relative cwd; no command.
		create(map[string]any{"command": "true", "cwd": "relative"}),
		create(map[string]any{"command": " "}),
		// 17: left running when the session ends.
		create(map[string]any{"command": "echo $$ > " + pidFile + "; exec sleep 60"}),
	}
	b, _ := json.Marshal(calls)
	res, err := s.Prompt(ctx, agent.Input{Content: []event.ContentPart{event.TextPart(string(b))}})
	if err != nil || res.StopReason != event.StopEndTurn {
		t.Fatalf("prompt: %+v, %v", res, err)
	}
	var results []agentResult
	if err := json.Unmarshal([]byte(h.lastText(t)), &results); err != nil || len(results) != len(calls) {
		t.Fatalf("the agent's results %q: %v", h.lastText(t), err)
	}
	ok := func(i int, v any) {
		t.Helper()
		r := results[i]
		if r.Error != nil {
			t.Fatalf("call %d %s: %v", i, calls[i].Method, r.Error)
		}
		// v is reused: start from its zero value.
		reflect.ValueOf(v).Elem().SetZero()
		if err := json.Unmarshal(r.Result, v); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	var wait sdk.WaitForTerminalExitResponse
	var out sdk.TerminalOutputResponse

	ok(1, &wait)
	if wait.ExitCode == nil || *wait.ExitCode != 3 || wait.Signal != nil {
		t.Errorf("exit of the command line: %+v, want code 3", wait)
	}
	ok(2, &out)
	if want := "out\nerr\nbar agent-env\n" + cwd + "\n"; out.Output != want || out.Truncated || out.ExitStatus == nil || *out.ExitStatus.ExitCode != 3 {
		t.Errorf("output %+v, want %q with exit status 3", out, want)
	}

	ok(4, &wait)
	ok(5, &out)
	if out.Output != "a b|$HOME|" || wait.ExitCode == nil || *wait.ExitCode != 0 {
		t.Errorf("program with args: %q exit %+v, want \"a b|$HOME|\" and 0", out.Output, wait)
	}

	ok(8, &wait)
	if wait.Signal == nil || *wait.Signal != "SIGKILL" || wait.ExitCode != nil {
		t.Errorf("killed command: %+v, want signal SIGKILL", wait)
	}
	if results[8].Took > 20*time.Second {
		t.Errorf("waiting for the killed command took %s: its child kept it", results[8].Took)
	}
	ok(9, &out)
	if out.ExitStatus == nil || out.ExitStatus.Signal == nil {
		t.Errorf("output of the killed command: %+v, want its exit status", out)
	}

	ok(12, &out)
	if !out.Truncated || out.Output != "\n999\n1000\n" {
		t.Errorf("limited output %+v, want the last 10 bytes, truncated", out)
	}

	var rel sdk.ReleaseTerminalResponse
	ok(13, &rel)
	for _, i := range []int{14, 15, 16} {
		if results[i].Error == nil {
			t.Errorf("call %d %s %v: %s, want an error", i, calls[i].Method, calls[i].Params, results[i].Result)
		}
	}
	var cr sdk.CreateTerminalResponse
	ok(17, &cr)

	var pid int
	deadline := time.Now().Add(30 * time.Second)
	for pid == 0 && time.Now().Before(deadline) {
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		time.Sleep(20 * time.Millisecond)
	}
	if pid == 0 || syscall.Kill(pid, 0) != nil {
		t.Fatalf("the command left running is not (pid %d)", pid)
	}
	closed = true
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the terminal's command %d still runs after the session closed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTailBuffer: the kept output is the end, cut at a character.
func TestTailBuffer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limit  int
		writes []string
		want   string
		trunc  bool
	}{
		{"fits", 10, []string{"abc", "def"}, "abcdef", false},
		{"cut", 4, []string{"abc", "def"}, "cdef", true},
		{"cut inside a character", 4, []string{"aé", "xyz"}, "xyz", true},
		{"partial character at the end waits", 10, []string{"a\xc3"}, "a", false},
		{"zero limit", 0, []string{"abc"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := agent.NewTailBuffer(tc.limit)
			for _, w := range tc.writes {
				_, _ = b.Write([]byte(w))
			}
			if got, trunc := snapshot(b); got != tc.want || trunc != tc.trunc {
				t.Errorf("snapshot = %q, %v; want %q, %v", got, trunc, tc.want, tc.trunc)
			}
		})
	}
}

package acpserver

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/agenttest"
)

// editor is the ACP client side of the tests: it records every session
// update and answers permission requests with the option of kind answer.
type editor struct {
	answer acp.PermissionOptionKind

	mu      sync.Mutex
	updates []acp.SessionUpdate
	asked   []acp.RequestPermissionRequest
}

var _ acp.Client = (*editor)(nil)

func (e *editor) RequestPermission(_ context.Context, p acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	e.mu.Lock()
	e.asked = append(e.asked, p)
	e.mu.Unlock()
	for _, o := range p.Options {
		if o.Kind == e.answer {
			return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{
				Selected: &acp.RequestPermissionOutcomeSelected{OptionId: o.OptionId, Outcome: "selected"}}}, nil
		}
	}
	return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{
		Cancelled: &acp.RequestPermissionOutcomeCancelled{Outcome: "cancelled"}}}, nil
}

func (e *editor) SessionUpdate(_ context.Context, n acp.SessionNotification) error {
	e.mu.Lock()
	e.updates = append(e.updates, n.Update)
	e.mu.Unlock()
	return nil
}

func (e *editor) snapshot() ([]acp.SessionUpdate, []acp.RequestPermissionRequest) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]acp.SessionUpdate(nil), e.updates...), append([]acp.RequestPermissionRequest(nil), e.asked...)
}

func (e *editor) reset() {
	e.mu.Lock()
	e.updates, e.asked = nil, nil
	e.mu.Unlock()
}

func (*editor) ReadTextFile(context.Context, acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return acp.ReadTextFileResponse{}, acp.NewMethodNotFound(acp.ClientMethodFsReadTextFile)
}
func (*editor) WriteTextFile(context.Context, acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return acp.WriteTextFileResponse{}, acp.NewMethodNotFound(acp.ClientMethodFsWriteTextFile)
}
func (*editor) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalCreate)
}
func (*editor) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalKill)
}
func (*editor) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalOutput)
}
func (*editor) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalRelease)
}
func (*editor) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalWaitForExit)
}

// mockStack is a real agentbox stack (store, engine, HTTP API, client)
// running the mock agent.
func mockStack(t *testing.T) *agenttest.Stack {
	return agenttest.NewStack(t, agenttest.StackOptions{
		Name: mock.Name,
		New:  func(testing.TB, agenttest.LLM) agent.Adapter { return mock.New() },
	})
}

// transport connects an editor to the ACP endpoint and returns its
// connection.
type transport func(t *testing.T, s *agenttest.Stack, ed *editor) *acp.ClientSideConnection

// pipes serves the endpoint on in-memory pipes, as `agentbox acp` does on
// its stdio.
func pipes(t *testing.T, s *agenttest.Stack, ed *editor) *acp.ClientSideConnection {
	toAgent, fromClient := io.Pipe()
	toClient, fromAgent := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, s.C, Config{Agent: mock.Name}, toAgent, fromAgent) }()
	t.Cleanup(func() {
		fromClient.Close()
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Serve: %v", err)
		}
		fromAgent.Close()
	})
	return acp.NewClientSideConnection(ed, fromClient, toClient)
}

// upgraded serves the endpoint over HTTP and dials it with the upgrade
// handshake.
func upgraded(t *testing.T, s *agenttest.Stack, ed *editor) *acp.ClientSideConnection {
	mux := http.NewServeMux()
	mux.Handle("/v1/acp", Handler(HandlerOptions{Backend: func(*http.Request) (Backend, error) { return s.C, nil }}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := Dial(ctx, srv.URL+"/v1/acp?agent="+mock.Name, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return acp.NewClientSideConnection(ed, conn, conn)
}

func TestEndToEnd(t *testing.T) {
	s := mockStack(t)
	for _, tr := range []struct {
		name string
		dial transport
	}{{"stdio", pipes}, {"http", upgraded}} {
		t.Run(tr.name, func(t *testing.T) {
			for _, allow := range []bool{true, false} {
				name := map[bool]string{true: "allow", false: "deny"}[allow]
				t.Run(name, func(t *testing.T) { testPermissionPrompt(t, s, tr.dial, allow) })
			}
			t.Run("cancel", func(t *testing.T) { testCancel(t, s, tr.dial) })
			t.Run("second prompt", func(t *testing.T) { testSecondPrompt(t, s, tr.dial) })
			t.Run("question", func(t *testing.T) { testQuestionDeclined(t, s, tr.dial) })
		})
	}
}

// testQuestionDeclined: ACP has no questions, so this server declines
// them itself, and the log says so: by policy, not by the user.
func testQuestionDeclined(t *testing.T, s *agenttest.Stack, dial transport) {
	c, sid, _ := start(t, s, dial, &editor{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Prompt(ctx, acp.PromptRequest{SessionId: sid, Prompt: []acp.ContentBlock{acp.TextBlock("/scenario question")}}); err != nil {
		t.Fatalf("prompt: %v", err)
	}
	var resolved []*event.QuestionResolved
	if err := s.C.EventsAll(ctx, string(sid), 0, func(ev event.Event) error {
		if p, err := ev.Decode(); err == nil {
			if q, ok := p.(*event.QuestionResolved); ok {
				resolved = append(resolved, q)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(resolved) != 1 || !resolved[0].Cancelled || resolved[0].By != event.ByPolicy {
		t.Fatalf("question resolutions %+v, want one declined by policy", resolved)
	}
}

func start(t *testing.T, s *agenttest.Stack, dial transport, ed *editor) (*acp.ClientSideConnection, acp.SessionId, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dial(t, s, ed)
	init, err := c.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber})
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	if !init.AgentCapabilities.LoadSession || init.AgentInfo == nil || init.AgentInfo.Name != "agentbox" {
		t.Errorf("initialize: %+v", init)
	}
	cwd := t.TempDir()
	ns, err := c.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatalf("session/new: %v", err)
	}
	return c, ns.SessionId, cwd
}

// testPermissionPrompt runs a prompt whose agent asks to write a file:
// the request reaches the editor, its answer decides, and the file_change
// comes back as a tool call with its diff (allow) or failed (deny).
func testPermissionPrompt(t *testing.T, s *agenttest.Stack, dial transport, allow bool) {
	ed := &editor{answer: acp.PermissionOptionKindRejectOnce}
	if allow {
		ed.answer = acp.PermissionOptionKindAllowOnce
	}
	c, sid, cwd := start(t, s, dial, ed)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := c.Prompt(ctx, acp.PromptRequest{SessionId: sid, Prompt: []acp.ContentBlock{acp.TextBlock("/scenario permission-write hello.txt")}})
	if err != nil {
		t.Fatalf("prompt: %v", err)
	}
	if resp.StopReason != acp.StopReasonEndTurn {
		t.Errorf("stop reason %q", resp.StopReason)
	}
	if resp.Usage == nil || resp.Usage.OutputTokens == 0 {
		t.Errorf("usage %+v", resp.Usage)
	}
	ups, asked := ed.snapshot()
	if len(asked) != 1 {
		t.Fatalf("%d permission requests, want 1", len(asked))
	}
	req := asked[0]
	if req.ToolCall.Kind == nil || *req.ToolCall.Kind != acp.ToolKindEdit || len(req.Options) != 2 {
		t.Errorf("permission request %+v", req)
	}
	var start *acp.SessionUpdateToolCall
	var end *acp.SessionToolCallUpdate
	var text strings.Builder
	for _, u := range ups {
		switch {
		case u.ToolCall != nil:
			start = u.ToolCall
		case u.ToolCallUpdate != nil && u.ToolCallUpdate.Status != nil && *u.ToolCallUpdate.Status != acp.ToolCallStatusInProgress:
			end = u.ToolCallUpdate
		case u.AgentMessageChunk != nil && u.AgentMessageChunk.Content.Text != nil:
			text.WriteString(u.AgentMessageChunk.Content.Text.Text)
		}
	}
	if start == nil || end == nil || start.ToolCallId != req.ToolCall.ToolCallId || end.ToolCallId != start.ToolCallId {
		t.Fatalf("tool call %+v, end %+v, permission for %q", start, end, req.ToolCall.ToolCallId)
	}
	if start.Kind != acp.ToolKindEdit || len(start.Locations) != 1 || filepath.Base(start.Locations[0].Path) != "hello.txt" {
		t.Errorf("tool call start %+v", start)
	}
	_, statErr := os.Stat(filepath.Join(cwd, "hello.txt"))
	if allow {
		if *end.Status != acp.ToolCallStatusCompleted || statErr != nil {
			t.Errorf("allowed: status %s, file: %v", *end.Status, statErr)
		}
		var diff *acp.ToolCallContentDiff
		for _, c := range end.Content {
			if c.Diff != nil {
				diff = c.Diff
			}
		}
		if diff == nil || !strings.Contains(diff.NewText, "Hello from the mock agent.") || diff.OldText != nil {
			t.Errorf("diff content %+v", diff)
		}
	} else if *end.Status != acp.ToolCallStatusFailed || statErr == nil {
		t.Errorf("denied: status %s, file exists %v", *end.Status, statErr == nil)
	}
	if !strings.Contains(text.String(), "I need your permission") {
		t.Errorf("agent text %q", text.String())
	}

	// session/load on a fresh connection replays the session, the user's
	// prompt included.
	ed2 := &editor{answer: acp.PermissionOptionKindAllowOnce}
	c2 := dial(t, s, ed2)
	if _, err := c2.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.LoadSession(ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: cwd, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("session/load: %v", err)
	}
	replayed, _ := ed2.snapshot()
	var user string
	tools := 0
	for _, u := range replayed {
		if u.UserMessageChunk != nil && u.UserMessageChunk.Content.Text != nil {
			user += u.UserMessageChunk.Content.Text.Text
		}
		if u.ToolCall != nil {
			tools++
		}
	}
	if user != "/scenario permission-write hello.txt" || tools != 1 {
		t.Errorf("replay: user %q, %d tool calls, %d updates", user, tools, len(replayed))
	}
	// The loaded session takes prompts.
	resp, err = c2.Prompt(ctx, acp.PromptRequest{SessionId: sid, Prompt: []acp.ContentBlock{acp.TextBlock("hello again")}})
	if err != nil || resp.StopReason != acp.StopReasonEndTurn {
		t.Errorf("prompt after load: %+v, %v", resp, err)
	}
}

// testSecondPrompt sends a prompt while one runs in the session: it is
// refused, and the running one is not disturbed (it ends its turn).
func testSecondPrompt(t *testing.T, s *agenttest.Stack, dial transport) {
	ed := &editor{answer: acp.PermissionOptionKindAllowOnce}
	c, sid, _ := start(t, s, dial, ed)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type result struct {
		resp acp.PromptResponse
		err  error
	}
	res := make(chan result, 1)
	go func() {
		r, err := c.Prompt(ctx, acp.PromptRequest{SessionId: sid, Prompt: []acp.ContentBlock{acp.TextBlock("/scenario slow 300ms")}})
		res <- result{r, err}
	}()
	for deadline := time.Now().Add(30 * time.Second); ; {
		ups, _ := ed.snapshot()
		if len(ups) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no update within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, err := c.Prompt(ctx, acp.PromptRequest{SessionId: sid, Prompt: []acp.ContentBlock{acp.TextBlock("/scenario text")}})
	var re *acp.RequestError
	if !errors.As(err, &re) || re.Code != -32600 || !strings.Contains(re.Error(), "already running") {
		t.Fatalf("second prompt: %v, want it refused", err)
	}
	if r := <-res; r.err != nil || r.resp.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("the first prompt: %+v, %v; want it to end its turn", r.resp, r.err)
	}
}

// testCancel cancels a long turn: the prompt ends "cancelled".
func testCancel(t *testing.T, s *agenttest.Stack, dial transport) {
	ed := &editor{answer: acp.PermissionOptionKindAllowOnce}
	c, sid, _ := start(t, s, dial, ed)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type result struct {
		resp acp.PromptResponse
		err  error
	}
	res := make(chan result, 1)
	go func() {
		r, err := c.Prompt(ctx, acp.PromptRequest{SessionId: sid, Prompt: []acp.ContentBlock{acp.TextBlock("/scenario slow 300ms")}})
		res <- result{r, err}
	}()
	// Cancel once the agent is talking.
	for deadline := time.Now().Add(30 * time.Second); ; {
		ups, _ := ed.snapshot()
		if len(ups) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no update within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.Cancel(ctx, acp.CancelNotification{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil || r.resp.StopReason != acp.StopReasonCancelled {
		t.Fatalf("cancelled prompt: %+v, %v", r.resp, r.err)
	}
	ed.reset()
	resp, err := c.Prompt(ctx, acp.PromptRequest{SessionId: sid, Prompt: []acp.ContentBlock{acp.TextBlock("/scenario text")}})
	if err != nil || resp.StopReason != acp.StopReasonEndTurn {
		t.Errorf("prompt after cancel: %+v, %v", resp, err)
	}
}

// TestHandlerRefusesPlainRequests checks the upgrade handshake's errors.
func TestHandlerRefusesPlainRequests(t *testing.T) {
	h := Handler(HandlerOptions{Backend: func(*http.Request) (Backend, error) { return nil, nil }})
	for _, c := range []struct {
		name   string
		method string
		url    string
		hdr    map[string]string
		want   int
	}{
		{"post", http.MethodPost, "/v1/acp?agent=x", nil, http.StatusMethodNotAllowed},
		{"no upgrade", http.MethodGet, "/v1/acp?agent=x", nil, http.StatusUpgradeRequired},
		{"other protocol", http.MethodGet, "/v1/acp?agent=x", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}, http.StatusUpgradeRequired},
		{"no agent", http.MethodGet, "/v1/acp", map[string]string{"Connection": "keep-alive, Upgrade", "Upgrade": "acp"}, http.StatusBadRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(c.method, c.url, nil)
			for k, v := range c.hdr {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != c.want {
				t.Errorf("status %d, want %d: %s", w.Code, c.want, w.Body)
			}
		})
	}
}

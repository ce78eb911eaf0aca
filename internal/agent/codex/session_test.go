package codex

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/fakellm"
	"github.com/agentbox/agentbox/internal/reexec"
)

// fakeHost records events and answers permissions with allow.
type fakeHost struct {
	mu     sync.Mutex
	evs    []event.Event
	native string
}

func (h *fakeHost) Emit(_ context.Context, evs ...event.Event) error {
	h.mu.Lock()
	h.evs = append(h.evs, evs...)
	h.mu.Unlock()
	return nil
}

func (h *fakeHost) RequestPermission(context.Context, agent.PermissionRequest) (agent.PermissionAnswer, error) {
	return agent.PermissionAnswer{Decision: event.DecisionAllow, By: event.ByUser}, nil
}

func (h *fakeHost) AskQuestion(context.Context, agent.Question) (agent.Answer, error) {
	return agent.Answer{Cancelled: true}, nil
}

func (h *fakeHost) SetNativeSessionID(_ context.Context, id string) error {
	h.mu.Lock()
	h.native = id
	h.mu.Unlock()
	return nil
}

func (h *fakeHost) lastMessage() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var s string
	for _, e := range h.evs {
		if e.Type == event.TypeItemCompleted {
			var p event.ItemCompleted
			_ = json.Unmarshal(e.Data, &p)
			if p.Item.Kind == event.ItemMessage {
				s = p.Item.Text()
			}
		}
	}
	return s
}

func prompt(t *testing.T, s agent.Session, text string) agent.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := s.Prompt(ctx, agent.Input{Content: []event.ContentPart{event.TextPart(text)}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestE2EResume: a thread continues on a new server process (a daemon
// restart) from its id, with its history: the fake LLM's multi scenario
// answers the second prompt of a conversation with "second answer".
func TestE2EResume(t *testing.T) {
	bin := codexBinary(t)
	llm, err := fakellm.Start(context.Background(), fakellm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer llm.Close()
	home, cwd := codexHome(t), codexHome(t)
	opts := Options{Binary: bin, APIKey: fakeKey, Home: home, Model: testModel, BaseURL: llm.ScenarioURL(fakellm.ScenarioMulti) + "/v1"}

	h1 := &fakeHost{}
	s1, err := New(opts).Start(t.Context(), agent.Config{Cwd: cwd, PermissionMode: "accept_edits"}, h1)
	if err != nil {
		t.Fatal(err)
	}
	if r := prompt(t, s1, "first"); r.StopReason != event.StopEndTurn || h1.lastMessage() != "done" {
		t.Fatalf("first turn %+v, %q", r, h1.lastMessage())
	}
	if err := s1.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	h2 := &fakeHost{}
	s2, err := New(opts).Start(t.Context(), agent.Config{Cwd: cwd, PermissionMode: "accept_edits", NativeSessionID: h1.native}, h2)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(context.Background())
	t.Logf("resume took %s", time.Since(start))
	if h2.native != h1.native {
		t.Errorf("resumed thread %q, want %q", h2.native, h1.native)
	}
	if r := prompt(t, s2, "second"); r.StopReason != event.StopEndTurn || h2.lastMessage() != "second answer" {
		t.Fatalf("resumed turn %+v, %q", r, h2.lastMessage())
	}
}

// The helper process plays a scripted app-server (GO_CODEX_HELPER=1): it
// answers initialize and thread/start, sends an unknown server request on
// turn/start, checks that the reply is an error, and then exits with 3.
func TestMain(m *testing.M) {
	reexec.Init()
	if os.Getenv("GO_CODEX_HELPER") == "1" {
		helperServer()
		return
	}
	os.Exit(m.Run())
}

func helperServer() {
	sc := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for sc.Scan() {
		var m message
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		switch m.Method {
		case "initialize":
			_ = out.Encode(map[string]any{"id": m.ID, "result": map[string]any{}})
		case "thread/start":
			_ = out.Encode(map[string]any{"id": m.ID, "result": map[string]any{"thread": map[string]any{"id": "th1"}}})
		case "turn/start":
			_ = out.Encode(map[string]any{"id": m.ID, "result": map[string]any{"turn": map[string]any{"id": "tu1"}}})
			_ = out.Encode(map[string]any{"id": 99, "method": "item/tool/call", "params": map[string]any{"threadId": "th1"}})
		case "":
			if string(m.ID) == "99" && m.Error != nil {
				fmt.Fprintln(os.Stderr, "helper: got the error reply:", m.Error.Message)
				os.Exit(3)
			}
			fmt.Fprintln(os.Stderr, "helper: unexpected reply", sc.Text())
			os.Exit(4)
		}
	}
}

// TestUnknownRequestAndDeath: an unknown server request gets an error
// reply (not a hang), and the server's death fails the turn and ends the
// session with the exit code and stderr.
func TestUnknownRequestAndDeath(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	a := New(Options{Binary: func() (string, string, error) { return exe, "test", nil }, Home: codexHome(t)}).(*adapter)
	origEnv := helperEnv
	helperEnv = []string{"GO_CODEX_HELPER=1"}
	defer func() { helperEnv = origEnv }()
	h := &fakeHost{}
	s, err := a.Start(t.Context(), agent.Config{Cwd: t.TempDir()}, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = s.Prompt(ctx, agent.Input{Content: []event.ContentPart{event.TextPart("hi")}})
	if err == nil || !strings.Contains(err.Error(), "exited with code 3") {
		t.Fatalf("prompt error %v", err)
	}
	ex := s.(agent.Exiter)
	select {
	case <-ex.Done():
	case <-ctx.Done():
		t.Fatal("the session did not end")
	}
	end := ex.Exit()
	if end.Reason != event.EndError || end.ExitCode == nil || *end.ExitCode != 3 || !strings.Contains(end.StderrTail, "got the error reply") {
		t.Errorf("exit %+v", end)
	}
	_ = s.Close(context.Background())
}

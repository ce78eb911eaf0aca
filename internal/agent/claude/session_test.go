package claude

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

// fakeHost plays the engine for the process-handling tests.
type fakeHost struct {
	mu        sync.Mutex
	events    []event.Event
	perms     []agent.PermissionAnswer
	answers   []agent.Answer
	requests  []agent.PermissionRequest
	questions []agent.Question
	native    []string
	changed   chan struct{}
}

func newFakeHost() *fakeHost { return &fakeHost{changed: make(chan struct{}, 1)} }

func (h *fakeHost) poke() {
	select {
	case h.changed <- struct{}{}:
	default:
	}
}

func (h *fakeHost) Emit(_ context.Context, evs ...event.Event) error {
	h.mu.Lock()
	h.events = append(h.events, evs...)
	h.mu.Unlock()
	h.poke()
	return nil
}

func (h *fakeHost) RequestPermission(ctx context.Context, req agent.PermissionRequest) (agent.PermissionAnswer, error) {
	h.mu.Lock()
	h.requests = append(h.requests, req)
	if len(h.perms) == 0 {
		h.mu.Unlock()
		<-ctx.Done()
		return agent.PermissionAnswer{Decision: event.DecisionDeny, By: event.ByDaemon}, nil
	}
	a := h.perms[0]
	h.perms = h.perms[1:]
	h.mu.Unlock()
	return a, nil
}

func (h *fakeHost) AskQuestion(ctx context.Context, q agent.Question) (agent.Answer, error) {
	h.mu.Lock()
	h.questions = append(h.questions, q)
	if len(h.answers) == 0 {
		h.mu.Unlock()
		<-ctx.Done()
		return agent.Answer{Cancelled: true}, nil
	}
	a := h.answers[0]
	h.answers = h.answers[1:]
	h.mu.Unlock()
	return a, nil
}

func (h *fakeHost) SetNativeSessionID(_ context.Context, id string) error {
	h.mu.Lock()
	h.native = append(h.native, id)
	h.mu.Unlock()
	return nil
}

func (h *fakeHost) snapshot() []event.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

// waitFor waits until an emitted event satisfies f.
func (h *fakeHost) waitFor(t *testing.T, what string, f func(event.Event) bool) event.Event {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		for _, e := range h.snapshot() {
			if f(e) {
				return e
			}
		}
		select {
		case <-h.changed:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// natives returns the payloads of native events of a type.
func natives(evs []event.Event, typ string) []json.RawMessage {
	var out []json.RawMessage
	for _, e := range evs {
		if e.Type != event.TypeNative {
			continue
		}
		var n event.Native
		if json.Unmarshal(e.Data, &n) == nil && n.NativeType == typ {
			out = append(out, n.Payload)
		}
	}
	return out
}

// helperAdapter returns the adapter running this test binary in mode.
func helperAdapter(t *testing.T, opts Options) *adapter {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	opts.Binary = func() (string, string, error) { return exe, "test", nil }
	if opts.HomeDir == "" {
		opts.HomeDir = t.TempDir()
	}
	return New(opts).(*adapter)
}

func startHelper(t *testing.T, a *adapter, h *fakeHost, mode string, env map[string]string, perm string) *session {
	t.Helper()
	e := map[string]string{"AGENTBOX_CLAUDE_HELPER": mode}
	for k, v := range env {
		e[k] = v
	}
	s, err := a.Start(t.Context(), agent.Config{SessionID: "ses_test", Cwd: t.TempDir(), Env: e, PermissionMode: perm}, h)
	if err != nil {
		t.Fatal(err)
	}
	sess := s.(*session)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = sess.Close(ctx)
	})
	return sess
}

func text(s string) agent.Input { return agent.Input{Content: []event.ContentPart{event.TextPart(s)}} }

func TestProcessReplayPermissionAllow(t *testing.T) {
	h := newFakeHost()
	h.perms = []agent.PermissionAnswer{{Decision: event.DecisionAllow, OptionID: optAllow, By: event.ByUser}}
	tr, _ := filepath.Abs("testdata/transcripts/stream-permission-allow.jsonl")
	s := startHelper(t, helperAdapter(t, Options{}), h, "replay", map[string]string{"AGENTBOX_CLAUDE_TRANSCRIPT": tr}, "")
	res, err := s.Prompt(t.Context(), text("Create the file please"))
	if err != nil || res.StopReason != event.StopEndTurn {
		t.Fatalf("Prompt = %+v, %v", res, err)
	}
	if len(h.requests) != 1 || h.requests[0].Kind != event.PermCommand || h.requests[0].ItemID == "" ||
		h.requests[0].Title != "Bash: printf approved > approved.txt" {
		t.Fatalf("permission requests %+v", h.requests)
	}
	got := natives(h.snapshot(), "helper_got")
	if len(got) != 1 {
		t.Fatalf("the helper got %d answers", len(got))
	}
	var ans struct {
		Data struct {
			Type     string `json:"type"`
			Response struct {
				Subtype   string           `json:"subtype"`
				RequestID string           `json:"request_id"`
				Response  permissionResult `json:"response"`
			} `json:"response"`
		} `json:"data"`
	}
	if err := json.Unmarshal(got[0], &ans); err != nil {
		t.Fatal(err)
	}
	r := ans.Data.Response
	var input struct{ Command string }
	_ = json.Unmarshal(r.Response.UpdatedInput, &input)
	if ans.Data.Type != "control_response" || r.Subtype != "success" || r.RequestID == "" || r.Response.Behavior != "allow" ||
		input.Command != "printf approved > approved.txt" || len(r.Response.UpdatedPermissions) != 0 {
		t.Errorf("answer %s", got[0])
	}
	checkEvents(t, h.snapshot())
	// The session id the CLI names is recorded (the adapter's own first).
	if len(h.native) < 2 || h.native[0] == h.native[len(h.native)-1] {
		t.Errorf("native session ids %v", h.native)
	}
}

func TestProcessReplayPermissionAlways(t *testing.T) {
	h := newFakeHost()
	h.perms = []agent.PermissionAnswer{{Decision: event.DecisionAllow, OptionID: optAllowAlways, By: event.ByUser}}
	tr, _ := filepath.Abs("testdata/transcripts/stream-permission-allow.jsonl")
	s := startHelper(t, helperAdapter(t, Options{}), h, "replay", map[string]string{"AGENTBOX_CLAUDE_TRANSCRIPT": tr}, "")
	if _, err := s.Prompt(t.Context(), text("go")); err != nil {
		t.Fatal(err)
	}
	got := natives(h.snapshot(), "helper_got")
	if len(got) != 1 || !strings.Contains(string(got[0]), `"updatedPermissions":[{"behavior":"allow","destination":"localSettings","rules":[{"ruleContent":"printf approved *"`) {
		t.Errorf("allow_always did not pass the CLI's suggestions on: %s", got)
	}
}

func TestProcessReplayQuestion(t *testing.T) {
	h := newFakeHost()
	h.answers = []agent.Answer{{OptionID: "2", Text: "Green — calm"}}
	tr, _ := filepath.Abs("testdata/transcripts/stream-question.jsonl")
	s := startHelper(t, helperAdapter(t, Options{}), h, "replay", map[string]string{"AGENTBOX_CLAUDE_TRANSCRIPT": tr}, "")
	if _, err := s.Prompt(t.Context(), text("go")); err != nil {
		t.Fatal(err)
	}
	if len(h.questions) != 1 || len(h.questions[0].Options) != 2 || h.questions[0].ItemID == "" {
		t.Fatalf("questions %+v", h.questions)
	}
	got := natives(h.snapshot(), "helper_got")
	if len(got) != 1 || !strings.Contains(string(got[0]), `"answers":{"Which color do you prefer?":"Green"}`) ||
		!strings.Contains(string(got[0]), `"behavior":"allow"`) {
		t.Errorf("answer %s", got)
	}
}

func TestProcessCrash(t *testing.T) {
	h := newFakeHost()
	s := startHelper(t, helperAdapter(t, Options{}), h, "crash", nil, "")
	_, err := s.Prompt(t.Context(), text("hi"))
	if err == nil || !strings.Contains(err.Error(), "exited with code 3") || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Prompt error %v, want the exit code and stderr", err)
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done did not close")
	}
	end := s.Exit()
	if end.Reason != event.EndError || end.ExitCode == nil || *end.ExitCode != 3 || !strings.Contains(end.StderrTail, "boom: the helper failed on purpose") {
		t.Errorf("Exit = %+v", end)
	}
	if _, err := s.Prompt(t.Context(), text("again")); err == nil {
		t.Error("a prompt to a dead process succeeded")
	}
}

func TestProcessInterrupt(t *testing.T) {
	h := newFakeHost()
	s := startHelper(t, helperAdapter(t, Options{}), h, "slow", nil, "")
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		h.waitFor(t, "a delta", func(e event.Event) bool { return e.Type == event.TypeItemDelta })
		cancel()
	}()
	start := time.Now()
	res, err := s.Prompt(ctx, text("hi"))
	if err != nil || res.StopReason != event.StopInterrupted {
		t.Fatalf("Prompt = %+v, %v", res, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the interrupt took %s", d)
	}
	evs := h.snapshot()
	for _, e := range evs {
		if e.Type == event.TypeError {
			t.Errorf("an interrupt reported an error: %s", e.Data)
		}
	}
	checkEvents(t, evs)
	// The session goes on.
	res, err = s.Prompt(t.Context(), text("again"))
	if err != nil || res.StopReason != event.StopEndTurn {
		t.Fatalf("the next turn: %+v, %v", res, err)
	}
}

func TestProcessInterruptKillsADeafCLI(t *testing.T) {
	h := newFakeHost()
	s := startHelper(t, helperAdapter(t, Options{InterruptTimeout: 300 * time.Millisecond}), h, "deaf", nil, "")
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		h.waitFor(t, "a delta", func(e event.Event) bool { return e.Type == event.TypeItemDelta })
		cancel()
	}()
	res, err := s.Prompt(ctx, text("hi"))
	if err != nil || res.StopReason != event.StopInterrupted || !strings.Contains(res.Message, "killed") {
		t.Fatalf("Prompt = %+v, %v", res, err)
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the process was not killed")
	}
	if end := s.Exit(); end.ExitCode == nil || *end.ExitCode != 128+9 {
		t.Errorf("Exit = %+v, want 137 (SIGKILL)", end)
	}
}

func TestProcessHugeLine(t *testing.T) {
	h := newFakeHost()
	s := startHelper(t, helperAdapter(t, Options{MaxLine: 1 << 20}), h, "huge", map[string]string{"AGENTBOX_CLAUDE_HUGE": "3000000"}, "")
	res, err := s.Prompt(t.Context(), text("hi"))
	if err != nil || res.StopReason != event.StopEndTurn {
		t.Fatalf("Prompt = %+v, %v", res, err)
	}
	var codes, texts []string
	for _, e := range h.snapshot() {
		p, _ := e.Decode()
		switch p := p.(type) {
		case *event.Error:
			codes = append(codes, p.Code)
		case *event.ItemCompleted:
			texts = append(texts, p.Item.Text())
		}
	}
	if !slices.Equal(codes, []string{"output_too_long"}) || !slices.Equal(texts, []string{"after the huge line"}) {
		t.Errorf("errors %v, texts %v", codes, texts)
	}
}

func TestProcessUnknownControlRequest(t *testing.T) {
	h := newFakeHost()
	s := startHelper(t, helperAdapter(t, Options{}), h, "control", nil, "")
	if _, err := s.Prompt(t.Context(), text("hi")); err != nil {
		t.Fatal(err)
	}
	got := natives(h.snapshot(), "helper_got")
	if len(got) != 1 || !strings.Contains(string(got[0]), `"subtype":"error"`) || !strings.Contains(string(got[0]), `"request_id":"req-x"`) {
		t.Errorf("answer to an unknown control request: %s", got)
	}
}

func TestProcessEnvironmentAndArgs(t *testing.T) {
	t.Setenv("AGENTBOX_CANARY_SECRET", "must-not-leak")
	for _, c := range []struct {
		perm, flag string
	}{{"", ""}, {"accept_edits", "acceptEdits"}, {"bypass", "bypassPermissions"}, {"plan", "plan"}} {
		t.Run("mode="+c.perm, func(t *testing.T) {
			h := newFakeHost()
			home := t.TempDir()
			a := helperAdapter(t, Options{HomeDir: home, BaseURL: "http://daemon.invalid", APIKey: "daemon-key", ExtraEnv: map[string]string{"EXTRA": "1"}})
			s := startHelper(t, a, h, "env", map[string]string{"ANTHROPIC_BASE_URL": "http://session.invalid"}, c.perm)
			if _, err := s.Prompt(t.Context(), text("hi")); err != nil {
				t.Fatal(err)
			}
			got := natives(h.snapshot(), "helper_env")
			if len(got) != 1 {
				t.Fatalf("no env reported")
			}
			var r struct {
				Data struct {
					Env  []string `json:"env"`
					Args []string `json:"args"`
					Cwd  string   `json:"cwd"`
				} `json:"data"`
			}
			if err := json.Unmarshal(got[0], &r); err != nil {
				t.Fatal(err)
			}
			env := map[string]string{}
			for _, kv := range r.Data.Env {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			if _, ok := env["AGENTBOX_CANARY_SECRET"]; ok {
				t.Error("the daemon's environment leaked into the CLI's")
			}
			want := map[string]string{
				"HOME": home, "ANTHROPIC_BASE_URL": "http://session.invalid", "ANTHROPIC_API_KEY": "daemon-key",
				"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
				"DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_FAST_MODE": "1", "EXTRA": "1",
			}
			for k, v := range want {
				if env[k] != v {
					t.Errorf("%s=%q, want %q", k, env[k], v)
				}
			}
			exe, _ := os.Executable()
			if !strings.HasPrefix(env["PATH"], filepath.Dir(exe)+":") {
				t.Errorf("PATH %q does not start with the binary's directory", env["PATH"])
			}
			if _, ok := env["IS_SANDBOX"]; ok != (c.flag == "bypassPermissions" && os.Geteuid() == 0) {
				t.Errorf("IS_SANDBOX set: %v", ok)
			}
			args := strings.Join(r.Data.Args, " ")
			for _, w := range []string{"-p --input-format stream-json --output-format stream-json --verbose --permission-prompt-tool stdio --include-partial-messages", "--session-id " + h.native[0]} {
				if !strings.Contains(args, w) {
					t.Errorf("args %q lack %q", args, w)
				}
			}
			if strings.Contains(args, "--permission-mode") != (c.flag != "") || (c.flag != "" && !strings.Contains(args, "--permission-mode "+c.flag)) {
				t.Errorf("args %q, want permission mode %q", args, c.flag)
			}
		})
	}
}

func TestResumeArgs(t *testing.T) {
	a := New(Options{}).(*adapter)
	cmd, err := a.buildCommand(agent.Config{Cwd: "/w", Model: "opus", NativeSessionID: "abc"}, "/bin/claude", "/h", "ignored")
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Join(cmd.args, " ")
	if !strings.Contains(args, "--resume abc") || strings.Contains(args, "--session-id") || !strings.Contains(args, "--model opus") {
		t.Errorf("args %q", args)
	}
	if _, err := a.buildCommand(agent.Config{Cwd: "/w", PermissionMode: "yolo"}, "/bin/claude", "/h", "x"); err == nil {
		t.Error("an unknown permission mode was accepted")
	}
}

func TestCloseEscalates(t *testing.T) {
	h := newFakeHost()
	s := startHelper(t, helperAdapter(t, Options{CloseGrace: 100 * time.Millisecond}), h, "deaf", nil, "")
	// A turn in flight keeps the deaf helper from exiting on EOF.
	go func() { _, _ = s.Prompt(context.Background(), text("hi")) }()
	h.waitFor(t, "a delta", func(e event.Event) bool { return e.Type == event.TypeItemDelta })
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %s", d)
	}
	if end := s.Exit(); end.Reason != event.EndCompleted {
		t.Errorf("Exit after Close = %+v", end)
	}
}

func TestCloseNeverPastContext(t *testing.T) {
	h := newFakeHost()
	s := startHelper(t, helperAdapter(t, Options{CloseGrace: time.Hour}), h, "deaf", nil, "")
	go func() { _, _ = s.Prompt(context.Background(), text("hi")) }()
	h.waitFor(t, "a delta", func(e event.Event) bool { return e.Type == event.TypeItemDelta })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := s.Close(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("Close = %v after %s", err, time.Since(start))
	}
	select {
	case <-s.Done(): // killed when ctx ended
	case <-time.After(10 * time.Second):
		t.Error("the process survived Close")
	}
}

func TestBusy(t *testing.T) {
	h := newFakeHost()
	s := startHelper(t, helperAdapter(t, Options{}), h, "slow", nil, "")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Prompt(ctx, text("hi"))
	}()
	h.waitFor(t, "a delta", func(e event.Event) bool { return e.Type == event.TypeItemDelta })
	if _, err := s.Prompt(t.Context(), text("again")); !errors.Is(err, errBusy) {
		t.Errorf("a second turn: %v, want busy", err)
	}
	cancel()
	<-done
}

func TestInfo(t *testing.T) {
	a := New(Options{Binary: func() (string, string, error) { return "", "", errors.New("not in the cache") }})
	info := a.Info(t.Context())
	if info.Available || !strings.Contains(info.Reason, "not installed") || info.Name != Name || info.Title != "Claude Code" {
		t.Errorf("Info = %+v", info)
	}
	if _, err := a.Start(t.Context(), agent.Config{Cwd: t.TempDir()}, newFakeHost()); err == nil {
		t.Error("Start without a binary succeeded")
	}
	a = New(Options{Binary: func() (string, string, error) { return "/x/claude", "2.1.332", nil }})
	info = a.Info(t.Context())
	if !info.Available || !info.Installed || info.Version != "2.1.332" || info.Path != "/x/claude" {
		t.Errorf("Info = %+v", info)
	}
}

func TestUserMessageLine(t *testing.T) {
	in := agent.Input{Content: []event.ContentPart{
		event.TextPart("look"),
		{Type: event.PartImage, MimeType: "image/png", Data: "iVBORw0KGgo="},
		{Type: event.PartImage, URI: "https://example.com/a.png"},
		{Type: event.PartFile, Path: "notes.txt", Data: "aGVsbG8="},
	}}
	l, err := userMessageLine(in, "sid")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(l)
	want := `{"type":"user","message":{"role":"user","content":[{"text":"look","type":"text"},{"source":{"data":"iVBORw0KGgo=","media_type":"image/png","type":"base64"},"type":"image"},{"source":{"type":"url","url":"https://example.com/a.png"},"type":"image"},{"text":"Attached file notes.txt:\nhello","type":"text"}]},"parent_tool_use_id":null,"session_id":"sid"}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	if _, err := userMessageLine(agent.Input{}, ""); err == nil {
		t.Error("an empty message was accepted")
	}
	if _, err := userMessageLine(agent.Input{Content: []event.ContentPart{{Type: event.PartImage, Data: "%%%"}}}, ""); err == nil {
		t.Error("bad base64 was accepted")
	}
}

// TestInitializeModels: the session's model list is the CLI's answer to
// initialize, whatever it names (here models no table of agentbox has),
// with the CLI's "default" entry current when the session names no model;
// a CLI that does not answer in time still runs the session, without a
// list.
func TestInitializeModels(t *testing.T) {
	answer := `[{"value":"default","displayName":"Default (recommended)","description":"the CLI's pick"},` +
		`{"value":"helper-model-x","resolvedModel":"helper-model-x-1","displayName":"X","description":"only the helper knows it"},{"value":""},` +
		`{"value":"helper-model-y","resolvedModel":"helper-model-x-1","displayName":"Y"}]`
	for _, c := range []struct {
		name, mode, models string
		want               []agent.Choice
		current            string
	}{
		{"answered", "env", answer, []agent.Choice{
			{ID: "default", Name: "Default (recommended)", Description: "the CLI's pick"},
			{ID: "helper-model-x", Name: "X", Description: "only the helper knows it"},
			{ID: "helper-model-y", Name: "Y"},
			{ID: "helper-model-x-1", Name: "helper-model-x-1", Description: "only the helper knows it"}}, "default"},
		{"empty", "env", "[]", nil, ""},
		{"no answer", "mute-init", answer, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Only the CLI that never answers waits out the timeout; the
			// others have all the time a loaded machine needs.
			timeout := 30 * time.Second
			if c.mode == "mute-init" {
				timeout = 300 * time.Millisecond
			}
			a := helperAdapter(t, Options{InitTimeout: timeout})
			s := startHelper(t, a, newFakeHost(), c.mode, map[string]string{"AGENTBOX_CLAUDE_MODELS": c.models}, "")
			cat := s.Catalog()
			if !slices.Equal(cat.Models, c.want) || cat.Model != c.current {
				t.Errorf("catalog %+v, want models %+v, current %q", cat, c.want, c.current)
			}
			select {
			case <-s.Exited():
				t.Errorf("the CLI exited: %s", s.ExitDesc())
			default:
			}
		})
	}
}

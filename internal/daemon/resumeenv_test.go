package daemon

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/mock"
)

// keyedMock is the resumable mock agent calling the OpenAI API with key as
// its default credential: what an adapter gets from the daemon's own
// environment (see Agents).
type keyedMock struct {
	resumable
	key string
}

func (k keyedMock) Providers(cfg agent.Config) []agent.Provider {
	return []agent.Provider{agent.OpenAI(cfg.Env, "", k.key)}
}

// syncBuffer is a log sink safe for the daemon's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

// TestResumeAfterRestartEnv restarts a real daemon between create and
// resume: the env values a client gave are in neither its database nor its
// log; a resume without them answers 422 env-required naming exactly the
// variables to send, and works with them; a session whose credential the
// daemon holds itself resumes without the client sending anything.
func TestResumeAfterRestartEnv(t *testing.T) {
	dataDir := t.TempDir()
	logs := &syncBuffer{}
	run := func() (*client.Client, func()) {
		reg := agent.NewRegistry()
		reg.Register("mock", resumable{mock.New()})
		reg.Register("keyed", keyedMock{resumable{mock.New()}, "daemon-held-key"})
		d, err := New(t.Context(), Config{Listen: "127.0.0.1:0", DataDir: dataDir, Agents: reg,
			Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Serve(ctx) }()
		c, err := client.New(d.URL(), client.WithToken(d.Token()))
		if err != nil {
			t.Fatal(err)
		}
		stopped := false
		stop := func() {
			if !stopped {
				stopped = true
				cancel()
				if err := <-done; err != nil {
					t.Errorf("daemon: %v", err)
				}
			}
		}
		t.Cleanup(stop)
		return c, stop
	}
	const secret = "client-env-secret-value"
	c, stop := run()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	plain, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock", Env: map[string]string{"TOKEN_A": secret + "a", "TOKEN_B": secret + "b"}})
	if err != nil {
		t.Fatal(err)
	}
	keyed, err := c.CreateSession(ctx, client.CreateSession{Agent: "keyed", Env: map[string]string{"OPENAI_API_KEY": secret + "k"}})
	if err != nil {
		t.Fatal(err)
	}
	stop()

	c, _ = run()
	_, err = c.Resume(ctx, plain.ID, client.ResumeSession{})
	var apiErr *client.APIError
	if !client.IsEnvRequired(err) || !asAPIError(err, &apiErr) || apiErr.Status != 422 || !strings.Contains(apiErr.Detail, "env TOKEN_A, TOKEN_B,") {
		t.Fatalf("resume without the env: %v, want 422 env-required naming TOKEN_A and TOKEN_B", err)
	}
	if _, err := c.Resume(ctx, plain.ID, client.ResumeSession{Env: map[string]string{"TOKEN_A": "x"}}); !client.IsEnvRequired(err) || !strings.Contains(err.Error(), "env TOKEN_B,") {
		t.Fatalf("resume with part of the env: %v, want env-required naming TOKEN_B only", err)
	}
	if _, err := c.Resume(ctx, plain.ID, client.ResumeSession{Env: map[string]string{"TOKEN_A": "x", "TOKEN_B": "y"}}); err != nil {
		t.Fatalf("resume with the env: %v", err)
	}
	if _, err := c.Resume(ctx, keyed.ID, client.ResumeSession{}); err != nil {
		t.Fatalf("resume of a session whose credential the daemon holds: %v", err)
	}
	after, _ := c.LastSeq(ctx, keyed.ID)
	tr, err := c.SendMessage(ctx, keyed.ID, client.SendMessage{Text: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitTurn(ctx, keyed.ID, tr.TurnID, after, nil); err != nil {
		t.Fatal(err)
	}

	var disk []byte
	files, _ := filepath.Glob(filepath.Join(dataDir, "*"))
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			disk = append(disk, b...)
		}
	}
	if bytes.Contains(disk, []byte(secret)) {
		t.Error("a client env value is in the daemon's data directory")
	}
	if bytes.Contains(logs.Bytes(), []byte(secret)) {
		t.Error("a client env value is in the daemon's log")
	}
	if !bytes.Contains(disk, []byte("TOKEN_B")) {
		t.Error("the env names are not in the daemon's database")
	}
}

func asAPIError(err error, target **client.APIError) bool { return errors.As(err, target) }

// TestContentRefusedOverHTTP: a message with an image for an agent that
// does not take images (the mock) is refused with 422 unsupported-content
// naming the part; nothing reaches the agent.
func TestContentRefusedOverHTTP(t *testing.T) {
	c, _, _ := runDaemon(t, t.TempDir(), "")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.SendMessage(ctx, s.ID, client.SendMessage{Content: []event.ContentPart{
		event.TextPart("what is this?"), {Type: event.PartImage, MimeType: "image/png", Data: "aGk="}}})
	var apiErr *client.APIError
	if !client.IsUnsupportedContent(err) || !asAPIError(err, &apiErr) || apiErr.Status != 422 ||
		!strings.Contains(apiErr.Detail, "content[1]: agent mock does not accept image parts") {
		t.Fatalf("image to the mock agent: %v", err)
	}
	evs, err := c.Events(ctx, s.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Events {
		if e.Type == event.TypeTurnStarted {
			t.Fatal("the refused message started a turn")
		}
	}
}

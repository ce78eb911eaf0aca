package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/engine"
)

// providerAgent is testAgent calling the OpenAI API with key as the
// adapter's default: the key the daemon's own environment gives it.
type providerAgent struct {
	*testAgent
	key string
}

func (a providerAgent) Providers(cfg agent.Config) []agent.Provider {
	return []agent.Provider{agent.OpenAI(cfg.Env, "", a.key)}
}

// capsAgent is testAgent declaring other capabilities.
type capsAgent struct {
	*testAgent
	caps agent.Capabilities
}

func (a capsAgent) Info(ctx context.Context) agent.Info {
	in := a.testAgent.Info(ctx)
	in.Capabilities = a.caps
	return in
}

// TestResumeAfterRestartNeedsClientEnv: the env a client gives at create
// is never stored, only its names; after a restart, a resume (or a
// message to a stopped session) without a variable the daemon does not
// hold itself is refused with an EnvRequiredError naming exactly the
// missing ones, and succeeds once they are sent. A credential the daemon
// holds (the adapter's default from its environment) is not asked for.
func TestResumeAfterRestartNeedsClientEnv(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ta := &testAgent{exit: make(chan struct{})}
	reg := agent.NewRegistry()
	reg.Register("test", ta)
	reg.Register("openai", providerAgent{testAgent: ta, key: "daemon-held-key"})
	const secret = "client-secret-value"
	old := engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: t.TempDir(), Log: log, IdleTimeout: 50 * time.Millisecond})
	ctx := t.Context()
	plain, err := old.Create(ctx, engine.CreateParams{Agent: "test", Env: map[string]string{"API_KEY": secret + "-1", "OTHER": secret + "-2"}})
	if err != nil {
		t.Fatal(err)
	}
	withKey, err := old.Create(ctx, engine.CreateParams{Agent: "openai", Env: map[string]string{"OPENAI_API_KEY": secret + "-3", "EXTRA": secret + "-4"}})
	if err != nil {
		t.Fatal(err)
	}
	// Both idle agents are stopped: their env is parked in memory only.
	waitFor(t, old, plain.ID, 0, event.TypeSessionEnded)
	waitFor(t, old, withKey.ID, 0, event.TypeSessionEnded)
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := old.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}

	m := engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: t.TempDir(), Log: log})
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	if _, err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Get(ctx, plain.ID); err != nil || got.Status != engine.StatusStopped || !slices.Equal(got.EnvNames, []string{"API_KEY", "OTHER"}) {
		t.Fatalf("stored session %+v, %v", got, err)
	}
	for _, tc := range []struct {
		name string
		id   string
		env  map[string]string
		want []string
	}{
		{"nothing sent", plain.ID, nil, []string{"API_KEY", "OTHER"}},
		{"empty env", plain.ID, map[string]string{}, []string{"API_KEY", "OTHER"}},
		{"one of two", plain.ID, map[string]string{"API_KEY": "k"}, []string{"OTHER"}},
		{"daemon holds the key", withKey.ID, nil, []string{"EXTRA"}},
	} {
		_, err := m.Resume(ctx, tc.id, tc.env)
		var ee *engine.EnvRequiredError
		if !errors.As(err, &ee) || !errors.Is(err, engine.ErrEnvRequired) || !slices.Equal(ee.Names, tc.want) {
			t.Errorf("%s: resume: %v, want an EnvRequiredError naming %v", tc.name, err, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), strings.Join(tc.want, ", ")) {
			t.Errorf("%s: %q does not name %v", tc.name, err, tc.want)
		}
	}
	// A message to the stopped session gets the same answer, and starts
	// nothing.
	if _, err := m.Send(ctx, plain.ID, []event.ContentPart{event.TextPart("hi")}); !errors.Is(err, engine.ErrEnvRequired) || !strings.Contains(err.Error(), "API_KEY, OTHER") {
		t.Fatalf("message to a stopped session without its env: %v", err)
	}
	if got, _ := m.Get(ctx, plain.ID); got.Status != engine.StatusStopped {
		t.Fatalf("after the refused resumes the session is %s", got.Status)
	}

	// With them it resumes, and the agent gets them.
	if _, err := m.Resume(ctx, plain.ID, map[string]string{"API_KEY": "a", "OTHER": "b"}); err != nil {
		t.Fatalf("resume with the env: %v", err)
	}
	if _, err := m.Resume(ctx, withKey.ID, map[string]string{"EXTRA": "x"}); err != nil {
		t.Fatalf("resume with the env the daemon does not hold: %v", err)
	}
	ta.mu.Lock()
	envs := fmt.Sprint(ta.envs[len(ta.envs)-2:])
	ta.mu.Unlock()
	if envs != "[map[API_KEY:a OTHER:b] map[EXTRA:x]]" {
		t.Fatalf("resumed agents got env %s", envs)
	}

	// No value the client gave reached the database (its WAL included) or
	// the log; the names did reach the database.
	var db []byte
	files, _ := filepath.Glob(filepath.Join(dir, "a.db*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		db = append(db, b...)
	}
	if bytes.Contains(db, []byte(secret)) || bytes.Contains(logs.Bytes(), []byte(secret)) {
		t.Fatalf("a client env value reached the database (%v) or the log (%v)", bytes.Contains(db, []byte(secret)), bytes.Contains(logs.Bytes(), []byte(secret)))
	}
	if !bytes.Contains(db, []byte("OTHER")) {
		t.Fatal("the env names are not in the database")
	}
}

// TestContentAgainstCapabilities: a message part of a type the session's
// agent does not accept refuses the whole message, naming the part, before
// any turn starts; one it accepts goes through.
func TestContentAgainstCapabilities(t *testing.T) {
	ta := &testAgent{exit: make(chan struct{})}
	reg := agent.NewRegistry()
	reg.Register("text", ta)
	reg.Register("images", capsAgent{testAgent: ta, caps: agent.Capabilities{Images: true, Resume: true}})
	m := engine.New(engine.Config{Store: openStore(t, t.TempDir()), Agents: reg, WorkspaceDir: t.TempDir()})
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	ctx := t.Context()
	text, err := m.Create(ctx, engine.CreateParams{Agent: "text"})
	if err != nil {
		t.Fatal(err)
	}
	images, err := m.Create(ctx, engine.CreateParams{Agent: "images"})
	if err != nil {
		t.Fatal(err)
	}
	image := event.ContentPart{Type: event.PartImage, MimeType: "image/png", Data: "aGk="}
	file := event.ContentPart{Type: event.PartFile, Path: "notes.txt"}
	for _, tc := range []struct {
		id      string
		content []event.ContentPart
		index   int
		typ     event.PartType
		agent   string
	}{
		{text.ID, []event.ContentPart{event.TextPart("look"), image}, 1, event.PartImage, "text"},
		{text.ID, []event.ContentPart{file, image}, 0, event.PartFile, "text"},
		{images.ID, []event.ContentPart{image, event.TextPart("and"), file}, 2, event.PartFile, "images"},
	} {
		_, err := m.Send(ctx, tc.id, tc.content)
		var ce *engine.ContentError
		if !errors.As(err, &ce) || !errors.Is(err, engine.ErrUnsupportedContent) || ce.Index != tc.index || ce.Type != tc.typ {
			t.Fatalf("send %v to %s: %v, want content[%d] (%s) refused", tc.content, tc.agent, err, tc.index, tc.typ)
		}
		want := fmt.Sprintf("content[%d]: agent %s does not accept %s parts", tc.index, tc.agent, tc.typ)
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%q does not say %q", err, want)
		}
	}
	evs, err := m.Events(ctx, text.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if containsType(evs, event.TypeTurnStarted) {
		t.Fatalf("a refused message started a turn: %v", types(evs))
	}
	if _, err := m.Send(ctx, images.ID, []event.ContentPart{event.TextPart("look"), image}); err != nil {
		t.Fatalf("an image to an agent that takes images: %v", err)
	}
	waitFor(t, m, images.ID, 0, event.TypeTurnCompleted)
}

// declaringSandboxes declares GH_TOKEN a daemon secret in every policy.
type declaringSandboxes struct{ *fakeSandboxes }

func (declaringSandboxes) DeclaredSecrets(json.RawMessage) (map[string]string, error) {
	return map[string]string{"GH_TOKEN": "github"}, nil
}

// TestResumeDeclaredSecretNotAsked: a variable the session's policy
// declares as a daemon secret holds the secret's placeholder whatever env
// says, so a resume after a restart does not ask for it; the others it
// does.
func TestResumeDeclaredSecretNotAsked(t *testing.T) {
	st := openStore(t, t.TempDir())
	sb := declaringSandboxes{newFakeSandboxes()}
	reg := agent.NewRegistry()
	reg.Register("test", &testAgent{exit: make(chan struct{})})
	cfg := engine.Config{Store: st, Agents: reg, WorkspaceDir: t.TempDir(), Sandboxes: sb}
	old := engine.New(cfg)
	ctx := t.Context()
	s, err := old.Create(ctx, engine.CreateParams{Agent: "test", Policy: json.RawMessage(`"default"`),
		Env: map[string]string{"GH_TOKEN": "ghp_" + strings.Repeat("a", 36), "PLAIN": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := old.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	m := engine.New(cfg)
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	if _, err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	var ee *engine.EnvRequiredError
	if _, err := m.Resume(ctx, s.ID, nil); !errors.As(err, &ee) || !slices.Equal(ee.Names, []string{"PLAIN"}) {
		t.Fatalf("resume without env: %v, want PLAIN (only) asked for", err)
	}
	if _, err := m.Resume(ctx, s.ID, map[string]string{"PLAIN": "v"}); err != nil {
		t.Fatalf("resume with PLAIN: %v", err)
	}
}

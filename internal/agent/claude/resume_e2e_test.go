package claude

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/fakellm"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/metrics"
	"github.com/agentbox/agentbox/internal/store/sqlite"
)

// daemonOn is a whole daemon (store, engine, API) on a data dir, as a
// restart would build it.
type daemonOn struct {
	c    *client.Client
	stop func()
}

func startDaemonOn(t *testing.T, dir, bin string) daemonOn {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "agentbox.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := agent.NewRegistry()
	reg.Register(Name, New(Options{
		Binary:  func() (string, string, error) { return bin, "", nil },
		HomeDir: filepath.Join(dir, "claude-home"),
	}))
	mgr := engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: filepath.Join(dir, "workspaces")})
	if _, err := mgr.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(httpapi.New(httpapi.Config{}, mgr, metrics.New(), nil))
	c, err := client.New(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := mgr.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		api.Close()
		_ = st.Close()
	}
	t.Cleanup(stop)
	return daemonOn{c: c, stop: stop}
}

// TestE2EResumeAfterRestart: a session whose daemon stopped is resumed
// through the API by a new daemon on the same data dir; the real CLI is
// started with --resume and continues the same conversation (the fake LLM
// answers the second prompt differently only if it sees the first exchange
// in the history).
func TestE2EResumeAfterRestart(t *testing.T) {
	bin, _ := claudeBinary(t)
	llm, err := fakellm.Start(context.Background(), fakellm.Options{Default: fakellm.ScenarioMulti})
	if err != nil {
		t.Fatal(err)
	}
	defer llm.Close()
	env := map[string]string{"ANTHROPIC_BASE_URL": llm.URL(), "ANTHROPIC_API_KEY": fakeKey}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	d := startDaemonOn(t, dir, bin)
	s, err := d.c.CreateSession(ctx, client.CreateSession{Agent: Name, PermissionMode: "accept_edits", Cwd: t.TempDir(), Env: env})
	if err != nil {
		t.Fatal(err)
	}
	if msg := runText(ctx, t, d.c, s.ID, "first"); msg != "done" {
		t.Fatalf("first answer %q", msg)
	}
	first, err := d.c.GetSession(ctx, s.ID)
	if err != nil || first.NativeSessionID == "" {
		t.Fatalf("no native session id: %+v %v", first, err)
	}
	d.stop()

	d = startDaemonOn(t, dir, bin)
	got, err := d.c.GetSession(ctx, s.ID)
	if err != nil || got.Status != client.StatusInterrupted {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	if _, err := d.c.Send(ctx, s.ID, "too early"); !client.IsNotLive(err) {
		t.Fatalf("send before resume: %v", err)
	}
	resumed, err := d.c.Resume(ctx, s.ID, client.ResumeSession{Env: env})
	if err != nil {
		t.Fatal(err)
	}
	if resumed.Status != client.StatusIdle || resumed.NativeSessionID != first.NativeSessionID {
		t.Fatalf("resumed %+v, native id was %s", resumed, first.NativeSessionID)
	}
	if msg := runText(ctx, t, d.c, s.ID, "second"); msg != "second answer" {
		t.Fatalf("after resume the agent answered %q: the conversation did not continue", msg)
	}
}

// runText runs one turn and returns the assistant's last message.
func runText(ctx context.Context, t *testing.T, c *client.Client, sid, text string) string {
	t.Helper()
	after, err := c.LastSeq(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := c.Send(ctx, sid, text)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	_, err = c.WaitTurn(ctx, sid, tr.TurnID, after, func(e event.Event) error {
		if e.Type == event.TypeItemCompleted {
			p, err := e.Decode()
			if err != nil {
				return err
			}
			if it := p.(*event.ItemCompleted).Item; it.Kind == event.ItemMessage && it.Role == event.RoleAssistant {
				last = it.Text()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return last
}

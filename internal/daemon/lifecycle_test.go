package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/sandbox/process"
)

// serveLifecycle starts a daemon serving the resumable mock agent with the
// given live cap and idle timeout, and returns its client.
func serveLifecycle(t *testing.T, maxLive int, idle time.Duration) (*client.Client, *Daemon) {
	t.Helper()
	reg := agent.NewRegistry()
	reg.Register("mock", resumable{mock.New()})
	d, err := New(t.Context(), Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Agents: reg,
		MaxLiveSessions: maxLive, IdleTimeout: idle, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	c, err := client.New(d.URL(), client.WithToken(d.Token()))
	if err != nil {
		t.Fatal(err)
	}
	return c, d
}

// post sends a raw POST and returns the answer's status, Retry-After and
// problem.
func post(t *testing.T, d *Daemon, path, body string) (int, string, client.Problem) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, d.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.Token())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p client.Problem
	_ = json.NewDecoder(resp.Body).Decode(&p)
	return resp.StatusCode, resp.Header.Get("Retry-After"), p
}

// TestLiveSessionCapOverHTTP: past --max-live-sessions, a create and a
// resume answer 429 with Retry-After and the too-many-live-sessions
// problem; a resume of a live session says to send messages directly.
func TestLiveSessionCapOverHTTP(t *testing.T) {
	c, d := serveLifecycle(t, 1, 0)
	ctx := t.Context()
	a, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	status, retry, p := post(t, d, "/v1/sessions", `{"agent":"mock"}`)
	if n, err := strconv.Atoi(retry); status != http.StatusTooManyRequests || p.Type != client.ProblemTooManyLiveSessions || err != nil || n < 1 {
		t.Fatalf("create over the cap: %d Retry-After %q %+v", status, retry, p)
	}
	if _, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock"}); !client.IsTooManyLiveSessions(err) {
		t.Fatalf("client: create over the cap: %v", err)
	}

	status, _, p = post(t, d, "/v1/sessions/"+a.ID+"/resume", `{}`)
	if status != http.StatusConflict || p.Type != client.ProblemLive || !strings.Contains(p.Detail, "send messages to it directly") {
		t.Fatalf("resume of a live session: %d %+v", status, p)
	}

	// Ended, a's slot is free; while another session holds it, a's
	// resume is over the cap.
	if err := c.DeleteSession(ctx, a.ID, false); err != nil {
		t.Fatal(err)
	}
	b, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatalf("create after a session ended: %v", err)
	}
	status, retry, p = post(t, d, "/v1/sessions/"+a.ID+"/resume", `{}`)
	if status != http.StatusTooManyRequests || p.Type != client.ProblemTooManyLiveSessions || retry == "" {
		t.Fatalf("resume over the cap: %d Retry-After %q %+v", status, retry, p)
	}
	if err := c.DeleteSession(ctx, b.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Resume(ctx, a.ID, client.ResumeSession{}); err != nil {
		t.Fatalf("resume within the cap: %v", err)
	}
}

// waitEvent reads session id's events after seq until one of type typ.
func waitEvent(t *testing.T, c *client.Client, id string, after int64, typ event.Type) []event.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var got []event.Event
	errFound := errors.New("found")
	for ctx.Err() == nil {
		err := c.EventsAll(ctx, id, after, func(e event.Event) error {
			got = append(got, e)
			after = e.Seq
			if e.Type == typ {
				return errFound
			}
			return nil
		})
		if errors.Is(err, errFound) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %s event in session %s", typ, id)
	return nil
}

// TestIdleStopOverHTTP: an idle agent is stopped after --idle-timeout (the
// session reads stopped, session.ended says idle) and the next message
// resumes it transparently.
func TestIdleStopOverHTTP(t *testing.T) {
	c, _ := serveLifecycle(t, 0, 100*time.Millisecond)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	evs := waitEvent(t, c, s.ID, 0, event.TypeSessionEnded)
	p, _ := evs[len(evs)-1].Decode()
	if e := p.(*event.SessionEnded); e.Reason != event.EndIdle {
		t.Fatalf("session.ended %+v", e)
	}
	if got, err := c.GetSession(ctx, s.ID); err != nil || got.Status != client.StatusStopped {
		t.Fatalf("after the idle stop: %+v, %v", got, err)
	}
	turn, err := c.Send(ctx, s.ID, "hello")
	if err != nil {
		t.Fatalf("message to a stopped session: %v", err)
	}
	evs = waitEvent(t, c, s.ID, evs[len(evs)-1].Seq, event.TypeTurnCompleted)
	p, _ = evs[0].Decode()
	if st, ok := p.(*event.SessionStarted); !ok || !st.Resumed {
		t.Fatalf("first event after the message: %s %+v", evs[0].Type, p)
	}
	if last := evs[len(evs)-1]; last.TurnID != turn.TurnID {
		t.Fatalf("turn.completed of %s, want %s", last.TurnID, turn.TurnID)
	}
}

// TestSandboxedSessionShowsItsSandbox: a sandboxed session's
// session.started names its runtime and mechanisms, and GET
// /v1/sessions/{id} says it is sandboxed, under which runtime and policy
// (and, live, the mechanisms); an unsandboxed one says it is not.
func TestSandboxedSessionShowsItsSandbox(t *testing.T) {
	if pr := process.New(process.Options{}).Probe(t.Context()); !pr.Available {
		t.Skipf("this host cannot build sandboxes: %s", pr.Reason)
	}
	c, _ := serveLifecycle(t, 0, 0)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	plain, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Sandboxed || plain.Sandbox != nil {
		t.Fatalf("unsandboxed session reports %v %+v", plain.Sandboxed, plain.Sandbox)
	}
	s, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock", Policy: json.RawMessage(`"agent-default"`)})
	if err != nil {
		t.Fatal(err)
	}
	evs := waitEvent(t, c, s.ID, 0, event.TypeSessionStarted)
	p, _ := evs[len(evs)-1].Decode()
	started := p.(*event.SessionStarted)
	if started.Sandbox == nil || started.Sandbox.Runtime != "process" || len(started.Sandbox.Mechanisms) == 0 {
		t.Fatalf("session.started sandbox %+v", started.Sandbox)
	}
	got, err := c.GetSession(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	sb := got.Sandbox
	if !got.Sandboxed || sb == nil || sb.Runtime != "process" || len(sb.PolicyHash) != 64 ||
		strings.Join(sb.Mechanisms, ",") != strings.Join(started.Sandbox.Mechanisms, ",") {
		t.Fatalf("GET session: sandboxed %v %+v", got.Sandboxed, sb)
	}
	if err := c.DeleteSession(ctx, s.ID, false); err != nil {
		t.Fatal(err)
	}
	got, err = c.GetSession(ctx, s.ID)
	if err != nil || !got.Sandboxed || got.Sandbox == nil || got.Sandbox.PolicyHash != sb.PolicyHash || got.Sandbox.Mechanisms != nil {
		t.Fatalf("GET ended session: %+v, %v", got, err)
	}
}

package docker_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/docker"
	"github.com/agentbox/agentbox/internal/provider/relay"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
	"github.com/agentbox/agentbox/internal/sdkgen/sdktest"
	"github.com/agentbox/agentbox/internal/store/sqlite"
)

// askScript is Node inside the container: argv[2] requests, one after
// the other, through the egress proxy's address to the name localhost on
// port argv[1] (a name no rule of the host's gate settles), each printed
// with its status and the first line of its body. No single quotes: it
// goes in a shell's single quotes.
const askScript = `
const http = require("http"), port = process.argv[1], n = Number(process.argv[2]);
const get = () => new Promise(r => {
  const q = http.request({host: "127.0.0.1", port: 3128, path: "http://localhost:" + port + "/", headers: {host: "localhost:" + port}},
    s => { let b = ""; s.on("data", d => b += d); s.on("end", () => r(s.statusCode + " " + b.split("\n")[0])); });
  q.on("error", e => r("error " + e.code)); q.end();
});
(async () => { for (let i = 0; i < n; i++) console.log("request " + i + ": " + await get()); })();
`

// TestEgressAskCarried: a Docker sandbox's carried connection that no
// rule of the host's gate settles (network.default ask) is asked through
// the host session's own permission flow, as a local sandbox's is: the
// host session's engine raises permission.requested (kind network, the
// destination) during the turn, and its answer decides that one
// connection. Approved: the host server gets exactly that request; the
// next connection asks again, and denied it never reaches the server;
// unanswered it is denied by timeout. Each refusal is a sandbox.violation
// of the host session (coalesced: the counts add up) and an audit record.
//
// The session runs the mock agent through the relay and the host's engine
// (its store, its permission broker) on the real Docker provider. The
// host's gate is made here with network.default ask: the inner daemon
// still refuses a session policy (it cannot build sandboxes in the
// container), so the policy cannot reach the gate from the session yet;
// internal/daemon's TestRelayEgressAsk tests that mapping.
func TestEgressAskCarried(t *testing.T) {
	p, _ := newProvider(t)
	tag, _ := agentImage(t, p)
	hs := startHostServer(t, "asked for")
	const askTimeout = 3 * time.Second

	var mu sync.Mutex
	var records []egress.Record
	srv, err := egress.New(egress.Options{Audit: func(r egress.Record) {
		mu.Lock()
		defer mu.Unlock()
		records = append(records, r)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "agentbox.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	reg := provider.NewRegistry()
	reg.Register(p)
	var asker sandbox.Asker
	rl, err := relay.New(relay.Config{
		Providers: reg, Options: map[string]map[string]string{docker.Name: {"image": tag}},
		Binary: sdktest.Binary(t), Key: key, Log: slog.New(slog.DiscardHandler),
		LastRelayed: func(ctx context.Context, id string) (int64, error) {
			return relay.LastRelayed(ctx, func(ctx context.Context, after int64, limit int) ([]event.Event, error) {
				return st.Events(ctx, id, after, limit)
			})
		},
		Egress: func(_ context.Context, req relay.EgressRequest) (*relay.Egress, error) {
			mu.Lock()
			asker = req.Ask
			mu.Unlock()
			g, err := srv.Gate(egress.Config{Scope: "session", ID: req.SessionID, Network: sandbox.Network{
				Mode: sandbox.NetworkProxy, ProxyPort: provider.EgressPort, Default: egress.DefaultAsk,
				Allow: []string{fmt.Sprintf("127.0.0.1:%d", hs.port)},
			}, Ask: req.Ask, AskTimeout: askTimeout, OnViolation: req.OnViolation})
			if err != nil {
				return nil, err
			}
			return &relay.Egress{Serve: g.Serve, Close: func() { _ = g.Close() }}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	agents := agent.NewRegistry()
	agents.Register(mock.Name, mock.New())
	m := engine.New(engine.Config{Store: st, Agents: agents, WorkspaceDir: t.TempDir(), Remote: rl, StartTimeout: 2 * time.Minute})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	sess, err := m.Create(ctx, engine.CreateParams{Agent: mock.Name, Provider: docker.Name})
	if err != nil {
		t.Fatalf("create a mock session on docker: %v", err)
	}
	defer func() { _ = m.Delete(context.Background(), sess.ID, true) }()
	mu.Lock()
	haveAsker := asker != nil
	mu.Unlock()
	if !haveAsker {
		t.Fatal("the relay gave the host's gate nobody to ask: the host session's permission flow is not its Asker")
	}

	// turn runs the script making n requests; answer decides the i-th
	// network request (nil: left unanswered). It returns the turn's
	// events.
	var after int64
	turn := func(n int, answer func(i int) *event.Decision) []event.Event {
		t.Helper()
		cmd := fmt.Sprintf("/usr/bin/node -e '%s' %d %d", askScript, hs.port, n)
		turnID, err := m.Send(ctx, sess.ID, []event.ContentPart{event.TextPart(mock.ScriptPrompt(mock.Step{Kind: mock.KindCommand, Command: cmd}))})
		if err != nil {
			t.Fatal(err)
		}
		ch, err := m.Subscribe(ctx, sess.ID, after)
		if err != nil {
			t.Fatal(err)
		}
		var evs []event.Event
		asked := 0
		for e := range ch {
			evs = append(evs, e)
			after = e.Seq
			if e.Type == event.TypePermissionRequested {
				pl, err := e.Decode()
				if err != nil {
					t.Fatal(err)
				}
				if pr := pl.(*event.PermissionRequested); pr.Kind == event.PermNetwork {
					if d := answer(asked); d != nil {
						if _, err := m.AnswerPermission(ctx, sess.ID, pr.ID, agent.PermissionAnswer{Decision: *d, By: event.ByUser}); err != nil {
							t.Fatalf("answer %s: %v", pr.ID, err)
						}
					}
					asked++
				}
			}
			if e.Type == event.TypeTurnCompleted && e.TurnID == turnID {
				return evs
			}
		}
		t.Fatalf("turn %s did not complete: %v", turnID, ctx.Err())
		return nil
	}
	allow, deny := event.DecisionAllow, event.DecisionDeny

	t.Log("approved once, then denied: an answer is good for one connection")
	evs := turn(2, func(i int) *event.Decision { return []*event.Decision{&allow, &deny}[i] })
	out := dumpAll(evs)
	for _, want := range []string{"request 0: 200 asked for", "request 1: 403 "} {
		if !strings.Contains(out, want) {
			t.Errorf("the turn's events lack %q:\n%s", want, out)
		}
	}
	if n := hs.hits.Load(); n != 1 {
		t.Errorf("the host server saw %d requests, want 1 (the approved one)", n)
	}

	t.Log("unanswered: denied by timeout")
	evs = append(evs, turn(1, func(int) *event.Decision { return nil })...)
	out = dumpAll(evs)
	if !strings.Contains(out, "request 0: 403 ") {
		t.Errorf("the unanswered request was not refused:\n%s", out)
	}
	if n := hs.hits.Load(); n != 1 {
		t.Errorf("the host server saw %d requests, want 1", n)
	}

	var requested []event.PermissionRequested
	var resolved []event.PermissionResolved
	violations := 0
	for _, e := range evs {
		pl, err := e.Decode()
		if err != nil {
			continue
		}
		switch v := pl.(type) {
		case *event.PermissionRequested:
			requested = append(requested, *v)
		case *event.PermissionResolved:
			resolved = append(resolved, *v)
		case *event.SandboxViolation:
			if v.Kind != event.ViolationNetwork || v.Host != "localhost" || v.Port != hs.port || v.Rule != "ask" || v.Detail == "" {
				t.Errorf("violation %+v; want a network one of localhost:%d, rule ask, with a reason", v, hs.port)
			}
			violations += max(v.Count, 1)
		}
	}
	if len(requested) != 3 {
		t.Fatalf("%d permission requests on the host session, want 3 (one per connection):\n%s", len(requested), out)
	}
	for _, r := range requested {
		if r.Kind != event.PermNetwork || r.Host != "localhost" || r.Port != hs.port {
			t.Errorf("permission request %+v; want kind network, localhost:%d", r, hs.port)
		}
	}
	want := []struct {
		d  event.Decision
		by event.DecidedBy
	}{{allow, event.ByUser}, {deny, event.ByUser}, {deny, event.ByTimeout}}
	if len(resolved) != len(want) {
		t.Fatalf("resolutions %+v, want %v", resolved, want)
	}
	for i, w := range want {
		if resolved[i].ID != requested[i].ID || resolved[i].Decision != w.d || resolved[i].By != w.by {
			t.Errorf("resolution %d %+v; want %s of %s by %s", i, resolved[i], w.d, requested[i].ID, w.by)
		}
	}
	if violations != 2 {
		t.Errorf("the host session's network violations count %d refusals, want 2 (denied, timed out)", violations)
	}
	mu.Lock()
	defer mu.Unlock()
	var allows, denies int
	for _, r := range records {
		if r.Type != "egress" || r.ID != sess.ID || r.Port != hs.port {
			continue
		}
		switch r.Decision {
		case "allow":
			allows++
		case "deny":
			denies++
		}
	}
	if allows != 1 || denies != 2 {
		t.Errorf("audit records of localhost:%d: %d allowed, %d denied; want 1 and 2", hs.port, allows, denies)
	}
}

// dumpAll is the events' JSON, one a line.
func dumpAll(evs []event.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "%s %s\n", e.Type, e.Data)
	}
	return b.String()
}

// TestEgressDeniedCarried: through a whole host daemon, a connection the
// host's gate of a Docker sandbox refuses (the session has no policy, so
// nothing but its model routes is allowed) is a sandbox.violation of the
// host session, read through the host's API, besides its audit record;
// the server never sees it.
func TestEgressDeniedCarried(t *testing.T) {
	p, _ := newProvider(t)
	tag, _ := agentImage(t, p)
	hs := startHostServer(t, "must not be reached")
	reg := provider.NewRegistry()
	reg.Register(p)
	d, err := daemon.New(t.Context(), daemon.Config{
		Listen: "127.0.0.1:0", DataDir: t.TempDir(), Log: slog.New(slog.DiscardHandler),
		Providers: reg, ProviderOptions: map[string]map[string]string{docker.Name: {"image": tag}},
		ProviderBinary: sdktest.Binary(t), StartTimeout: 2 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stopServe := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(serveCtx) }()
	defer func() {
		stopServe()
		if err := <-served; err != nil {
			t.Errorf("host daemon: %v", err)
		}
	}()
	c, err := client.New(d.URL(), client.WithToken(d.Token()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	sess, err := c.CreateSession(ctx, client.CreateSession{Agent: mock.Name, Provider: docker.Name})
	if err != nil {
		t.Fatalf("create a mock session on docker: %v", err)
	}
	defer func() { _ = c.DeleteSession(context.Background(), sess.ID, true) }()
	cmd := fmt.Sprintf("/usr/bin/node -e '%s' %d 1", askScript, hs.port)
	tr, err := c.Send(ctx, sess.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindCommand, Command: cmd}))
	if err != nil {
		t.Fatal(err)
	}
	var evs []event.Event
	if _, err := c.WaitTurn(ctx, sess.ID, tr.TurnID, 0, func(e event.Event) error { evs = append(evs, e); return nil }); err != nil {
		t.Fatal(err)
	}
	out := dumpAll(evs)
	if !strings.Contains(out, "request 0: 403 ") || hs.hits.Load() != 0 {
		t.Fatalf("the request was not refused (hits %d):\n%s", hs.hits.Load(), out)
	}
	var found []event.SandboxViolation
	for _, e := range evs {
		if pl, err := e.Decode(); err == nil {
			if v, ok := pl.(*event.SandboxViolation); ok {
				found = append(found, *v)
			}
		}
	}
	if len(found) != 1 || found[0].Kind != event.ViolationNetwork || found[0].Host != "localhost" || found[0].Port != hs.port ||
		found[0].Rule != "default:deny" || !strings.Contains(found[0].Detail, "allow list") {
		t.Errorf("the host session's violations %+v; want one, network, localhost:%d, rule default:deny, with the reason\n%s", found, hs.port, out)
	}
}

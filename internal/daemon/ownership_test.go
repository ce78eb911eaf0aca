package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/reexec"
)

// ownerHelper is the name the test binary runs a daemon process under
// (TestOwnershipThreeDaemons): the daemon package's New and Serve, with the
// mock agent declaring it can resume (it keeps no conversation), on the
// store, address, token and lease TTL of its environment, until SIGKILL or
// SIGTERM.
const ownerHelper = "agentbox-test-owner-daemon"

func init() { reexec.Register(ownerHelper, ownerDaemonMain) }

// resumableMock is the mock agent declaring that it can resume a session.
type resumableMock struct{ agent.Adapter }

func (r resumableMock) Info(ctx context.Context) agent.Info {
	in := r.Adapter.Info(ctx)
	in.Capabilities.Resume = true
	return in
}

func ownerDaemonMain() int {
	ttl, err := time.ParseDuration(os.Getenv("OWNER_LEASE_TTL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	reg := agent.NewRegistry()
	reg.Register("mock", resumableMock{mock.New()})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	d, err := daemon.New(ctx, daemon.Config{
		Listen: os.Getenv("OWNER_LISTEN"), DataDir: os.Getenv("OWNER_DATA_DIR"), Store: os.Getenv("OWNER_STORE"),
		Token: os.Getenv("OWNER_TOKEN"), Advertise: os.Getenv("OWNER_ADVERTISE"), LeaseTTL: ttl,
		GlobalPolicy: os.Getenv("OWNER_GLOBAL_POLICY"),
		Agents:       reg, Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := d.Serve(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// ownerProc is one daemon process of the test.
type ownerProc struct {
	name string
	cmd  *exec.Cmd
	url  string
	c    *client.Client
	log  *strings.Builder
	mu   *sync.Mutex
}

func (p *ownerProc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

type syncWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w syncWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(b)
}

// startOwnerDaemon starts a daemon process on the store and waits until it
// answers.
func startOwnerDaemon(t *testing.T, name, store, token, globalPolicy string, ttl time.Duration) *ownerProc {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	url := "http://" + addr
	p := &ownerProc{name: name, url: url, log: &strings.Builder{}, mu: &sync.Mutex{}}
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Args[0] = ownerHelper
	cmd.Env = append(os.Environ(), "OWNER_LISTEN="+addr, "OWNER_DATA_DIR="+t.TempDir(), "OWNER_STORE="+store,
		"OWNER_TOKEN="+token, "OWNER_ADVERTISE="+url, "OWNER_LEASE_TTL="+ttl.String(), "OWNER_GLOBAL_POLICY="+globalPolicy)
	cmd.Stdout, cmd.Stderr = syncWriter{p.mu, p.log}, syncWriter{p.mu, p.log}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.cmd = cmd
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
		if t.Failed() {
			t.Logf("daemon %s log:\n%s", name, p.logs())
		}
	})
	if p.c, err = client.New(url, client.WithToken(token)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := p.c.Health(ctx)
		cancel()
		if err == nil {
			return p
		}
		if time.Now().After(deadline) || cmd.ProcessState != nil {
			t.Fatalf("daemon %s not healthy: %v\n%s", name, err, p.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// collector is a client following a session's log through one daemon, and
// through the next ones when that daemon goes away, resuming after the
// last event it saw.
type collector struct {
	via []*ownerProc // in the order tried
	mu  sync.Mutex
	evs []event.Event
	// seen is signalled after every event.
	seen chan struct{}
}

func (c *collector) run(ctx context.Context, id string) {
	for i := 0; ctx.Err() == nil; i++ {
		p := c.via[i%len(c.via)]
		c.mu.Lock()
		after := int64(0)
		if len(c.evs) > 0 {
			after = c.evs[len(c.evs)-1].Seq
		}
		c.mu.Unlock()
		st := p.c.Stream(ctx, id, after, client.WithMaxAttempts(1))
		for st.Next() {
			c.mu.Lock()
			c.evs = append(c.evs, st.Event())
			c.mu.Unlock()
			select {
			case c.seen <- struct{}{}:
			default:
			}
		}
		_ = st.Close()
		if ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func (c *collector) events() []event.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.evs)
}

// waitFor waits until the collector has seen an event that ok accepts
// and returns it.
func (c *collector) waitFor(t *testing.T, what string, ok func(e event.Event) bool) event.Event {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		for _, e := range c.events() {
			if ok(e) {
				return e
			}
		}
		select {
		case <-c.seen:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			evs := c.events()
			t.Fatalf("no %s among the %d events seen (the last: %+v)", what, len(evs), evs[max(0, len(evs)-3):])
		}
	}
}

func ofType(typ event.Type, turnID string) func(event.Event) bool {
	return func(e event.Event) bool { return e.Type == typ && (turnID == "" || e.TurnID == turnID) }
}

// TestOwnershipThreeDaemons runs three daemon processes on one PostgreSQL
// database (AGENTBOX_TEST_POSTGRES): each session is driven by the daemon
// it was created through, while clients stream it through another one and
// send its messages, interrupts and permission answers through yet
// another, which forwards them. The owner of a session is killed with
// SIGKILL in the middle of a turn: after its lease expires another daemon
// takes the session over (the log says which, and how the turn ended),
// every event a client saw is still there, without gap or duplicate, and
// the session's next message resumes its agent on another daemon.
func TestOwnershipThreeDaemons(t *testing.T) {
	dsn := os.Getenv("AGENTBOX_TEST_POSTGRES")
	if dsn == "" {
		t.Skip("AGENTBOX_TEST_POSTGRES is not set: no PostgreSQL server (scripts/test starts one with scripts/postgres and sets it)")
	}
	schema := fmt.Sprintf("agentbox_owners_%d_%d", os.Getpid(), time.Now().UnixNano())
	admin := withSearchPath(t, dsn, "public")
	execSQL(t, admin, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema)
	t.Cleanup(func() { execSQL(t, admin, "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	store := withSearchPath(t, dsn, schema)
	const token = "ownership-test-token-0123456789abcdef"
	const ttl = 2 * time.Second
	// The sessions' workspaces are on storage every daemon shares (here,
	// one host's): a session resumes on another daemon in its own
	// directory.
	projects := filepath.Join(t.TempDir(), "projects")
	globalPolicy := filepath.Join(t.TempDir(), "global.yaml")
	if err := os.WriteFile(globalPolicy, fmt.Appendf(nil, "version: 1\nfilesystem:\n  workspace_roots: [%s]\n", projects), 0o600); err != nil {
		t.Fatal(err)
	}

	var ds [3]*ownerProc
	var wg sync.WaitGroup
	for i := range ds {
		wg.Go(func() { ds[i] = startOwnerDaemon(t, fmt.Sprintf("d%d", i), store, token, globalPolicy, ttl) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	// Session i is created through (so driven by) daemon i, streamed
	// through daemon i+1 (then i+2 should that one go away) and sent to
	// through daemon i+2.
	var ses [3]client.Session
	var cols [3]*collector
	var daemonIDs [3]string
	for i := range ds {
		cwd := filepath.Join(projects, fmt.Sprintf("s%d", i))
		if err := os.MkdirAll(cwd, 0o700); err != nil {
			t.Fatal(err)
		}
		s, err := ds[i].c.CreateSession(ctx, client.CreateSession{Agent: "mock", Cwd: cwd})
		if err != nil {
			t.Fatalf("CreateSession through d%d: %v", i, err)
		}
		ses[i] = s
		cols[i] = &collector{via: []*ownerProc{ds[(i+1)%3], ds[(i+2)%3]}, seen: make(chan struct{}, 1)}
		wg.Go(func() { cols[i].run(ctx, s.ID) })
		started := cols[i].waitFor(t, "session.started", ofType(event.TypeSessionStarted, ""))
		var p event.SessionStarted
		if err := json.Unmarshal(started.Data, &p); err != nil || p.Daemon == "" {
			t.Fatalf("session.started through d%d: %s, %v: want the daemon's id", i, started.Data, err)
		}
		daemonIDs[i] = p.Daemon
	}
	defer wg.Wait()
	defer cancel()
	if daemonIDs[0] == daemonIDs[1] || daemonIDs[1] == daemonIDs[2] || daemonIDs[0] == daemonIDs[2] {
		t.Fatalf("daemon ids %v: want three", daemonIDs)
	}
	sender := func(i int) *client.Client { return ds[(i+2)%3].c }

	// A permission asked by d2's agent, answered through d1 (forwarded).
	tr2, err := sender(2).Send(ctx, ses[2].ID, "/scenario permission-write")
	if err != nil {
		t.Fatalf("Send to session 2 through d1: %v", err)
	}
	asked := cols[2].waitFor(t, "permission.requested", ofType(event.TypePermissionRequested, tr2.TurnID))
	var ask event.PermissionRequested
	if err := json.Unmarshal(asked.Data, &ask); err != nil {
		t.Fatal(err)
	}
	if _, err := ds[1].c.AnswerPermission(ctx, ses[2].ID, ask.ID, client.PermissionAnswer{Decision: "allow"}); err != nil {
		t.Fatalf("AnswerPermission through d1 for d2's session: %v", err)
	}
	cols[2].waitFor(t, "the turn's end", ofType(event.TypeTurnCompleted, tr2.TurnID))

	// A long turn on d1's agent, interrupted through d0 (forwarded).
	long := `/mock [{"kind":"long","count":100000,"delay":"2ms"}]`
	tr1, err := sender(1).Send(ctx, ses[1].ID, long)
	if err != nil {
		t.Fatalf("Send to session 1 through d0: %v", err)
	}
	cols[1].waitFor(t, "turn.started", ofType(event.TypeTurnStarted, tr1.TurnID))
	if _, err := ds[0].c.Interrupt(ctx, ses[1].ID); err != nil {
		t.Fatalf("Interrupt through d0 of d1's session: %v", err)
	}
	end := cols[1].waitFor(t, "the turn's end", ofType(event.TypeTurnCompleted, tr1.TurnID))
	if p, _ := end.Decode(); p.(*event.TurnCompleted).StopReason != event.StopInterrupted {
		t.Errorf("turn interrupted through d0 ended %s", end.Data)
	}

	// A long turn on d0's agent, sent through d2; d0 dies in its middle.
	tr0, err := sender(0).Send(ctx, ses[0].ID, long)
	if err != nil {
		t.Fatalf("Send to session 0 through d2: %v", err)
	}
	cols[0].waitFor(t, "the turn's 50th delta", func(e event.Event) bool {
		return e.TurnID == tr0.TurnID && e.Type == event.TypeItemDelta && e.Seq > 50
	})
	seenBefore := cols[0].events()
	if err := ds[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = ds[0].cmd.Wait()
	killedAt := time.Now()

	// Another daemon takes session 0 over once the lease expires: its log
	// says who and how the turn ended.
	ended := cols[0].waitFor(t, "session.ended", ofType(event.TypeSessionEnded, ""))
	var why event.SessionEnded
	if err := json.Unmarshal(ended.Data, &why); err != nil {
		t.Fatal(err)
	}
	if why.Reason != event.EndInterrupted || !strings.Contains(why.Message, daemonIDs[0]) ||
		(!strings.Contains(why.Message, daemonIDs[1]) && !strings.Contains(why.Message, daemonIDs[2])) {
		t.Errorf("session.ended after the owner died: %s; want interrupted, naming d0 (%s) and the daemon that took over", ended.Data, daemonIDs[0])
	}
	interrupted := cols[0].waitFor(t, "the turn's end", ofType(event.TypeTurnCompleted, tr0.TurnID))
	if p, _ := interrupted.Decode(); p.(*event.TurnCompleted).StopReason != event.StopInterrupted || interrupted.Seq > ended.Seq {
		t.Errorf("the turn in flight ended with %s (seq %d, session.ended %d)", interrupted.Data, interrupted.Seq, ended.Seq)
	}
	t.Logf("session 0 taken over %s after the SIGKILL (lease TTL %s)", time.Since(killedAt).Round(time.Millisecond), ttl)

	// The session's next message, through d2, resumes its agent on a
	// live daemon.
	var tr client.Turn
	deadline := time.Now().Add(time.Minute)
	for {
		tr, err = sender(0).Send(ctx, ses[0].ID, "/scenario text")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Send to session 0 after the takeover: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	resumed := cols[0].waitFor(t, "session.started after the takeover", func(e event.Event) bool {
		return e.Type == event.TypeSessionStarted && e.Seq > ended.Seq
	})
	var again event.SessionStarted
	if err := json.Unmarshal(resumed.Data, &again); err != nil || !again.Resumed || (again.Daemon != daemonIDs[1] && again.Daemon != daemonIDs[2]) {
		t.Errorf("session.started after the takeover: %s, %v; want resumed on d1 or d2", resumed.Data, err)
	}
	done := cols[0].waitFor(t, "the resumed session's turn", ofType(event.TypeTurnCompleted, tr.TurnID))
	if p, _ := done.Decode(); p.(*event.TurnCompleted).StopReason != event.StopEndTurn {
		t.Errorf("the turn after the takeover ended %s", done.Data)
	}
	cancel()
	wg.Wait()

	// Every event a client saw is stored as it saw it; every client saw
	// every event once, in order.
	for i := range ses {
		page, err := ds[1].c.Events(t.Context(), ses[i].ID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		stored := page.Events
		for j, e := range stored {
			if e.Seq != int64(j+1) {
				t.Fatalf("session %d: stored seq %d at %d: gap or duplicate", i, e.Seq, j)
			}
		}
		seen := cols[i].events()
		if i == 0 && !slices.EqualFunc(seenBefore, seen[:len(seenBefore)], sameStored) {
			t.Errorf("session 0: what the client saw before the kill changed")
		}
		if len(seen) > len(stored) {
			t.Fatalf("session %d: the client saw %d events, %d are stored", i, len(seen), len(stored))
		}
		for j, e := range seen {
			if !sameStored(e, stored[j]) {
				t.Fatalf("session %d: the client saw %+v at %d, stored: %+v", i, e, j, stored[j])
			}
		}
	}
}

func sameStored(a, b event.Event) bool {
	return a.ID == b.ID && a.Seq == b.Seq && a.Type == b.Type && a.TurnID == b.TurnID && a.Time.Equal(b.Time) &&
		string(a.Data) == string(b.Data)
}

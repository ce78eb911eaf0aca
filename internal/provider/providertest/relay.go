package providertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/relay"
)

// runRelay runs the steps with a host daemon (internal/daemon, in this
// process) relaying a session to the sandbox's inner daemon through a
// proxy the suite can sever, in the order: a turn with a command
// and a file change, its events persisted on the host; a cut mid-stream;
// the host, a process of its own, killed with SIGKILL mid-turn and
// started again on its data directory; the inner daemon killed; a deleted session's sandbox destroyed. After each step
// the host's relayed events are exactly the inner log's, in order, each
// once.
func runRelay(t *testing.T, factory Factory) {
	t.Run("Relay", func(t *testing.T) { testRelay(t, setup(t, factory)) })
	t.Run("RelayPause", func(t *testing.T) { testRelayPause(t, setup(t, factory)) })
}

// host is a host daemon serving in this process, or in a process of its
// own (proc, see startHostProcess).
type host struct {
	d      *daemon.Daemon
	c      *client.Client
	cancel context.CancelFunc
	done   chan error
	proc   *exec.Cmd
	exited chan struct{}
}

func (s *suite) startHost(t *testing.T, dataDir string, p provider.Provider, opts ...func(*daemon.Config)) *host {
	t.Helper()
	reg := provider.NewRegistry()
	reg.Register(p)
	popts := map[string]map[string]string{}
	if len(s.Options) > 0 {
		popts[p.Name()] = s.Options
	}
	cfg := daemon.Config{
		Listen: "127.0.0.1:0", DataDir: dataDir, Log: slog.New(slog.DiscardHandler),
		Providers: reg, ProviderOptions: popts, ProviderBinary: s.Binary,
		StartTimeout: s.Timeout, RelayLostAfter: time.Minute,
	}
	for _, o := range opts {
		o(&cfg)
	}
	d, err := daemon.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("host daemon: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &host{d: d, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- d.Serve(ctx) }()
	if h.c, err = client.New(d.URL(), client.WithToken(d.Token())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.stop(t) })
	return h
}

// stop stops the host daemon (once).
func (h *host) stop(t *testing.T) {
	if h.cancel == nil {
		return
	}
	h.cancel()
	if err := <-h.done; err != nil {
		t.Errorf("host daemon: %v", err)
	}
	h.cancel = nil
	h.c.CloseIdleConnections()
}

func testRelay(t *testing.T, s *suite) {
	ctx := s.ctx(t)
	name := s.Provider.Name()
	cut := newCutting(s.Provider)
	t.Cleanup(cut.closeAll)
	dataDir := t.TempDir()
	h := s.startHostProcess(t, dataDir, cut)
	key, err := relay.LoadKey(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	// The relay's sandboxes carry the host daemon's owner label.
	s.owner = relay.OwnerOf(key)

	pl, err := h.c.Providers(ctx)
	if err != nil || len(pl.Providers) != 1 || pl.Providers[0].Name != name || !pl.Providers[0].Healthy {
		t.Fatalf("GET /v1/providers = %+v, %v; want %s, healthy", pl, err, name)
	}
	if _, carrier := s.Provider.(provider.EgressCarrier); pl.Providers[0].Capabilities.CarriedEgress != carrier {
		t.Errorf("GET /v1/providers: carried_egress %v, but EgressCarrier %v", pl.Providers[0].Capabilities.CarriedEgress, carrier)
	}
	_, err = h.c.CreateSession(ctx, client.CreateSession{Agent: "mock", Provider: "providertest-no-such"})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 422 || ae.Type != client.ProblemUnknownProvider || !strings.Contains(ae.Detail, name) {
		t.Fatalf("create on an unknown provider: %v; want 422 unknown-provider naming %s", err, name)
	}
	sess, err := h.c.CreateSession(ctx, client.CreateSession{Agent: "mock", Provider: name})
	if err != nil {
		t.Fatalf("create a session on %s: %v", name, err)
	}
	prov, sandboxID, innerID, token, ok := relay.Inner(key, sess.NativeSessionID)
	if !ok || prov != name || innerID == "" {
		t.Fatalf("native id %q does not name a sandbox and inner session on %s", sess.NativeSessionID, name)
	}
	if found, ok := s.listed(ctx, t, sandboxID); ok && !found {
		t.Fatalf("List does not have the session's sandbox %s", sandboxID)
	}
	sb, err := s.Provider.Connect(ctx, sandboxID, token)
	if err != nil {
		t.Fatalf("Connect to the session's sandbox: %v", err)
	}
	in := inner(t, sb, token)

	t.Log("a turn with a command and a file change, persisted on the host")
	done := turn(ctx, t, h.c, sess.ID,
		mock.Step{Kind: mock.KindCommand, Command: "echo relayed-output"},
		mock.Step{Kind: mock.KindWrite, Path: "relayed.txt", Content: "from the sandbox\n"})
	if done.StopReason != event.StopEndTurn {
		t.Fatalf("turn ended %s: %s", done.StopReason, done.Message)
	}
	log := hostLog(ctx, t, h.c, sess.ID)
	if !strings.Contains(log, "relayed-output") || !strings.Contains(log, "relayed.txt") {
		t.Fatalf("the host's log lacks the command's output or the file change:\n%s", log)
	}
	rc, err := in.ReadFile(ctx, innerID, "relayed.txt", 0, -1)
	if err != nil {
		t.Fatalf("the file the turn wrote, in the sandbox: %v", err)
	}
	body, _ := io.ReadAll(rc)
	rc.Close()
	if string(body) != "from the sandbox\n" {
		t.Fatalf("relayed.txt in the sandbox = %q", body)
	}
	exact(ctx, t, h.c, in, sess.ID, innerID)

	t.Log("the connection cut mid-stream")
	long := mock.Step{Kind: mock.KindLong, Count: 300, Delay: mock.Duration(10 * time.Millisecond)}
	tr, err := h.c.Send(ctx, sess.ID, mock.ScriptPrompt(long))
	if err != nil {
		t.Fatal(err)
	}
	waitDeltas(ctx, t, h.c, sess.ID, tr.TurnID, 20)
	if n := cut.proxy(sandboxID).Cut(); n == 0 {
		t.Fatal("the cut severed no connection: the host does not read the sandbox through the proxy")
	}
	waitDeltas(ctx, t, h.c, sess.ID, tr.TurnID, 120)
	cut.proxy(sandboxID).Cut()
	if tc, err := h.c.WaitTurn(ctx, sess.ID, tr.TurnID, 0, nil); err != nil || tc.StopReason != event.StopEndTurn {
		t.Fatalf("the cut turn: %+v, %v", tc, err)
	}
	exact(ctx, t, h.c, in, sess.ID, innerID)

	t.Log("the host daemon killed (SIGKILL) mid-turn and started again")
	tr, err = h.c.Send(ctx, sess.ID, mock.ScriptPrompt(long))
	if err != nil {
		t.Fatal(err)
	}
	waitDeltas(ctx, t, h.c, sess.ID, tr.TurnID, 20)
	h.kill(t)
	// The inner turn runs on while no host reads it: what it logs then
	// is read once after the restart (exact, below).
	innerAtKill := len(allEvents(ctx, t, in, innerID))
	cut = newCutting(s.Provider)
	t.Cleanup(cut.closeAll)
	h = s.startHost(t, dataDir, cut.wrapped())
	if _, err := h.c.Resume(ctx, sess.ID, client.ResumeSession{}); err != nil {
		t.Fatalf("resume after the host restarted: %v", err)
	}
	settle(ctx, t, in, innerID)
	t.Logf("inner events: %d when the host was killed, %d once the resumed relay settled the inner turn",
		innerAtKill, len(allEvents(ctx, t, in, innerID)))
	done = turn(ctx, t, h.c, sess.ID, mock.Step{Kind: mock.KindCommand, Command: "echo after-restart"})
	if done.StopReason != event.StopEndTurn {
		t.Fatalf("turn after the restart ended %s: %s", done.StopReason, done.Message)
	}
	exact(ctx, t, h.c, in, sess.ID, innerID)

	t.Log("a deleted session's sandbox destroyed")
	other, err := h.c.CreateSession(ctx, client.CreateSession{Agent: "mock", Provider: name})
	if err != nil {
		t.Fatal(err)
	}
	_, otherSandbox, _, _, _ := relay.Inner(key, other.NativeSessionID)
	if err := h.c.DeleteSession(ctx, other.ID, true); err != nil {
		t.Fatal(err)
	}
	if found, ok := s.listed(ctx, t, otherSandbox); ok && found {
		t.Fatalf("the deleted session's sandbox %s is still listed", otherSandbox)
	}

	if s.KillInner == nil {
		t.Log("skipped: inner daemon killed (Harness.KillInner is nil)")
	} else {
		t.Log("the inner daemon killed: the session ends with a clear error")
		if err := s.KillInner(ctx, sandboxID); err != nil {
			t.Fatalf("KillInner: %v", err)
		}
		ended := waitEnded(ctx, t, h.c, sess.ID)
		if ended.Reason != event.EndError || !strings.Contains(ended.Message, sandboxID) || !strings.Contains(ended.Message, name) {
			t.Fatalf("session.ended = %+v, want an error naming the sandbox and the provider", ended)
		}
		if got, err := h.c.GetSession(ctx, sess.ID); err != nil || got.Status != client.StatusFailed {
			t.Fatalf("session after its inner daemon died: %+v, %v", got.Status, err)
		}
		s.resumeLost(ctx, t, h, key, sess.ID, sandboxID, innerID, ended)
	}

	t.Log("destroy: nothing left on the provider")
	if err := h.c.DeleteSession(ctx, sess.ID, true); err != nil {
		t.Fatal(err)
	}
	s.empty(ctx, t)
}

// turn runs one turn of the mock agent's steps and returns how it ended.
func turn(ctx context.Context, t *testing.T, c *client.Client, id string, steps ...mock.Step) event.TurnCompleted {
	t.Helper()
	after, err := c.LastSeq(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := c.Send(ctx, id, mock.ScriptPrompt(steps...))
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	tc, err := c.WaitTurn(ctx, id, tr.TurnID, after, nil)
	if err != nil {
		t.Fatalf("wait for turn %s: %v", tr.TurnID, err)
	}
	return tc
}

func allEvents(ctx context.Context, t *testing.T, c *client.Client, id string) []event.Event {
	t.Helper()
	var evs []event.Event
	if err := c.EventsAll(ctx, id, 0, func(e event.Event) error { evs = append(evs, e); return nil }); err != nil {
		t.Fatalf("events of %s: %v", id, err)
	}
	return evs
}

func hostLog(ctx context.Context, t *testing.T, c *client.Client, id string) string {
	var b strings.Builder
	for _, e := range allEvents(ctx, t, c, id) {
		fmt.Fprintf(&b, "%d %s %s\n", e.Seq, e.Type, e.Data)
	}
	return b.String()
}

// exact fails unless the host's relayed events are exactly the inner
// events the relay hands over, in order, each once, with the same data.
func exact(ctx context.Context, t *testing.T, hc, ic *client.Client, hostID, innerID string) {
	t.Helper()
	var want []event.Event
	for _, e := range allEvents(ctx, t, ic, innerID) {
		if relay.Classify(e) == relay.Forward {
			want = append(want, e)
		}
	}
	var got []event.Event
	var gotSeqs []int64
	for _, e := range allEvents(ctx, t, hc, hostID) {
		if seq, ok := relay.InnerSeq(e.Raw); ok {
			got = append(got, e)
			gotSeqs = append(gotSeqs, seq)
		}
	}
	wantSeqs := make([]int64, len(want))
	for i, e := range want {
		wantSeqs[i] = e.Seq
	}
	if !slices.Equal(gotSeqs, wantSeqs) {
		t.Fatalf("relayed inner seqs on the host:\n%v\nwant (the inner log's):\n%v", gotSeqs, wantSeqs)
	}
	for i := range want {
		if got[i].Type != want[i].Type || !jsonEqual(got[i].Data, want[i].Data) {
			t.Fatalf("relayed event of inner seq %d = %s %s, want %s %s", wantSeqs[i], got[i].Type, got[i].Data, want[i].Type, want[i].Data)
		}
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && fmt.Sprint(x) == fmt.Sprint(y)
}

// waitDeltas waits until the host has n item.delta events of the turn.
func waitDeltas(ctx context.Context, t *testing.T, c *client.Client, id, turnID string, n int) {
	t.Helper()
	seen := 0
	st := c.Stream(ctx, id, 0)
	defer func() { _ = st.Close() }()
	for st.Next() {
		e := st.Event()
		if e.TurnID == turnID && e.Type == event.TypeItemDelta {
			if seen++; seen >= n {
				return
			}
		}
		if e.Type == event.TypeTurnCompleted && e.TurnID == turnID {
			t.Fatalf("turn %s completed after %d deltas, before the step", turnID, seen)
		}
	}
	t.Fatalf("host stream: %v", st.Err())
}

// waitEnded waits for the session's session.ended event on the host.
func waitEnded(ctx context.Context, t *testing.T, c *client.Client, id string) event.SessionEnded {
	t.Helper()
	st := c.Stream(ctx, id, 0)
	defer func() { _ = st.Close() }()
	var last event.SessionEnded
	for st.Next() {
		e := st.Event()
		if e.Type != event.TypeSessionEnded {
			continue
		}
		if err := json.Unmarshal(e.Data, &last); err != nil {
			t.Fatal(err)
		}
		if last.Reason != event.EndInterrupted { // the restart's
			return last
		}
	}
	t.Fatalf("host stream: %v", st.Err())
	return last
}

// settle waits until the inner session has no turn running (the resumed
// relay interrupts the one the restart left).
func settle(ctx context.Context, t *testing.T, c *client.Client, id string) {
	t.Helper()
	for {
		s, err := c.GetSession(ctx, id)
		if err != nil {
			t.Fatalf("inner session: %v", err)
		}
		if s.Status != client.StatusRunning {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the inner session kept running after the resume")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// resumeLost is the issue's "resumable on a fresh sandbox where the
// provider supports snapshots", through the host: the session whose inner
// daemon was killed (it ended failed) is resumed. On a provider with
// snapshots the loss kept the sandbox's state in one, and the resume makes
// a fresh sandbox from it with a new token, the old one gone; the inner
// session resumes there, a turn works, the host's relayed events are the
// inner log's exactly (nothing the old sandbox logged lost or doubled),
// and the snapshot is deleted. On a provider without, the resume is
// refused as provider-unsupported and nothing is made.
func (s *suite) resumeLost(ctx context.Context, t *testing.T, h *host, key []byte, id, oldSandbox, innerID string, ended event.SessionEnded) {
	t.Helper()
	sn, ok := s.Provider.(provider.Snapshotter)
	if !ok {
		t.Log("the lost session resumed on a provider without snapshots: refused, nothing made")
		before, _ := s.listedAll(ctx, t)
		_, err := h.c.Resume(ctx, id, client.ResumeSession{})
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != 422 || ae.Type != client.ProblemProviderUnsupported || !strings.Contains(ae.Detail, "snapshot") {
			t.Fatalf("resume of a session whose sandbox was lost, on %s (no snapshots): %v; want 422 provider-unsupported naming snapshots", s.Provider.Name(), err)
		}
		if after, _ := s.listedAll(ctx, t); len(after) > len(before) {
			t.Fatalf("the refused resume left sandboxes: %v (before: %v)", after, before)
		}
		return
	}
	t.Log("the lost session resumed on a fresh sandbox made from a snapshot")
	got, err := h.c.GetSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	snap := relay.SnapshotOf(got.NativeSessionID)
	if snap == "" || !strings.Contains(ended.Message, snap) {
		t.Fatalf("the lost session keeps no snapshot: native id %q, session.ended %q", got.NativeSessionID, ended.Message)
	}
	if found, ok := s.listed(ctx, t, oldSandbox); ok && found {
		t.Fatalf("the lost sandbox %s is still listed once its state is in a snapshot", oldSandbox)
	}
	if _, err := h.c.Resume(ctx, id, client.ResumeSession{}); err != nil {
		t.Fatalf("resume of the session whose inner daemon died: %v", err)
	}
	got, err = h.c.GetSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	_, sandboxID, innerNow, token, ok := relay.Inner(key, got.NativeSessionID)
	if !ok || sandboxID == oldSandbox || innerNow != innerID {
		t.Fatalf("after the resume the native id is %q: want a fresh sandbox (not %s) with the inner session %s", got.NativeSessionID, oldSandbox, innerID)
	}
	if relay.SnapshotOf(got.NativeSessionID) != "" {
		t.Fatalf("the resumed session still names its snapshot: %q", got.NativeSessionID)
	}
	if _, err := sn.CreateFrom(ctx, snap, s.spec(t)); !errors.Is(err, provider.ErrGone) {
		t.Fatalf("CreateFrom the resumed session's snapshot = %v, want ErrGone (deleted once the session ran again)", err)
	}
	sb, err := s.Provider.Connect(ctx, sandboxID, token)
	if err != nil {
		t.Fatalf("Connect to the fresh sandbox: %v", err)
	}
	in := inner(t, sb, token)
	done := turn(ctx, t, h.c, id,
		mock.Step{Kind: mock.KindCommand, Command: "echo on-the-fresh-sandbox"},
		mock.Step{Kind: mock.KindWrite, Path: "relayed.txt", Content: "and the fresh sandbox\n"})
	if done.StopReason != event.StopEndTurn {
		t.Fatalf("turn on the fresh sandbox ended %s: %s", done.StopReason, done.Message)
	}
	// The workspace came with the snapshot: the write is a change of
	// what the first sandbox wrote.
	if log := hostLog(ctx, t, h.c, id); !strings.Contains(log, `-from the sandbox\n+and the fresh sandbox`) {
		t.Fatalf("the write on the fresh sandbox is not a change of the restored relayed.txt:\n%s", log)
	}
	exact(ctx, t, h.c, in, id, innerID)
}

// listedAll returns what List has for the suite's owner (ok false
// without a Lister).
func (s *suite) listedAll(ctx context.Context, t *testing.T) ([]string, bool) {
	t.Helper()
	l, ok := s.Provider.(provider.Lister)
	if !ok {
		return nil, false
	}
	ids, err := l.List(ctx, s.owner)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return ids, true
}

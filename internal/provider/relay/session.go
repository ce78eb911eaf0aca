package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/provider"
)

// adapter starts one session's relay.
type adapter struct {
	r      *Relay
	agent  string
	info   agent.Info
	policy json.RawMessage
	placed native
}

// Info implements agent.Adapter: the agent's capabilities, resumable
// (the relay reconnects to its inner session), available wherever the
// provider is.
func (a *adapter) Info(context.Context) agent.Info {
	info := a.info
	info.Available, info.Reason = true, ""
	info.Capabilities.Resume = true
	return info
}

// Start implements agent.Adapter: a new session makes the sandbox and the
// inner session; a resumed one reconnects to them and reads the inner log
// from after the last event the host persisted.
func (a *adapter) Start(ctx context.Context, cfg agent.Config, host agent.Host) (agent.Session, error) {
	n := a.placed
	if cfg.NativeSessionID != "" {
		if stored, ok := parseNative(cfg.NativeSessionID); ok {
			n = stored
		}
	}
	p, err := a.r.cfg.Providers.Get(n.Provider)
	if err != nil {
		return nil, err
	}
	fresh := n.Sandbox == ""
	if fresh {
		// A nonce of its own for every sandbox made, even when a start
		// that failed before storing its sandbox used the stored one:
		// a token is never reused.
		if n.Nonce, err = newNonce(); err != nil {
			return nil, err
		}
	}
	token := a.r.token(n.Provider, n.Nonce)
	specPolicy, innerPolicy, err := placement(p, a.policy)
	if err != nil {
		return nil, err
	}
	var sb provider.Sandbox
	if fresh {
		sb, err = p.Create(ctx, a.spec(n.Provider, token, cfg.SessionID, specPolicy))
		if err != nil {
			return nil, fmt.Errorf("create a sandbox on %s: %w", n.Provider, err)
		}
		n.Sandbox = sb.ID
		// Stored before anything else is made in it: from now on a
		// restart finds the sandbox through the session.
		if err := host.SetNativeSessionID(ctx, n.String()); err != nil {
			a.destroy(ctx, p, sb.ID)
			return nil, err
		}
	} else {
		if sb, err = a.reconnect(ctx, p, &n, cfg.SessionID, host); err != nil {
			return nil, err
		}
		token = sb.Token
	}
	c, err := innerClient(sb.Address, token)
	if err != nil {
		a.destroyIf(ctx, fresh, p, sb.ID)
		return nil, err
	}
	s := &session{a: a, p: p, c: c, host: host, placed: n, hostID: cfg.SessionID,
		done: make(chan struct{}), results: map[string]agent.Result{}, waiters: map[string]chan agent.Result{},
		asking: make(chan struct{}, maxAsking)}
	env, err := s.carryEgress(ctx, sb.ID, cfg)
	if err != nil {
		a.destroyIf(ctx, fresh, p, sb.ID)
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			s.stopEgress()
		}
	}()
	if n.Session == "" {
		inner, err := c.CreateSession(ctx, client.CreateSession{
			Agent: a.agent, Model: cfg.Model, Mode: cfg.Mode, PermissionMode: cfg.PermissionMode,
			Metadata: map[string]string{"agentbox.host_session": cfg.SessionID}, Env: env, Policy: innerPolicy,
			MCPServers: mcpServers(cfg.MCPServers),
		})
		if err != nil {
			a.destroyIf(ctx, fresh, p, sb.ID)
			return nil, fmt.Errorf("create the session in sandbox %s: %w", sb.ID, err)
		}
		n.Session = inner.ID
		s.placed = n
		if err := host.SetNativeSessionID(ctx, n.String()); err != nil {
			a.destroyIf(ctx, fresh, p, sb.ID)
			return nil, err
		}
	} else {
		if s.cursor, err = a.r.cfg.LastRelayed(ctx, cfg.SessionID); err != nil {
			return nil, err
		}
		if err := s.settleInner(ctx, client.ResumeSession{Env: env, MCPServers: mcpServers(cfg.MCPServers)}); err != nil {
			return nil, err
		}
	}
	if n := s.placed; n.Snapshot != "" {
		// The session runs on the sandbox made from the snapshot: the
		// snapshot is no longer needed.
		snap := n.Snapshot
		n.Snapshot = ""
		s.placed = n
		if err := host.SetNativeSessionID(ctx, n.String()); err != nil {
			return nil, err
		}
		a.deleteSnapshot(ctx, p, snap)
	}
	started = true
	s.startPump()
	if _, ok := p.(provider.Pauser); ok {
		return pausable{s}, nil
	}
	return s, nil
}

// startPump starts the pump, from the cursor. Its context is detached
// from any request: the pump reads the inner log for the session's life
// (until Close or Pause).
func (s *session) startPump() {
	pctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.mu.Lock()
	s.cancel, s.pumped = cancel, done
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer close(done)
		s.pump(pctx)
	}()
}

// pausable is a relayed session on a provider that pauses sandboxes
// (provider.Pauser): it implements agent.Pauser.
type pausable struct{ *session }

// Pause implements agent.Pauser: the pump stops (nothing reads a frozen
// daemon, whose silence is then no loss), the sandbox is paused, and its
// egress is no longer carried. When the provider fails to pause it, the
// pump starts again from where it stopped and the session goes on. A
// later Start resumes the sandbox (adapter.reconnect: Pauser.Resume).
func (s pausable) Pause(ctx context.Context) error {
	s.mu.Lock()
	cancel, pumped := s.cancel, s.pumped
	s.mu.Unlock()
	cancel()
	<-pumped
	select {
	case <-s.done:
		return fmt.Errorf("the session in sandbox %s ended: %s", s.placed.Sandbox, s.Exit().Message)
	default:
	}
	if err := s.p.(provider.Pauser).Pause(ctx, s.placed.Sandbox); err != nil {
		s.startPump()
		return fmt.Errorf("pause sandbox %s on %s: %w", s.placed.Sandbox, s.placed.Provider, err)
	}
	s.stopEgress()
	s.a.r.cfg.Log.Info("paused a relayed session's sandbox", "session", s.hostID, "provider", s.placed.Provider, "sandbox", s.placed.Sandbox)
	return nil
}

// spec is what a sandbox of this session is made with.
func (a *adapter) spec(name, token, sessionID string, policy json.RawMessage) provider.Spec {
	return provider.Spec{
		Owner: a.r.Owner(), Binary: a.r.cfg.Binary, Token: token,
		Options: maps.Clone(a.r.cfg.Options[name]),
		Labels:  map[string]string{"agentbox.session": sessionID},
		Policy:  policy,
	}
}

// reconnect finds the sandbox of a resumed session (n names it) and
// returns it with its token. A paused one is resumed (provider.Pauser;
// resuming a running one connects to it), any other connected to. One
// whose inner daemon does not answer is, on a provider with snapshots
// (provider.Snapshotter), snapshotted as it was left (unless its loss
// took the snapshot already: n.Snapshot), destroyed, and made again from
// the snapshot with a fresh nonce, so a token never used before; n is
// updated and stored at each step, so a host that dies meanwhile finds
// the snapshot, or the new sandbox, through the session. On a provider
// without snapshots the session cannot go on: an error says so, and
// nothing is made.
func (a *adapter) reconnect(ctx context.Context, p provider.Provider, n *native, sessionID string, host agent.Host) (provider.Sandbox, error) {
	token := a.r.token(n.Provider, n.Nonce)
	var sb provider.Sandbox
	var err error
	if pz, ok := p.(provider.Pauser); ok {
		sb, err = pz.Resume(ctx, n.Sandbox, token)
	} else {
		sb, err = p.Connect(ctx, n.Sandbox, token)
	}
	if err == nil {
		sb.Token = token
		return sb, nil
	}
	lost := fmt.Errorf("reconnect to sandbox %s on %s: %w", n.Sandbox, n.Provider, err)
	sn, ok := p.(provider.Snapshotter)
	if !ok {
		if errors.Is(err, provider.ErrGone) {
			// Not wrapped: the answer is the missing ability, not the
			// gone sandbox (which is why it is asked for).
			return provider.Sandbox{}, fmt.Errorf("%w: %s; %s keeps no snapshots (capability snapshot), so the session cannot resume on a fresh sandbox",
				provider.ErrUnsupported, lost.Error(), n.Provider)
		}
		return provider.Sandbox{}, lost
	}
	if n.Snapshot == "" {
		snap, serr := sn.Snapshot(ctx, n.Sandbox)
		if serr != nil {
			return provider.Sandbox{}, fmt.Errorf("%w; a snapshot of it failed too: %w", lost, serr)
		}
		n.Snapshot = snap
		if err := host.SetNativeSessionID(ctx, n.String()); err != nil {
			a.deleteSnapshot(ctx, p, snap)
			return provider.Sandbox{}, err
		}
	}
	// Whatever is left of the lost sandbox goes.
	a.destroy(ctx, p, n.Sandbox)
	nonce, err := newNonce()
	if err != nil {
		return provider.Sandbox{}, err
	}
	token = a.r.token(n.Provider, nonce)
	// The fresh sandbox is made under the session's policy as its first
	// was: the same checkpoint.
	specPolicy, _, err := placement(p, a.policy)
	if err != nil {
		return provider.Sandbox{}, err
	}
	if sb, err = sn.CreateFrom(ctx, n.Snapshot, a.spec(n.Provider, token, sessionID, specPolicy)); err != nil {
		// The session keeps naming the snapshot: a later resume tries
		// again.
		return provider.Sandbox{}, fmt.Errorf("%w; a fresh sandbox on %s from snapshot %s: %w", lost, n.Provider, n.Snapshot, err)
	}
	old := n.Sandbox
	n.Nonce, n.Sandbox = nonce, sb.ID
	if err := host.SetNativeSessionID(ctx, n.String()); err != nil {
		a.destroy(ctx, p, sb.ID)
		return provider.Sandbox{}, err
	}
	a.r.cfg.Log.Info("resumed a session on a fresh sandbox from a snapshot", "session", sessionID,
		"provider", n.Provider, "lost", old, "sandbox", sb.ID, "snapshot", n.Snapshot)
	sb.Token = token
	return sb, nil
}

// deleteSnapshot deletes a snapshot no session needs, on a context of its
// own (the caller's may be ending); a failure is logged.
func (a *adapter) deleteSnapshot(ctx context.Context, p provider.Provider, snap string) {
	sn, ok := p.(provider.Snapshotter)
	if !ok {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := sn.DeleteSnapshot(dctx, snap); err != nil {
		a.r.cfg.Log.Warn("deleting a snapshot no session needs", "provider", p.Name(), "snapshot", snap, "err", err)
	}
}

// carryEgress starts the host side of the sandbox's network when its
// provider carries its egress (provider.EgressCarrier) and the relay
// makes one (Config.Egress), and returns the inner session's
// environment: the session's, with the egress's variables over it (the
// credentials' placeholders among them). The host session answers the
// egress's asks and gets its refusals (agent.NetworkHost), as a local
// sandbox's session does.
func (s *session) carryEgress(ctx context.Context, id string, cfg agent.Config) (map[string]string, error) {
	carrier, ok := s.p.(provider.EgressCarrier)
	if !ok || s.a.r.cfg.Egress == nil {
		return cfg.Env, nil
	}
	req := EgressRequest{SessionID: cfg.SessionID, Agent: s.a.agent, Config: cfg, Policy: s.a.policy}
	if nh, ok := s.host.(agent.NetworkHost); ok {
		req.Ask, req.OnViolation = nh.AskNetwork, nh.NetworkViolation
	}
	eg, err := s.a.r.cfg.Egress(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("the network of sandbox %s: %w", id, err)
	}
	env := maps.Clone(cfg.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, eg.Env)
	if eg.Serve == nil {
		if eg.Close != nil {
			eg.Close()
		}
		return env, nil
	}
	stop, err := carrier.CarryEgress(ctx, id, eg.Serve)
	if err != nil {
		eg.Close()
		return nil, fmt.Errorf("carry the egress of sandbox %s on %s: %w", id, s.p.Name(), err)
	}
	s.mu.Lock()
	s.egressStop = func() {
		stop()
		eg.Close()
	}
	s.mu.Unlock()
	return env, nil
}

// stopEgress stops carrying the sandbox's egress (once).
func (s *session) stopEgress() {
	s.mu.Lock()
	stop := s.egressStop
	s.egressStop = nil
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
}

func (a *adapter) destroyIf(ctx context.Context, fresh bool, p provider.Provider, id string) {
	if fresh {
		a.destroy(ctx, p, id)
	}
}

// destroy removes a sandbox the start could not finish with.
func (a *adapter) destroy(ctx context.Context, p provider.Provider, id string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := p.Destroy(dctx, id); err != nil {
		a.r.cfg.Log.Warn("destroying a sandbox whose start failed", "provider", p.Name(), "sandbox", id, "err", err)
	}
}

func mcpServers(in []agent.MCPServer) []client.MCPServer {
	if len(in) == 0 {
		return nil
	}
	b, _ := json.Marshal(in)
	var out []client.MCPServer
	_ = json.Unmarshal(b, &out)
	return out
}

// session is a live relay: one pump reads the inner session's events from
// the cursor for the session's life, hands them to the host and completes
// the turns Prompt waits for.
type session struct {
	a      *adapter
	p      provider.Provider
	c      *client.Client
	host   agent.Host
	placed native
	hostID string
	wg     sync.WaitGroup

	cursor int64 // the pump's alone once it runs
	// skipEnd: an inner session.ended at or before this inner seq was
	// recorded by a restart of the inner daemon that the relay resumed
	// the session after (settleInner); it does not end the session.
	skipEnd int64
	asking  chan struct{} // a slot per request being asked on the host (maxAsking)

	// egressStop stops the host side of the sandbox's network (nil when
	// nothing is carried); under mu.
	egressStop func()

	mu sync.Mutex
	// cancel stops the running pump, pumped is closed once it returned
	// (startPump).
	cancel  context.CancelFunc
	pumped  chan struct{}
	results map[string]agent.Result      // completed inner turns nobody waited for yet
	waiters map[string]chan agent.Result // by inner turn id
	done    chan struct{}
	exit    event.SessionEnded
	ended   bool
}

// settleInner brings a resumed inner session to rest: a turn the inner
// daemon still runs for a host turn the host already settled (its restart
// marked it interrupted) is interrupted, so nothing runs unobserved; an
// inner session its own daemon's restart interrupted (a sandbox made from
// a snapshot runs a new inner daemon on the old one's store) is resumed
// there with req, and the end that restart recorded is not the session's
// (skipEnd).
func (s *session) settleInner(ctx context.Context, req client.ResumeSession) error {
	inner, err := s.c.GetSession(ctx, s.placed.Session)
	if err != nil {
		return fmt.Errorf("the session in sandbox %s: %w", s.placed.Sandbox, err)
	}
	switch inner.Status {
	case client.StatusRunning:
		if _, err := s.c.Interrupt(ctx, s.placed.Session); err != nil {
			return fmt.Errorf("interrupt the inner turn: %w", err)
		}
	case client.StatusInterrupted:
		last, err := s.c.LastSeq(ctx, s.placed.Session)
		if err != nil {
			return fmt.Errorf("the log of the session in sandbox %s: %w", s.placed.Sandbox, err)
		}
		if _, err := s.c.Resume(ctx, s.placed.Session, req); err != nil {
			return fmt.Errorf("resume the session in sandbox %s: %w", s.placed.Sandbox, err)
		}
		s.skipEnd = last
	case client.StatusEnded, client.StatusFailed:
		return fmt.Errorf("%w: the session in sandbox %s has %s", provider.ErrGone, s.placed.Sandbox, inner.Status)
	}
	return nil
}

// Prompt implements agent.Session: the message goes to the inner session,
// and the turn ends when the inner turn does; an interrupt (ctx) is
// forwarded and the inner turn's end awaited.
func (s *session) Prompt(ctx context.Context, in agent.Input) (agent.Result, error) {
	turn, err := s.c.SendMessage(ctx, s.placed.Session, client.SendMessage{Content: in.Content})
	if err != nil {
		return agent.Result{}, fmt.Errorf("send the message to the inner session: %w", err)
	}
	ch := s.wait(turn.TurnID)
	select {
	case res := <-ch:
		return res, nil
	case <-s.done:
		return agent.Result{}, errors.New(s.Exit().Message)
	case <-ctx.Done():
	}
	ictx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, ierr := s.c.Interrupt(ictx, s.placed.Session)
	select {
	case res := <-ch:
		res.StopReason = event.StopInterrupted
		return res, nil
	case <-s.done:
	case <-ictx.Done():
	}
	return agent.Result{StopReason: event.StopInterrupted}, errors.Join(ctx.Err(), ierr)
}

// wait returns the channel the inner turn's result arrives on.
func (s *session) wait(turnID string) chan agent.Result {
	ch := make(chan agent.Result, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if res, ok := s.results[turnID]; ok {
		delete(s.results, turnID)
		ch <- res
		return ch
	}
	s.waiters[turnID] = ch
	return ch
}

func (s *session) complete(turnID string, res agent.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.waiters[turnID]; ok {
		delete(s.waiters, turnID)
		ch <- res
		return
	}
	// A turn that completes before its Prompt waits (or one of a
	// previous host run, read again after a restart, that nobody waits
	// for): kept until Close, at most maxUnclaimed of them.
	if len(s.results) >= maxUnclaimed {
		for id := range s.results {
			delete(s.results, id)
			break
		}
	}
	s.results[turnID] = res
}

// Close implements agent.Session: the pump stops; the sandbox stays (an
// idle session resumes in it; delete removes it, see Relay.Remove).
func (s *session) Close(ctx context.Context) error {
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	s.stopEgress()
	s.c.CloseIdleConnections()
	return nil
}

// Done implements agent.Exiter: closed when the inner session ended or
// its sandbox was lost.
func (s *session) Done() <-chan struct{} { return s.done }

// Exit implements agent.Exiter.
func (s *session) Exit() event.SessionEnded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exit
}

func (s *session) end(ended event.SessionEnded) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.ended, s.exit = true, ended
	close(s.done)
}

// pump reads the inner session's events after the cursor until ctx ends
// (Close) or the inner session ends or is lost.
func (s *session) pump(ctx context.Context) {
	defer s.wg.Done()
	var lostSince time.Time
	var gone error
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	st := s.c.Stream(sctx, s.placed.Session, s.cursor,
		client.WithBackoff(50*time.Millisecond, 2*time.Second),
		client.OnReconnect(func(attempt int, err error, _ time.Duration) {
			if lostSince.IsZero() {
				lostSince = time.Now()
			}
			// The provider says whether the sandbox still exists: a
			// gone one ends the session at once; an unreachable one is
			// retried for LostAfter (a cut heals, and the stream
			// resumes from its last seq).
			pctx, cancel := context.WithTimeout(sctx, 30*time.Second)
			_, cerr := s.p.Connect(pctx, s.placed.Sandbox, s.a.r.token(s.placed.Provider, s.placed.Nonce))
			cancel()
			switch {
			case errors.Is(cerr, provider.ErrGone):
				gone = fmt.Errorf("sandbox %s on %s: %w", s.placed.Sandbox, s.placed.Provider, cerr)
				stop()
			case time.Since(lostSince) > s.a.r.cfg.LostAfter:
				gone = fmt.Errorf("%w: the inner daemon of sandbox %s on %s unreachable for %v: %w", provider.ErrUnavailable, s.placed.Sandbox, s.placed.Provider, s.a.r.cfg.LostAfter, err)
				stop()
			}
		}))
	defer func() { _ = st.Close() }()
	for st.Next() {
		lostSince = time.Time{}
		ev := st.Event()
		if ended := s.handle(ctx, ev); ended != nil {
			s.end(*ended)
			s.a.destroy(ctx, s.p, s.placed.Sandbox) // ended for good: the sandbox goes
			return
		}
		s.cursor = ev.Seq
	}
	if ctx.Err() != nil && gone == nil {
		return // Close
	}
	if gone == nil {
		gone = fmt.Errorf("%w: the inner event stream of sandbox %s failed: %w", provider.ErrUnavailable, s.placed.Sandbox, st.Err())
	}
	s.a.r.cfg.Log.Warn("relayed session lost its sandbox", "session", s.hostID, "sandbox", s.placed.Sandbox, "err", gone)
	msg := gone.Error()
	if snap, ok := s.keep(ctx); ok {
		msg += fmt.Sprintf("; its state is kept in snapshot %s on %s: a resume continues the session on a fresh sandbox made from it", snap, s.placed.Provider)
	}
	s.end(event.SessionEnded{Reason: event.EndError, Message: msg})
	// Lost: whatever is left of the sandbox goes (nothing stays running
	// unobserved on the provider).
	s.a.destroy(ctx, s.p, s.placed.Sandbox)
}

// keep snapshots a lost sandbox as it was left, on a provider with
// snapshots (provider.Snapshotter), and stores the snapshot in the
// session's native id, so a resume makes a fresh sandbox from it
// (adapter.reconnect). It runs on a context of its own: the session is
// ending.
func (s *session) keep(ctx context.Context) (string, bool) {
	sn, ok := s.p.(provider.Snapshotter)
	if !ok {
		return "", false
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	defer cancel()
	snap, err := sn.Snapshot(kctx, s.placed.Sandbox)
	if err != nil {
		s.a.r.cfg.Log.Warn("a snapshot of a lost sandbox", "session", s.hostID, "sandbox", s.placed.Sandbox, "err", err)
		return "", false
	}
	n := s.placed
	n.Snapshot = snap
	if err := s.host.SetNativeSessionID(kctx, n.String()); err != nil {
		s.a.r.cfg.Log.Warn("recording the snapshot of a lost sandbox", "session", s.hostID, "snapshot", snap, "err", err)
		s.a.deleteSnapshot(kctx, s.p, snap)
		return "", false
	}
	return snap, true
}

// handle hands one inner event to the host, as its kind says (see
// Classify); it returns the session's end when the inner session ended.
func (s *session) handle(ctx context.Context, ev event.Event) *event.SessionEnded {
	switch Classify(ev) {
	case Forward:
		out := Relayed(ev)
		if err := s.host.Emit(ctx, out); err != nil {
			s.a.r.cfg.Log.Warn("relaying an event", "session", s.hostID, "err", err)
		}
	case TurnEnd:
		var tc event.TurnCompleted
		_ = json.Unmarshal(ev.Data, &tc)
		s.complete(cmpTurn(ev.TurnID, tc.TurnID), agent.Result{StopReason: tc.StopReason, Usage: tc.Usage, Message: tc.Message})
	case Permission:
		var req event.PermissionRequested
		if json.Unmarshal(ev.Data, &req) == nil && s.ask(ev) {
			go s.askPermission(ctx, req)
		}
	case Question:
		var q event.QuestionRequested
		if json.Unmarshal(ev.Data, &q) == nil && s.ask(ev) {
			go s.askQuestion(ctx, q)
		}
	case End:
		if s.skipEnd > 0 && ev.Seq <= s.skipEnd {
			return nil
		}
		var e event.SessionEnded
		_ = json.Unmarshal(ev.Data, &e)
		if e.Reason == event.EndIdle {
			// The inner daemon stopped its idle agent: the next
			// message the relay sends resumes it there.
			return nil
		}
		e.Message = "the session in the sandbox ended: " + e.Message
		if e.Reason != event.EndCompleted {
			e.Reason = event.EndError
		}
		return &e
	case Skip:
	}
	return nil
}

func cmpTurn(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ask takes a slot for asking ev's request on the host; with maxAsking
// requests being asked already, the request is left unanswered in the
// sandbox (its own timeout settles it) and false is returned.
func (s *session) ask(ev event.Event) bool {
	select {
	case s.asking <- struct{}{}:
		s.wg.Add(1)
		return true
	default:
		s.a.r.cfg.Log.Warn("the inner daemon asks more at once than the relay forwards; left unanswered",
			"session", s.hostID, "inner_seq", ev.Seq, "max", maxAsking)
		return false
	}
}

// asked releases ask's slot.
func (s *session) asked() {
	<-s.asking
	s.wg.Done()
}

// askPermission asks the host's broker (which records the request and
// its answer) and forwards the answer to the inner session.
func (s *session) askPermission(ctx context.Context, req event.PermissionRequested) {
	defer s.asked()
	innerID := req.ID
	req.ID = ""
	ans, err := s.host.RequestPermission(ctx, req)
	if err != nil {
		return // the session ends; the inner request ends with it
	}
	by := "user"
	if ans.By != event.ByUser && ans.By != "" {
		by = "policy"
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := s.c.AnswerPermission(actx, s.placed.Session, innerID, client.PermissionAnswer{
		Decision: string(ans.Decision), OptionID: ans.OptionID, Message: ans.Message, By: by,
	}); err != nil {
		s.a.r.cfg.Log.Warn("forwarding a permission answer", "session", s.hostID, "err", err)
	}
}

// askQuestion is askPermission for a question.
func (s *session) askQuestion(ctx context.Context, q event.QuestionRequested) {
	defer s.asked()
	innerID := q.ID
	q.ID = ""
	ans, err := s.host.AskQuestion(ctx, q)
	if err != nil {
		return
	}
	by := "user"
	if ans.By != event.ByUser && ans.By != "" {
		by = "policy"
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := s.c.AnswerQuestion(actx, s.placed.Session, innerID, client.QuestionAnswer{
		Answer: ans.Text, OptionID: ans.OptionID, Cancel: ans.Cancelled, By: by,
	}); err != nil {
		s.a.r.cfg.Log.Warn("forwarding a question's answer", "session", s.hostID, "err", err)
	}
}

// Kind is what the relay does with an inner event.
type Kind int

// Kinds of inner events.
const (
	// Skip: the host records its own (session.started, turn.started, the
	// user's message, resolutions, configuration).
	Skip Kind = iota
	// Forward: handed to the host as it is (the agent's items, deltas,
	// errors, sandbox reports), with its inner seq.
	Forward
	// TurnEnd completes the turn Prompt waits for.
	TurnEnd
	// Permission and Question are asked through the host's broker.
	Permission
	Question
	// End: the inner session ended; so does the host's.
	End
)

// Classify says what the relay does with an inner event.
func Classify(ev event.Event) Kind {
	switch ev.Type {
	case event.TypeSessionStarted, event.TypeSessionConfigured, event.TypeTurnStarted,
		event.TypePermissionResolved, event.TypeQuestionResolved:
		return Skip
	case event.TypeTurnCompleted:
		return TurnEnd
	case event.TypePermissionRequested:
		return Permission
	case event.TypeQuestionRequested:
		return Question
	case event.TypeSessionEnded:
		return End
	case event.TypeItemStarted, event.TypeItemDelta, event.TypeItemCompleted:
		if ev.Source == event.SourceDaemon {
			return Skip // the user's message, which the host recorded
		}
	}
	return Forward
}

// Relayed is the event the host records for a relayed inner event: its
// type, source and data, and the inner seq and id in its raw field. The
// host gives it its own id, seq, session, turn and time.
func Relayed(ev event.Event) event.Event {
	var raw Raw
	raw.Relay.Seq, raw.Relay.ID = ev.Seq, ev.ID
	b, _ := json.Marshal(raw)
	return event.Event{Type: ev.Type, Source: ev.Source, Data: ev.Data, Raw: b}
}

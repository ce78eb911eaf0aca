// Package engine is the session engine: it starts agent sessions through
// their adapters, runs turns detached from API requests, brokers permission
// and question requests (per request, never cached, with a timeout), and
// writes every event to the store before anyone can see it.
package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/metrics"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/snapshot"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tracing"
)

// Timeouts and their ordering: an agent start must finish well within the
// client's request timeout; a permission waits far longer than one request
// but ends before a typical turn is abandoned.
const (
	DefaultStartTimeout      = 60 * time.Second
	DefaultPermissionTimeout = 5 * time.Minute
	DefaultQuestionTimeout   = 30 * time.Minute
	DefaultCloseTimeout      = 10 * time.Second
)

// DefaultMaxPendingRequests is how many permission requests and questions
// one session may have waiting for an answer at once; the agent's (or its
// sandbox's) further asks are denied by the daemon without asking anyone,
// and reported.
const DefaultMaxPendingRequests = 64

// Permission modes (see client.Permission*).
var permissionModes = map[string]bool{"": true, "default": true, "accept_edits": true, "bypass": true, "plan": true}

// Config configures a Manager.
type Config struct {
	Store   store.Store
	Agents  *agent.Registry
	Metrics *metrics.Metrics
	Log     *slog.Logger
	// WorkspaceDir holds a fresh directory per session created without a
	// working directory.
	WorkspaceDir string
	// PermissionTimeout denies an unanswered permission request (by:
	// timeout). Zero means DefaultPermissionTimeout.
	PermissionTimeout time.Duration
	// QuestionTimeout cancels an unanswered question. Zero means
	// DefaultQuestionTimeout.
	QuestionTimeout time.Duration
	// MaxPendingRequests bounds the permission requests and questions
	// of one session waiting at once. Zero means
	// DefaultMaxPendingRequests.
	MaxPendingRequests int
	StartTimeout       time.Duration
	// Sandboxes, when set, runs sessions inside sandboxes under their
	// policy; nil runs agents on the host and refuses any policy.
	Sandboxes Sandboxes
	// OnViolation, when set, gets every violation a session's sandbox
	// reports (the daemon's audit log). It must not block.
	OnViolation func(sessionID string, v sandbox.Violation)
	// OnNetworkUpdate, when set, gets every change of a session's network
	// allow rules (the audit log).
	OnNetworkUpdate func(sessionID string, previous, allow []string)
	// KeepAgentState keeps what an agent keeps on the host for a session
	// (a sandboxed session's home) when the session is purged; by default
	// it goes with the session (agent.SandboxNeeder.RemoveState).
	KeepAgentState bool
	// MaxLive bounds the sessions with an agent process (starting or
	// live): a create, resume or message that would start one more fails
	// with a *LiveCapError. Sessions whose idle agent was stopped do not
	// count. Zero means no cap.
	MaxLive int
	// IdleTimeout stops the agent process of a session that has been idle
	// (no turn running) that long, when its agent can resume it: the
	// session becomes stopped (session.ended, reason idle) and its next
	// message resumes it. Zero never stops an idle agent.
	IdleTimeout time.Duration
	// IdlePause pauses a session whose agent can pause where it runs
	// (agent.Pauser: a session on a provider whose sandboxes pause) once
	// it has been idle that long (no turn, request or command), instead
	// of stopping it after IdleTimeout: it becomes paused (session.ended,
	// reason paused) and its next message resumes it. Zero: off.
	IdlePause time.Duration
	// Tracer, when set, records the spans of turns, tool calls and
	// permission waits (tracing.go); nil records nothing.
	Tracer *tracing.Tracer
	// Snapshots, when set, records the states of each session's
	// workspace (at its start, before and after each turn) for Diff;
	// nil keeps none and Diff is unavailable.
	Snapshots *snapshot.Store
	// Remote, when set, places sessions created with a provider on its
	// sandboxes (see Remote).
	Remote Remote
	// DaemonID names this daemon in the sessions' leases (owner.go);
	// empty: a new random one (dmn_…), so that a restarted daemon is a
	// new owner.
	DaemonID string
	// Advertise is the URL other daemons sharing the store forward a
	// session's requests to while this daemon drives it; when set,
	// session.started names the daemon.
	Advertise string
	// LeaseTTL is how long a session's lease lasts unrenewed. Zero means
	// DefaultLeaseTTL.
	LeaseTTL time.Duration
}

// AgentExitGrace is how long a turn in flight when its agent process died
// may take to fail by itself before the engine cancels it.
const AgentExitGrace = 2 * time.Second

// DefaultLiveRetryAfter is the Retry-After of a LiveCapError when no live
// session is due to be stopped for idleness sooner.
const DefaultLiveRetryAfter = 10 * time.Second

// CreateParams are the inputs of Create.
type CreateParams struct {
	Agent          string
	Model          string
	Mode           string
	PermissionMode string
	Cwd            string
	Metadata       map[string]string
	// Env is handed to the adapter only; it is never stored.
	Env map[string]string
	// Policy is the request's sandbox policy: a preset name as a JSON
	// string, an inline policy object, or empty for the daemon's default.
	// PolicyDoc is the alternative: a policy file as written.
	Policy    json.RawMessage
	PolicyDoc *PolicyDoc
	// MCPServers are handed to the adapter; what is stored of them has
	// no env or header values.
	MCPServers []agent.MCPServer
	// Provider names the sandbox provider the session runs on (Config.
	// Remote); empty: the default one, or this host.
	Provider string
}

// Manager owns all live sessions. Create one with New, call Recover once
// before serving, and Shutdown at the end.
type Manager struct {
	cfg Config
	// st is cfg.Store, fencing the writes to the sessions this daemon
	// drives (owner.go).
	st  store.Store
	own *owner
	log *slog.Logger

	// base is the parent of every session's context. It is deliberately not
	// derived from any request: agent processes and turns outlive the HTTP
	// request that started them and end only through the engine.
	base       context.Context
	cancelBase context.CancelFunc

	mu       sync.Mutex
	netMu    sync.Mutex // serialises SetNetwork
	live     map[string]*live
	resuming map[string]bool
	// starting counts the agent processes being started (Create, Resume):
	// with the live set, what Config.MaxLive bounds.
	starting int
	// stopping holds the sessions whose idle agent is being stopped, until
	// they are; a message for one waits, then resumes it.
	stopping map[string]*live
	// parked keeps, in memory only, the env a client gave a session whose
	// idle agent was stopped, for the resume its next message makes.
	parked map[string]map[string]string
	// catalogs holds, per agent name, the models and modes its sessions
	// announced last (see Catalog).
	catalogs map[string]Catalog
	// parkedMCP is the same for the session's MCP servers.
	parkedMCP map[string][]agent.MCPServer
	closing   bool
	wg        sync.WaitGroup
}

// New returns a Manager.
func New(cfg Config) *Manager {
	if cfg.PermissionTimeout <= 0 {
		cfg.PermissionTimeout = DefaultPermissionTimeout
	}
	if cfg.QuestionTimeout <= 0 {
		cfg.QuestionTimeout = DefaultQuestionTimeout
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.MaxPendingRequests <= 0 {
		cfg.MaxPendingRequests = DefaultMaxPendingRequests
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	base, cancel := context.WithCancel(context.Background())
	own := newOwner(cfg.Store, cfg)
	st := cfg.Store
	if own.ls != nil {
		st = fencingStore{Store: cfg.Store, o: own}
	}
	return &Manager{cfg: cfg, st: st, own: own, log: cfg.Log, base: base, cancelBase: cancel, live: map[string]*live{}, resuming: map[string]bool{},
		stopping: map[string]*live{}, parked: map[string]map[string]string{},
		parkedMCP: map[string][]agent.MCPServer{}}
}

// Agents lists the registered agents.
func (m *Manager) Agents(ctx context.Context) []agent.Info {
	names := m.cfg.Agents.Names()
	out := make([]agent.Info, 0, len(names))
	for _, n := range names {
		a, _ := m.cfg.Agents.Get(n)
		info := a.Info(ctx)
		info.Name = n
		out = append(out, info)
	}
	return out
}

// Recover settles what a previous daemon run left behind: every session
// that was live and that no other daemon drives (holds an unexpired lease
// of, see owner.go) is marked interrupted (with a session.ended event), or
// stopped when its daemon is gone, and its pending requests are resolved
// as denied by the daemon. Call it once at start, before serving; it then
// starts renewing this daemon's leases and taking over, every lease TTL,
// the sessions whose daemon stopped renewing theirs.
func (m *Manager) Recover(ctx context.Context) (int, error) {
	n, err := m.sweep(ctx)
	if err != nil {
		return n, fmt.Errorf("recover: %w", err)
	}
	m.startOwnership()
	return n, nil
}

// settle resolves a session's pending requests, ends its turn turnID (when
// not empty) as interrupted, appends session.ended and sets its final
// status.
func (m *Manager) settle(ctx context.Context, id string, reason event.EndReason, msg string, status store.Status, turnID string) error {
	reqs, err := m.st.ListRequests(ctx, id, store.StatePending)
	if err != nil {
		return err
	}
	for _, r := range reqs {
		if _, err := m.st.ResolveRequest(ctx, id, r.ID, resolvedEvent(r, event.ByDaemon, msg)); err != nil && !errors.Is(err, store.ErrAlreadyResolved) {
			return err
		}
	}
	if turnID != "" {
		done := event.New(event.SourceDaemon, &event.TurnCompleted{TurnID: turnID, StopReason: event.StopInterrupted, Message: msg})
		done.TurnID = turnID
		if _, err := m.st.Append(ctx, id, done); err != nil {
			return err
		}
	}
	if _, err := m.st.Append(ctx, id, event.New(event.SourceDaemon, &event.SessionEnded{Reason: reason, Message: msg})); err != nil {
		return err
	}
	_, err = m.st.UpdateSession(ctx, id, func(s *store.Session) error {
		now := time.Now().UTC()
		s.Status, s.CurrentTurnID, s.EndedAt = status, "", &now
		return nil
	})
	return err
}

// resolvedEvent builds the daemon's resolution of a pending request.
func resolvedEvent(r store.Request, by event.DecidedBy, msg string) event.Event {
	if r.Kind == store.KindQuestion {
		return event.New(event.SourceDaemon, &event.QuestionResolved{ID: r.ID, Cancelled: true, By: by})
	}
	return event.New(event.SourceDaemon, &event.PermissionResolved{ID: r.ID, Decision: event.DecisionDeny, By: by, Message: msg})
}

// Create validates p, starts the agent and returns the session.
func (m *Manager) Create(ctx context.Context, p CreateParams) (Session, error) {
	var adjusted []LimitAdjustment
	s, err := m.create(ctx, p, &adjusted)
	v := viewSession(s)
	v.Adjusted = adjusted
	return v, err
}

func (m *Manager) create(ctx context.Context, p CreateParams, adjusted *[]LimitAdjustment) (store.Session, error) {
	a, err := m.cfg.Agents.Get(p.Agent)
	if err != nil {
		return store.Session{}, err
	}
	if !permissionModes[p.PermissionMode] {
		return store.Session{}, fmt.Errorf("%w: permission_mode %q is not one of default, accept_edits, bypass, plan", ErrInvalid, p.PermissionMode)
	}
	var placed string
	if m.cfg.Remote != nil {
		if placed, err = m.cfg.Remote.Place(p.Provider); err != nil {
			return store.Session{}, err
		}
	} else if p.Provider != "" {
		return store.Session{}, fmt.Errorf("%w %q (configured: none)", ErrUnknownProvider, p.Provider)
	}
	info := a.Info(ctx)
	if !info.Available && placed == "" {
		return store.Session{}, fmt.Errorf("%w: %s: %s", ErrUnavailable, p.Agent, info.Reason)
	}
	mcp, err := checkMCP(p.Agent, a, info, p.MCPServers)
	if err != nil {
		return store.Session{}, err
	}
	storedMCP, err := storedMCP(mcp)
	if err != nil {
		return store.Session{}, err
	}
	if p.Cwd != "" {
		if !filepath.IsAbs(p.Cwd) {
			return store.Session{}, fmt.Errorf("%w: cwd %q is not an absolute path", ErrInvalid, p.Cwd)
		}
		fi, err := os.Stat(p.Cwd)
		if err != nil || !fi.IsDir() {
			return store.Session{}, fmt.Errorf("%w: cwd %q is not an existing directory", ErrInvalid, p.Cwd)
		}
		if m.cfg.Sandboxes != nil {
			// The operator's global policy says where workspaces may be,
			// sandboxed or not; the session keeps the resolved path.
			if p.Cwd, err = m.cfg.Sandboxes.Workspace(p.Cwd); err != nil {
				return store.Session{}, err
			}
		}
	}
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return store.Session{}, ErrShuttingDown
	}
	m.wg.Add(1) // held until the session is fully set up or torn down
	m.mu.Unlock()
	defer m.wg.Done()

	var policy json.RawMessage
	adj, adjusting := m.cfg.Sandboxes.(AdjustingSandboxes)
	switch {
	case adjusting:
		if policy, *adjusted, err = adj.ResolveAdjusted(ctx, p.Policy, p.PolicyDoc); err != nil {
			return store.Session{}, err
		}
	case m.cfg.Sandboxes != nil:
		if policy, err = m.cfg.Sandboxes.Resolve(ctx, p.Policy, p.PolicyDoc); err != nil {
			return store.Session{}, err
		}
	case p.PolicyDoc != nil || len(p.Policy) > 0 && string(p.Policy) != "null":
		// Fail closed: a policy nobody enforces must not be accepted.
		return store.Session{}, fmt.Errorf("%w: this daemon runs agents without a sandbox (start it with sandboxing enabled)", ErrPolicy)
	}

	if err := m.checkCreateChoices(p.Agent, p.Model, p.Mode); err != nil {
		return store.Session{}, err
	}
	if err := m.checkEnv(p.Agent, a, policy, agent.Config{Model: p.Model, Mode: p.Mode, PermissionMode: p.PermissionMode, Cwd: p.Cwd, Env: p.Env}); err != nil {
		return store.Session{}, err
	}
	if err := checkMCPCredentials(policy, mcp); err != nil {
		return store.Session{}, err
	}

	// A slot under the live cap, held until the agent has started (launch
	// takes it over) or the create fails.
	m.mu.Lock()
	err = m.reserveLocked(ctx)
	m.mu.Unlock()
	if err != nil {
		return store.Session{}, err
	}
	reserved := true
	defer func() {
		if reserved {
			m.release()
		}
	}()

	now := time.Now().UTC()
	s := store.Session{
		ID: ids.New(ids.Session), Agent: p.Agent, Model: p.Model, Mode: p.Mode,
		PermissionMode: p.PermissionMode, Cwd: p.Cwd, Metadata: p.Metadata,
		Status: store.StatusStarting, CreatedAt: now, UpdatedAt: now, Policy: policy,
		// The names only: a resume after a restart says which to send.
		EnvNames: envNames(p.Env),
		// Without their env and header values.
		MCPServers: storedMCP,
		// Where it runs, stored before anything is made there.
		NativeSessionID: placed,
	}
	if s.Cwd == "" {
		s.Cwd = filepath.Join(m.cfg.WorkspaceDir, s.ID)
		if err := os.MkdirAll(s.Cwd, 0o700); err != nil {
			return store.Session{}, fmt.Errorf("create workspace: %w", err)
		}
	}
	if err := m.st.CreateSession(ctx, s); err != nil {
		return store.Session{}, fmt.Errorf("create session: %w", err)
	}
	m.cfg.Metrics.SessionsCreated.Inc()
	// This daemon drives the new session: its lease first, so that
	// every write after this one is fenced.
	if _, err := m.own.claim(ctx, s.ID); err != nil {
		_ = m.settle(context.WithoutCancel(ctx), s.ID, event.EndError, "could not take the session's lease", store.StatusFailed, "")
		return store.Session{}, fmt.Errorf("create session: %w", err)
	}

	reserved = false
	if ra, ok := m.remoteAdapter(ctx, s.Agent, a, placed, policy); ok {
		return m.launch(ctx, s, ra, p.Env, launchOpts{canResume: true, armIdle: true, mcp: mcp, remote: true})
	}
	return m.launch(ctx, s, a, p.Env, launchOpts{canResume: a.Info(ctx).Capabilities.Resume, armIdle: true, mcp: mcp})
}

// launchOpts are the options of launch.
type launchOpts struct {
	// resumed: continue the agent's conversation from its native id.
	resumed bool
	// canResume: the agent can resume the session, so its idle agent
	// process may be stopped (Config.IdleTimeout).
	canResume bool
	// armIdle starts the idle timer at once; false when a turn follows
	// (a message resuming a stopped session).
	armIdle bool
	// mcp are the session's MCP servers, with their values.
	mcp []agent.MCPServer
	// remote: the adapter relays to a provider's sandbox (Remote), which
	// enforces the policy; no sandbox is made here.
	remote bool
}

// reserveLocked takes a slot under Config.MaxLive for an agent process
// about to start. Called with m.mu held.
func (m *Manager) reserveLocked(ctx context.Context) error {
	if m.cfg.MaxLive > 0 && len(m.live)+m.starting >= m.cfg.MaxLive {
		m.log.WarnContext(ctx, "live session cap reached", "max_live_sessions", m.cfg.MaxLive)
		return &LiveCapError{Max: m.cfg.MaxLive, RetryAfter: m.retryAfterLocked()}
	}
	m.starting++
	return nil
}

// release gives back a slot reserveLocked took, for a start that failed.
func (m *Manager) release() {
	m.mu.Lock()
	m.starting--
	m.mu.Unlock()
}

// retryAfterLocked is when a live slot may be free: the earliest idle stop
// due among the live sessions, or DefaultLiveRetryAfter. Called with m.mu
// held.
func (m *Manager) retryAfterLocked() time.Duration {
	best := DefaultLiveRetryAfter
	if m.cfg.IdleTimeout <= 0 && m.cfg.IdlePause <= 0 {
		return best
	}
	now := time.Now()
	for _, l := range m.live {
		if due, ok := l.idleDue(now); ok && due < best {
			best = due
		}
	}
	return max(best, time.Second)
}

// launch starts the agent of a stored session (new, or resumed from its
// native session id), joins it to the live set and records session.started.
// It takes over the slot under the live cap its caller reserved.
func (m *Manager) launch(ctx context.Context, s store.Session, a agent.Adapter, env map[string]string, o launchOpts) (store.Session, error) {
	resumed := o.resumed
	joined := false
	defer func() {
		if !joined {
			m.release()
		}
	}()
	// The session's context descends from the manager's base, not from ctx:
	// the agent lives on after this request returns.
	sctx, cancel := context.WithCancel(m.base)
	l := &live{m: m, id: s.ID, agent: s.Agent, cwd: s.Cwd, ctx: sctx, cancel: cancel, env: env, mcp: o.mcp, canPark: o.canResume, pending: map[string]pending{}, open: openItems{}}
	// closing ends when the session starts to end (not when it has ended,
	// as ctx does): requests raised while it ends are denied at once.
	l.closing, l.stopClosing = context.WithCancelCause(context.Background())
	l.reports = sandbox.NewViolationCoalescer(l.report)
	l.q = newEventQueue(l.write, m.log.With("session", s.ID))

	// The start keeps the request's trace (the sandbox's span, below).
	startCtx, cancelStart := context.WithTimeout(tracing.Carry(sctx, ctx), m.cfg.StartTimeout)
	cfg := agent.Config{
		SessionID: s.ID, Model: s.Model, Mode: s.Mode, PermissionMode: s.PermissionMode,
		Cwd: s.Cwd, Metadata: s.Metadata, Env: env, MCPServers: o.mcp,
	}
	if resumed || o.remote {
		cfg.NativeSessionID = s.NativeSessionID
		l.native = s.NativeSessionID
	}
	// The workspace as the session found it: what Diff compares with.
	m.takeStartState(startCtx, s.ID, s.Cwd)
	var sbInfo *event.SandboxInfo
	if len(s.Policy) > 0 && !o.remote {
		sb, err := m.newSandbox(startCtx, s, a, cfg, l)
		if err != nil {
			cancelStart()
			l.cancel()
			l.stopClosing(errClosing)
			l.reports.Close()
			l.stopPump()
			msg := fmt.Sprintf("sandbox refused: %v", err)
			_ = m.settle(context.WithoutCancel(ctx), s.ID, event.EndError, msg, store.StatusFailed, "")
			m.own.unclaim(s.ID)
			return store.Session{}, err
		}
		l.sb, cfg.Sandbox, l.setAllow, l.sbLimits = sb.Sandbox, sb.Sandbox, sb.SetAllow, sb.Limits
		if len(sb.Env) > 0 {
			// The agent's model APIs go through the proxy's routes;
			// their keys stay outside the sandbox.
			env = maps.Clone(env)
			if env == nil {
				env = map[string]string{}
			}
			maps.Copy(env, sb.Env)
			cfg.Env = env
		}
		info := sb.Info()
		sbInfo = &event.SandboxInfo{Runtime: info.Runtime, Mechanisms: info.Mechanisms, Degraded: info.Degraded}
		l.sbInfo = sbInfo
		if len(info.Degraded) > 0 {
			m.log.WarnContext(ctx, "session sandbox is degraded", "session", s.ID, "missing", info.Degraded)
		}
	}
	sess, err := a.Start(startCtx, cfg, l)
	cancelStart()
	if err != nil {
		l.stopClosing(errClosing)
		if l.sb != nil {
			vs, _ := l.sb.Close(context.WithoutCancel(ctx))
			l.addReports(vs)
		}
		l.reports.Close()
		l.cancel()
		l.stopPump()
		msg := fmt.Sprintf("agent failed to start: %v", err)
		_ = m.settle(context.WithoutCancel(ctx), s.ID, event.EndError, msg, store.StatusFailed, "")
		m.own.unclaim(s.ID)
		return store.Session{}, fmt.Errorf("%w: %s: %w", ErrUnavailable, s.Agent, err)
	}
	l.sess = sess
	if _, ok := sess.(agent.Pauser); ok && m.cfg.IdlePause > 0 {
		l.mu.Lock()
		l.idlePause = true
		l.mu.Unlock()
	}
	// Only a started session joins the live set, so everything that finds
	// it there sees its agent.
	m.mu.Lock()
	closing := m.closing
	m.starting--
	joined = true
	if !closing {
		m.live[s.ID] = l
		delete(m.parked, s.ID)
		delete(m.parkedMCP, s.ID)
		m.cfg.Metrics.SessionsActive.Inc()
	}
	m.mu.Unlock()
	if closing {
		m.endStarted(l, event.SessionEnded{Reason: event.EndInterrupted, Message: "the daemon is shutting down"}, store.StatusInterrupted, DefaultCloseTimeout)
		return store.Session{}, ErrShuttingDown
	}
	// The status is stored before session.started announces it.
	s, err = m.st.UpdateSession(context.WithoutCancel(ctx), s.ID, func(s *store.Session) error {
		s.Status, s.UpdatedAt, s.EndedAt = store.StatusIdle, time.Now().UTC(), nil
		return nil
	})
	if err == nil {
		started := &event.SessionStarted{
			Agent: s.Agent, Model: s.Model, Mode: s.Mode, Cwd: s.Cwd, NativeSessionID: l.nativeID(), Resumed: resumed, Sandbox: sbInfo,
		}
		if m.cfg.Advertise != "" {
			started.Daemon = m.own.id
		}
		if cat, ok := sess.(agent.Cataloger); ok {
			// The agent's own list, announced in the log and kept as
			// the agent's catalog for GET /v1/agents/{name} and the
			// checks of later creates.
			c := cat.Catalog()
			started.Models, started.Modes = c.Models, c.Modes
			started.Model, started.Mode = cmp.Or(started.Model, c.Model), cmp.Or(started.Mode, c.Mode)
			// A permission mode may pick a mode (plan) the agent then reports.
			m.learnCatalog(s.Agent, s.ID, c, s.Model != "", s.Mode != "" || s.PermissionMode != "" && s.PermissionMode != "default")
		}
		err = l.appendWait(event.New(event.SourceDaemon, started))
		if err == nil {
			l.announce()
		}
	}
	if err != nil {
		m.end(context.Background(), l, event.SessionEnded{Reason: event.EndError, Message: "could not record session start"}, store.StatusFailed)
		return store.Session{}, fmt.Errorf("record session start: %w", err)
	}
	s.NativeSessionID = l.nativeID()
	if o.armIdle {
		l.mu.Lock()
		l.idleLocked()
		l.mu.Unlock()
	}
	if ex, ok := sess.(agent.Exiter); ok {
		m.wg.Add(1)
		go m.watchExit(l, ex)
	}
	return s, nil
}

// watchExit ends the session when its agent process dies on its own.
func (m *Manager) watchExit(l *live, ex agent.Exiter) {
	defer m.wg.Done()
	select {
	case <-ex.Done():
	case <-l.ctx.Done():
		return
	}
	end := ex.Exit()
	status := store.StatusEnded
	if end.Reason == event.EndError {
		status = store.StatusFailed
	}
	m.log.Warn("agent exited", "session", l.id, "agent", l.agent, "reason", end.Reason, "exit_code", end.ExitCode)
	ctx, cancel := context.WithTimeout(context.Background(), 2*DefaultCloseTimeout)
	defer cancel()
	m.end(ctx, l, end, status)
}

// drop removes l from the live set.
func (m *Manager) drop(l *live) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.live[l.id] != l {
		return false
	}
	delete(m.live, l.id)
	m.cfg.Metrics.SessionsActive.Dec()
	return true
}

// end tears a live session down once: interrupt the turn, wait for it,
// close the agent, settle pending requests and append session.ended. Waiting
// for the turn and closing the agent share ctx's deadline.
func (m *Manager) end(ctx context.Context, l *live, ended event.SessionEnded, status store.Status) {
	if !m.drop(l) {
		return
	}
	m.endStarted(l, ended, status, timeLeft(ctx))
}

func timeLeft(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), 0)
	}
	return 2 * DefaultCloseTimeout
}

// endStarted is end for a session no longer (or never) in the live set.
func (m *Manager) endStarted(l *live, ended event.SessionEnded, status store.Status, budget time.Duration) {
	deadline := time.Now().Add(budget)
	// A store that is full gets three quarters of the budget to take the
	// session's events; then they are lost (a restart records the end),
	// and what is left of the teardown fails fast, within the budget.
	l.q.giveUpAt(time.Now().Add(budget * 3 / 4))
	// From now on nobody is asked anything: pending and new requests are
	// denied by the daemon.
	l.stopClosing(errClosing)
	l.mu.Lock()
	l.stopping = true
	if l.idleTimer != nil {
		l.idleTimer.Stop()
	}
	turnDone := l.turnDone
	if turnDone != nil && ended.Reason == event.EndError {
		// The agent died: the turn in flight gets a moment to fail by
		// itself, with the adapter's account of the exit, before it is
		// cancelled. The engine alone decides how the turn ends.
		l.mu.Unlock()
		select {
		case <-turnDone:
		case <-time.After(min(AgentExitGrace, time.Until(deadline)/4)):
		}
		l.mu.Lock()
	}
	if l.turnCancel != nil {
		cause := &endingError{msg: ended.Message, agentFailed: ended.Reason == event.EndError}
		if cause.msg == "" {
			cause.msg = "the agent process exited"
			if ended.ExitCode != nil {
				cause.msg += fmt.Sprintf(" with code %d", *ended.ExitCode)
			}
		}
		l.turnCancel(cause)
	}
	l.mu.Unlock()
	if turnDone != nil {
		select {
		case <-turnDone:
		case <-time.After(time.Until(deadline) / 2):
			m.log.Warn("turn did not stop in time; closing the agent", "session", l.id)
		}
	}
	if l.sess != nil {
		// Close gets what is left of the budget (at least a moment to
		// kill a process), detached from any caller.
		cctx, cancel := context.WithTimeout(context.Background(), max(time.Until(deadline), 100*time.Millisecond))
		if err := l.sess.Close(cctx); err != nil {
			m.log.Warn("closing agent", "session", l.id, "err", err)
		}
		cancel()
	}
	var closeEvs []event.Event
	if l.sb != nil {
		// Kill what is left in the sandbox, commit the workspace a last
		// time and release it; what it refused goes before session.ended.
		cctx, cancel := context.WithTimeout(context.Background(), max(time.Until(deadline), time.Second))
		vs, err := l.sb.Close(cctx)
		cancel()
		l.addReports(vs)
		if err != nil {
			closeEvs = append(closeEvs, event.New(event.SourceDaemon, &event.Error{Code: "sandbox_close_failed", Message: err.Error()}))
		}
	}
	// Every count still held is reported before session.ended.
	l.reports.Close()
	l.cancel()
	ctx := context.Background()
	_ = l.q.flush() // the agent's last events go before the session's end
	if len(closeEvs) > 0 {
		_ = l.appendWait(closeEvs...)
	}
	reqs, err := m.st.ListRequests(ctx, l.id, store.StatePending)
	if err == nil {
		for _, r := range reqs {
			_, _ = m.st.ResolveRequest(ctx, l.id, r.ID, resolvedEvent(r, event.ByDaemon, "session ended"))
		}
	}
	// The final status is stored before session.ended is visible.
	_, err = m.st.UpdateSession(ctx, l.id, func(s *store.Session) error {
		now := time.Now().UTC()
		s.Status, s.CurrentTurnID, s.EndedAt, s.UpdatedAt = status, "", &now, now
		return nil
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		m.log.Error("recording session status", "session", l.id, "err", err)
	}
	if err := l.appendWait(event.New(event.SourceDaemon, &ended)); err != nil {
		m.log.Error("recording session end", "session", l.id, "err", err)
	}
	l.stopPump()
	m.own.unclaim(l.id)
}

// Get returns a session.
func (m *Manager) Get(ctx context.Context, id string) (Session, error) {
	s, err := m.get(ctx, id)
	return viewSession(s), err
}

func (m *Manager) get(ctx context.Context, id string) (store.Session, error) {
	s, err := m.st.GetSession(ctx, id)
	return s, notFound(err, "session", id)
}

// List lists sessions, newest first.
func (m *Manager) List(ctx context.Context, opts ListOptions) ([]Session, error) {
	ss, err := m.st.ListSessions(ctx, store.ListOptions{Status: store.Status(opts.Status), Limit: opts.Limit, Before: opts.Before})
	if err != nil {
		return nil, err
	}
	out := make([]Session, len(ss))
	for i, s := range ss {
		out[i] = viewSession(s)
	}
	return out, nil
}

// Delete terminates a live session (its log is kept); with purge it also
// deletes the session and its log.
func (m *Manager) Delete(ctx context.Context, id string, purge bool) error {
	s, err := m.get(ctx, id)
	if err != nil {
		return err
	}
	if l := m.lookup(id); l != nil {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*DefaultCloseTimeout)
		m.end(tctx, l, event.SessionEnded{Reason: event.EndTerminated, Message: "terminated through the API"}, store.StatusEnded)
		cancel()
	} else if err := m.waitStopped(ctx, id); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.parked, id)
	delete(m.parkedMCP, id)
	m.mu.Unlock()
	if m.cfg.Remote != nil && s.NativeSessionID != "" {
		// A deleted session's sandbox goes with it.
		if err := m.cfg.Remote.Remove(ctx, s.NativeSessionID); err != nil {
			return err
		}
	}
	if !purge && (s.Status == store.StatusStopped || s.Status == store.StatusPaused) {
		// Ended for good: its next message no longer resumes it.
		if _, err := m.st.UpdateSession(ctx, id, func(s *store.Session) error {
			if s.Status == store.StatusStopped || s.Status == store.StatusPaused {
				s.Status, s.UpdatedAt = store.StatusEnded, time.Now().UTC()
			}
			return nil
		}); err != nil {
			return notFound(err, "session", id)
		}
	}
	if purge {
		if err := m.st.DeleteSession(ctx, id); err != nil {
			return notFound(err, "session", id)
		}
		m.removeAgentState(s)
		if m.cfg.Snapshots != nil {
			if err := m.cfg.Snapshots.Remove(id); err != nil {
				m.log.Warn("removing the workspace states of a purged session", "session", id, "err", err)
			}
		}
	}
	return nil
}

// removeAgentState deletes what the agent of purged session s keeps on
// the host for it (a sandboxed session's home), unless the operator keeps
// it. A failure is logged: the session is gone either way.
func (m *Manager) removeAgentState(s store.Session) {
	if m.cfg.KeepAgentState {
		return
	}
	a, err := m.cfg.Agents.Get(s.Agent)
	if err != nil {
		return
	}
	if r, ok := a.(agent.SandboxNeeder); ok {
		if err := r.RemoveState(s.ID); err != nil {
			m.log.Warn("removing the agent's state of a purged session", "session", s.ID, "agent", s.Agent, "err", err)
		}
	}
}

// LiveSandbox returns what the sandbox of live session id has in force, as
// its session.started said; ok is false when the session is not live or
// runs on the host.
func (m *Manager) LiveSandbox(id string) (event.SandboxInfo, bool) {
	l := m.lookup(id)
	if l == nil || l.sbInfo == nil {
		return event.SandboxInfo{}, false
	}
	return *l.sbInfo, true
}

func (m *Manager) lookup(id string) *live {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live[id]
}

// liveSession returns the live session id or the reason it has none.
func (m *Manager) liveSession(ctx context.Context, id string) (*live, error) {
	if l := m.lookup(id); l != nil && l.sess != nil {
		return l, nil
	}
	s, err := m.get(ctx, id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	closing := m.closing
	m.mu.Unlock()
	if closing {
		return nil, ErrShuttingDown
	}
	if s.Status.Live() {
		// Its daemon is gone (else the API forwards to it): take it
		// over, which leaves it stopped.
		if took, err := m.takeOver(ctx, id); err != nil {
			return nil, err
		} else if took {
			if s, err = m.get(ctx, id); err != nil {
				return nil, err
			}
		}
	}
	return nil, fmt.Errorf("%w: session %s is %s", ErrNotLive, id, s.Status)
}

// Send starts a turn with the given user content and returns its id at once;
// the turn runs detached from ctx.
func (m *Manager) Send(ctx context.Context, id string, content []event.ContentPart) (string, error) {
	if len(content) == 0 {
		return "", fmt.Errorf("%w: a message needs text or content", ErrInvalid)
	}
	for i, p := range content {
		switch p.Type {
		case event.PartText, event.PartImage, event.PartFile:
		default:
			return "", fmt.Errorf("%w: content[%d].type %q is not text, image or file", ErrInvalid, i, p.Type)
		}
	}
	if hasAttachments(content) {
		name := ""
		if l := m.lookup(id); l != nil {
			name = l.agent
		} else {
			s, err := m.get(ctx, id)
			if err != nil {
				return "", err
			}
			name = s.Agent
		}
		if err := m.checkContent(ctx, name, content); err != nil {
			return "", err
		}
		s, err := m.get(ctx, id)
		if err != nil {
			return "", err
		}
		if content, err = resolveContent(s.Cwd, content); err != nil {
			return "", err
		}
	}
	if l := m.lookup(id); l != nil && l.sess != nil {
		turn, err := l.startTurn(ctx, content)
		if !errors.Is(err, errStopping) {
			return turn, err
		}
	}
	// Not live, or its idle agent is being stopped: wait for that, then
	// resume a stopped session transparently.
	if err := m.waitStopped(ctx, id); err != nil {
		return "", err
	}
	// A session live in the store that nobody here drives: its daemon is
	// gone (else the API forwards to it); taking it over leaves it
	// stopped, and it resumes here.
	if _, err := m.takeOver(ctx, id); err != nil {
		return "", err
	}
	s, err := m.get(ctx, id)
	if err != nil {
		return "", err
	}
	raced := false
	if s.Status == store.StatusStopped || s.Status == store.StatusPaused {
		if _, err := m.resume(ctx, id, nil, nil, false); err != nil {
			if !errors.Is(err, ErrLive) {
				return "", err
			}
			raced = true // another message resumed it first
		}
	}
	l, err := m.liveSession(ctx, id)
	if err != nil {
		if raced && errors.Is(err, ErrNotLive) {
			return "", fmt.Errorf("%w: session %s is being resumed; send the message again", ErrBusy, id)
		}
		return "", err
	}
	turn, err := l.startTurn(ctx, content)
	if errors.Is(err, errStopping) {
		return "", fmt.Errorf("%w: session %s is being stopped; send the message again", ErrBusy, id)
	}
	return turn, err
}

// waitStopped waits until the idle agent of session id, if it is being
// stopped, has stopped.
func (m *Manager) waitStopped(ctx context.Context, id string) error {
	m.mu.Lock()
	l := m.stopping[id]
	m.mu.Unlock()
	if l == nil {
		return nil
	}
	select {
	case <-l.q.stopped():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopIdle stops the agent process of live session l, idle for
// Config.IdleTimeout: the session becomes stopped, its client's env is kept
// in memory for the resume its next message makes. It runs on the idle
// timer's goroutine, detached from any request.
func (m *Manager) stopIdle(l *live) {
	m.log.Info("stopping an idle agent", "session", l.id, "agent", l.agent, "idle_timeout", m.cfg.IdleTimeout)
	msg := fmt.Sprintf("the agent process was stopped after %s idle; the next message resumes the session", m.cfg.IdleTimeout)
	m.park(l, event.SessionEnded{Reason: event.EndIdle, Message: msg}, store.StatusStopped)
}

// park ends the run of live session l, whose agent can resume it, as
// ended and status say (stopped, or paused): its client's env and MCP
// values are kept in memory for the resume its next message makes. It
// runs detached from any request.
func (m *Manager) park(l *live, ended event.SessionEnded, status store.Status) {
	m.mu.Lock()
	if m.closing || m.live[l.id] != l {
		m.mu.Unlock()
		return
	}
	delete(m.live, l.id)
	m.cfg.Metrics.SessionsActive.Dec()
	m.stopping[l.id] = l
	m.parked[l.id] = l.env
	m.parkedMCP[l.id] = l.mcp
	m.wg.Add(1)
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.stopping, l.id)
		m.mu.Unlock()
		m.wg.Done()
	}()
	m.endStarted(l, ended, status, DefaultCloseTimeout)
}

// DefaultPauseTimeout bounds pausing a session's sandbox.
const DefaultPauseTimeout = 2 * time.Minute

// Pause pauses live session id, whose agent can pause where it runs
// (agent.Pauser: a session on a provider whose sandboxes pause): the
// agent is frozen with its memory and files, the session's run ends
// (session.ended, reason paused) and its status is paused; its next
// message, or a resume, resumes it. Pausing a paused session returns it.
// A turn, a pending request or a command running refuses the pause
// (ErrBusy); a session that cannot pause is ErrNotPausable.
func (m *Manager) Pause(ctx context.Context, id string) (Session, error) {
	l, err := m.liveSession(ctx, id)
	if err != nil {
		if s, gerr := m.get(ctx, id); gerr == nil && s.Status == store.StatusPaused {
			return viewSession(s), nil
		}
		return Session{}, err
	}
	if _, ok := l.sess.(agent.Pauser); !ok {
		return Session{}, fmt.Errorf("%w: session %s cannot be paused: its agent %s runs on this host, or on a provider "+
			"whose sandboxes do not pause (capability pause_resume)", ErrNotPausable, id, l.agent)
	}
	if err := m.pause(ctx, l, "paused through the API; the next message resumes the session"); err != nil {
		return Session{}, err
	}
	return m.Get(ctx, id)
}

// pause pauses live session l (its session is an agent.Pauser) when it
// is at rest, then parks it as paused. The pause runs on a context of
// its own: one that began completes whatever becomes of the caller.
func (m *Manager) pause(ctx context.Context, l *live, msg string) error {
	l.mu.Lock()
	switch {
	case l.stopping:
		l.mu.Unlock()
		return fmt.Errorf("%w: session %s is being stopped", ErrBusy, l.id)
	case l.turnCancel != nil, l.configuring:
		l.mu.Unlock()
		return fmt.Errorf("%w: session %s runs a turn: wait for turn.completed or interrupt it, then pause", ErrBusy, l.id)
	case len(l.pending) > 0 || l.execs > 0:
		l.mu.Unlock()
		return fmt.Errorf("%w: session %s has a request waiting for an answer or a command running", ErrBusy, l.id)
	}
	// No turn starts from now on (a message meanwhile answers busy).
	l.stopping = true
	if l.idleTimer != nil {
		l.idleTimer.Stop()
	}
	l.mu.Unlock()
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultPauseTimeout)
	err := l.sess.(agent.Pauser).Pause(pctx)
	cancel()
	if err != nil {
		l.mu.Lock()
		l.stopping = false
		l.idleLocked()
		l.mu.Unlock()
		return fmt.Errorf("pause session %s: %w", l.id, err)
	}
	m.log.Info("paused a session", "session", l.id, "agent", l.agent, "why", msg)
	m.park(l, event.SessionEnded{Reason: event.EndPaused, Message: msg}, store.StatusPaused)
	return nil
}

// pauseIdle pauses live session l, idle for Config.IdlePause; it runs on
// the idle timer's goroutine. A pause that fails leaves the session live
// (the idle timer tries again).
func (m *Manager) pauseIdle(l *live) {
	msg := fmt.Sprintf("the session's sandbox was paused after %s idle; the next message resumes the session", m.cfg.IdlePause)
	if err := m.pause(context.Background(), l, msg); err != nil {
		m.log.Warn("pausing an idle session", "session", l.id, "err", err)
	}
}

// Interrupt cancels the running turn and returns its id.
func (m *Manager) Interrupt(ctx context.Context, id string) (string, error) {
	l, err := m.liveSession(ctx, id)
	if err != nil {
		return "", err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.turnCancel == nil {
		return "", fmt.Errorf("%w in session %s", ErrNoTurn, id)
	}
	l.turnCancel(errInterrupted)
	return l.turnID, nil
}

var errInterrupted = errors.New("interrupted through the API")

// Events reads a page of a session's log.
func (m *Manager) Events(ctx context.Context, id string, after int64, limit int) ([]event.Event, error) {
	evs, err := m.st.Events(ctx, id, after, limit)
	return evs, notFound(err, "session", id)
}

// Subscribe follows a session's log from after.
func (m *Manager) Subscribe(ctx context.Context, id string, after int64) (<-chan event.Event, error) {
	ch, err := m.st.Subscribe(ctx, id, after)
	return ch, notFound(err, "session", id)
}

// Requests lists a session's permission and question requests.
func (m *Manager) Requests(ctx context.Context, id string, state RequestState) ([]Request, error) {
	if _, err := m.get(ctx, id); err != nil {
		return nil, err
	}
	rs, err := m.st.ListRequests(ctx, id, store.RequestState(state))
	if err != nil {
		return nil, err
	}
	out := make([]Request, len(rs))
	for i, r := range rs {
		out[i] = viewRequest(r)
	}
	return out, nil
}

func notFound(err error, what, id string) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%s %s: %w", what, id, ErrNotFound)
	}
	return err
}

// Shutdown stops taking work and ends every live session as interrupted:
// turns are cancelled and agents closed, each within the deadline of ctx,
// after which the remaining agents are abandoned (their Close kills them).
// It never blocks past ctx's deadline.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.stopOwnership()
	m.mu.Lock()
	m.closing = true
	ls := make([]*live, 0, len(m.live))
	for _, l := range m.live {
		ls = append(ls, l)
	}
	m.mu.Unlock()

	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, l := range ls {
			wg.Go(func() {
				m.end(ctx, l, event.SessionEnded{Reason: event.EndInterrupted, Message: "the daemon is shutting down"}, store.StatusInterrupted)
			})
		}
		wg.Wait()
		m.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		m.cancelBase()
		return nil
	case <-ctx.Done():
		m.cancelBase()
		return fmt.Errorf("shutdown: %d sessions did not stop in time: %w", len(ls), ctx.Err())
	}
}

// Resume starts a new agent process for a session that is no longer live
// (interrupted by a daemon restart, ended or failed), continuing the agent's
// own conversation through its native session id. env is handed to the
// agent like at create. Its values were never stored: a resume without a
// variable the client gave at create fails with an *EnvRequiredError
// naming it, unless the daemon holds it itself (see missingEnv).
//
// A session whose idle agent was stopped (status stopped) is resumed the
// same way, with the env its client gave before when env is nil; its next
// message does that by itself.
//
// mcp, when given, are the session's MCP servers again, with their env and
// header values; without them the resume takes those kept in memory for a
// stopped session, or the stored ones when they had no such values (else
// an *MCPRequiredError names the values to send).
func (m *Manager) Resume(ctx context.Context, id string, env map[string]string, mcp ...agent.MCPServer) (Session, error) {
	s, err := m.resume(ctx, id, env, mcp, true)
	return viewSession(s), err
}

// liveError is the error of a resume of a session that is live: it says
// what to do instead.
func liveError(id string, status store.Status) error {
	return fmt.Errorf("%w: session %s is %s, its agent is running: send messages to it directly (POST /v1/sessions/%s/messages); "+
		"resume is for a session that is not live", ErrLive, id, status, id)
}

func (m *Manager) resume(ctx context.Context, id string, env map[string]string, mcp []agent.MCPServer, armIdle bool) (store.Session, error) {
	m.mu.Lock()
	if env == nil {
		env = m.parked[id]
	}
	parkedMCP := m.parkedMCP[id]
	m.mu.Unlock()
	s, err := m.get(ctx, id)
	if err != nil {
		return store.Session{}, err
	}
	a, err := m.cfg.Agents.Get(s.Agent)
	if err != nil {
		return store.Session{}, err
	}
	if err := m.checkEnv(s.Agent, a, s.Policy, agent.Config{SessionID: s.ID, Model: s.Model, Mode: s.Mode, PermissionMode: s.PermissionMode, Cwd: s.Cwd, Env: env}); err != nil {
		return store.Session{}, err
	}
	a, remote := m.remoteAdapter(ctx, s.Agent, a, s.NativeSessionID, s.Policy)
	info := a.Info(ctx)
	switch {
	case s.Status.Live():
		return store.Session{}, liveError(id, s.Status)
	case !info.Capabilities.Resume:
		return store.Session{}, fmt.Errorf("%w: agent %s cannot resume sessions", ErrNotResumable, s.Agent)
	case s.NativeSessionID == "":
		return store.Session{}, fmt.Errorf("%w: session %s never got a native session id from %s", ErrNotResumable, id, s.Agent)
	case !info.Available:
		return store.Session{}, fmt.Errorf("%w: %s: %s", ErrUnavailable, s.Agent, info.Reason)
	}
	// The client's env values were never stored: after a restart (or any
	// loss of the parked env) the resume says which to send again.
	missing, err := m.missingEnv(s, a, env)
	if err != nil {
		return store.Session{}, fmt.Errorf("%w: %w", ErrPolicy, err)
	}
	if len(missing) > 0 {
		return store.Session{}, &EnvRequiredError{ID: id, Names: missing}
	}
	if mcp, err = resumeMCP(s, a, info, mcp, parkedMCP); err != nil {
		return store.Session{}, err
	}
	if err := checkMCPCredentials(s.Policy, mcp); err != nil {
		return store.Session{}, err
	}
	m.mu.Lock()
	switch {
	case m.closing:
		m.mu.Unlock()
		return store.Session{}, ErrShuttingDown
	case m.live[id] != nil:
		m.mu.Unlock()
		return store.Session{}, liveError(id, store.StatusIdle)
	case m.resuming[id]:
		m.mu.Unlock()
		return store.Session{}, fmt.Errorf("%w: session %s is being resumed: send messages to it once its session.started event arrives", ErrLive, id)
	}
	if err := m.reserveLocked(ctx); err != nil {
		m.mu.Unlock()
		return store.Session{}, err
	}
	reserved := true
	m.resuming[id] = true
	m.wg.Add(1)
	m.mu.Unlock()
	defer func() {
		if reserved {
			m.release()
		}
		m.mu.Lock()
		delete(m.resuming, id)
		m.mu.Unlock()
		m.wg.Done()
	}()
	policy, err := m.rebind(ctx, s)
	if err != nil {
		return store.Session{}, err
	}
	// This daemon drives the session from now on; another that holds its
	// lease refuses the resume (the API forwards to it first).
	if _, err := m.own.claim(ctx, id); err != nil {
		return store.Session{}, notFound(err, "session", id)
	}
	launched := false
	defer func() {
		if !launched {
			m.own.unclaim(id)
		}
	}()
	s, err = m.st.UpdateSession(ctx, id, func(s *store.Session) error {
		if s.Status.Live() {
			return liveError(id, s.Status)
		}
		s.Status, s.UpdatedAt = store.StatusStarting, time.Now().UTC()
		if policy != nil {
			s.Policy = policy
		}
		return nil
	})
	if err != nil {
		return store.Session{}, notFound(err, "session", id)
	}
	reserved, launched = false, true
	return m.launch(ctx, s, a, env, launchOpts{resumed: true, canResume: true, armIdle: armIdle, mcp: mcp, remote: remote})
}

// rebind checks a stored session against the operator's global policy as
// it is now (it may have changed since the session was created): its
// working directory must still be an allowed workspace, and its policy is
// intersected with the current global policy, which may tighten it or,
// when the session asked for something no longer granted, refuse the
// resume (ErrPolicy naming the field). It returns the policy to store, nil
// when the session runs without a sandbox.
func (m *Manager) rebind(ctx context.Context, s store.Session) (json.RawMessage, error) {
	if m.cfg.Sandboxes == nil {
		return nil, nil
	}
	if s.Cwd != filepath.Join(m.cfg.WorkspaceDir, s.ID) {
		cwd, err := m.cfg.Sandboxes.Workspace(s.Cwd)
		if err != nil {
			return nil, fmt.Errorf("resume session %s: %w", s.ID, err)
		}
		if cwd != s.Cwd {
			return nil, fmt.Errorf("%w: resume session %s: its cwd %s now resolves to %s", ErrPolicy, s.ID, s.Cwd, cwd)
		}
	}
	if len(s.Policy) == 0 {
		return nil, nil
	}
	p, err := m.cfg.Sandboxes.Reconcile(ctx, s.Policy)
	if err != nil {
		return nil, fmt.Errorf("resume session %s: %w", s.ID, err)
	}
	return p, nil
}

// Network returns a session's network rules.
func (m *Manager) Network(ctx context.Context, id string) (Network, error) {
	s, err := m.get(ctx, id)
	if err != nil {
		return Network{}, err
	}
	if len(s.Policy) == 0 || m.cfg.Sandboxes == nil {
		return Network{}, fmt.Errorf("%w: session %s has no sandbox, so no network rules", ErrNoSandbox, id)
	}
	n, err := m.cfg.Sandboxes.Network(s.Policy)
	if err != nil {
		return Network{}, err
	}
	if l := m.lookup(id); l != nil && l.setAllow != nil {
		n.Live = true
	}
	return n, nil
}

// SetNetwork replaces the allow rules of a session's sandbox network:
// checked against the operator's global policy, stored with the session's
// policy (a resumed session keeps them) and, when the session runs behind
// the egress proxy, enforced at once for every new connection. The change
// goes to Config.OnNetworkUpdate (the audit log).
func (m *Manager) SetNetwork(ctx context.Context, id string, allow []string) (Network, error) {
	if allow == nil {
		allow = []string{}
	}
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return Network{}, ErrShuttingDown
	}
	m.mu.Unlock()
	// One update at a time, so the stored rules, the proxy's and the
	// audited "previous" never disagree.
	m.netMu.Lock()
	defer m.netMu.Unlock()
	s, err := m.get(ctx, id)
	if err != nil {
		return Network{}, err
	}
	if len(s.Policy) == 0 || m.cfg.Sandboxes == nil {
		return Network{}, fmt.Errorf("%w: session %s has no sandbox, so no network rules", ErrNoSandbox, id)
	}
	prev, err := m.cfg.Sandboxes.Network(s.Policy)
	if err != nil {
		return Network{}, err
	}
	updated, err := m.cfg.Sandboxes.ReplaceAllow(s.Policy, allow)
	if err != nil {
		return Network{}, err
	}
	if _, err := m.st.UpdateSession(ctx, id, func(s *store.Session) error {
		s.Policy, s.UpdatedAt = updated, time.Now().UTC()
		return nil
	}); err != nil {
		return Network{}, notFound(err, "session", id)
	}
	n, err := m.cfg.Sandboxes.Network(updated)
	if err != nil {
		return Network{}, err
	}
	if l := m.lookup(id); l != nil && l.setAllow != nil {
		if err := l.setAllow(allow); err != nil {
			return Network{}, fmt.Errorf("apply the network rules: %w", err)
		}
		n.Live = true
	}
	if m.cfg.OnNetworkUpdate != nil {
		m.cfg.OnNetworkUpdate(id, prev.Allow, n.Allow)
	}
	return n, nil
}

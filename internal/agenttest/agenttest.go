package agenttest

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// Defaults of Target.
const (
	DefaultTimeout         = 2 * time.Minute
	DefaultInterruptWithin = 5 * time.Second
	// FakeKey is the API key LLM.Key returns.
	FakeKey = "sk-fake-agenttest"
)

// LLM is the fake model provider of one Run, as the adapter factory and
// Target.Env see it.
type LLM interface {
	// URL returns the base URL the agent should use as its provider's,
	// with Target.URLSuffix appended (e.g. "/v1" for OpenAI clients).
	// With scenario "", requests go through the suite's switcher, which
	// serves whatever scenario the running subtest selected: this is the
	// URL an adapter or session should be configured with. A non-empty
	// scenario pins that scenario instead, bypassing the switcher.
	URL(scenario string) string
	// Key is the API key the fake LLM expects to be sent (any key is
	// accepted; the suite checks this one reached it).
	Key() string
	// Requests returns the requests the fake LLM answered so far.
	Requests() []fakellm.Request
}

// Target is one agent adapter under test.
type Target struct {
	// Name is the adapter's registry name (sessions are created with it).
	Name string
	// New builds the adapter, pointed at llm (through its options, or
	// through Env below). It is called once per Run.
	New func(t *testing.T, llm LLM) agent.Adapter
	// Env, if set, is the environment every session is created with
	// (client.CreateSession.Env), e.g. the provider's base URL and key.
	Env func(llm LLM) map[string]string
	// Caps is what the adapter claims. Each true flag the suite can check
	// is asserted; for a false flag the assertion is skipped with a
	// message. It is compared with the adapter's Info().Capabilities.
	Caps agent.Capabilities
	// Protocol is the fakellm API the agent speaks (fakellm.APIAnthropic,
	// APIResponses, APIChat, APIGemini); the suite checks the agent's
	// requests used it. Empty skips that check.
	Protocol string
	// URLSuffix is appended to the base URLs LLM.URL returns ("/v1").
	URLSuffix string
	// KillAgent kills the agent's process of the session running in
	// sessionCwd, as a crash would (SIGKILL), in the unsandboxed variant.
	// Nil means KillAgentByCwd: the direct child of the test process whose
	// cwd is sessionCwd.
	KillAgent func(t *testing.T, sessionCwd string)
	// Sandboxed declares what differs when the agent runs sandboxed.
	Sandboxed Sandboxed
	// Timeout bounds each turn (DefaultTimeout).
	Timeout time.Duration
	// InterruptWithin bounds the time from the interrupt request to the
	// turn's turn.completed (DefaultInterruptWithin).
	InterruptWithin time.Duration
}

type subtest struct {
	name string
	fn   func(*suite, *testing.T)
}

// subtests are the conformance subtests, in the order Run runs them.
var subtests = []subtest{
	{"write", (*suite).testWrite},
	{"permission_allow", func(s *suite, t *testing.T) { s.testPermission(t, true) }},
	{"permission_deny", func(s *suite, t *testing.T) { s.testPermission(t, false) }},
	{"two_turns", (*suite).testTwoTurns},
	{"interrupt", (*suite).testInterrupt},
	{"crash", (*suite).testCrash},
	{"upstream_error", (*suite).testUpstreamError},
	{"content", func(s *suite, t *testing.T) { s.CheckContent(t) }},
}

// Run runs the conformance subtests on tg twice, each variant on a stack
// of its own (see NewStack) with one fake LLM behind a scenario switcher:
// "host", on the session engine with the agent on the host, and
// "sandboxed", on a whole daemon whose sessions run in sandboxes with the
// agent-default policy, the model reached only through the egress proxy
// (the Host internal/daemon/daemontest registers). The sandboxed variant
// runs QuickSubtests unless AGENTBOX_CONFORMANCE=full, minus what
// tg.Sandboxed declares; it is skipped, with the reason, when the machine
// cannot build sandboxes, and fails when no sandboxed host is registered.
// See the package doc.
func Run(t *testing.T, tg Target) {
	t.Helper()
	if tg.Name == "" || tg.New == nil {
		t.Fatal("agenttest: Target needs Name and New")
	}
	if tg.Timeout <= 0 {
		tg.Timeout = DefaultTimeout
	}
	if tg.InterruptWithin <= 0 {
		tg.InterruptWithin = DefaultInterruptWithin
	}
	for name := range tg.Sandboxed.Skip {
		if !slices.ContainsFunc(subtests, func(c subtest) bool { return c.name == name }) {
			t.Errorf("Target.Sandboxed.Skip names no subtest: %q", name)
		}
	}
	t.Run(EngineHost{}.Name(), func(t *testing.T) {
		kill := tg.KillAgent
		if kill == nil {
			kill = KillAgentByCwd
		}
		runOn(t, tg, EngineHost{}, kill, nil)
	})
	t.Run("sandboxed", func(t *testing.T) { runSandboxed(t, tg, registeredSandboxHost(), QuickSubtests) })
	for _, rt := range tg.Sandboxed.Runtimes {
		t.Run("sandboxed-"+rt, func(t *testing.T) { runSandboxed(t, tg, registeredSandboxHostOn(rt), QuickOtherRuntimes) })
	}
}

// runSandboxed runs the sandboxed variant on h: the subtests of quick,
// or all of them with AGENTBOX_CONFORMANCE=full.
func runSandboxed(t *testing.T, tg Target, h Host, quick []string) {
	t.Helper()
	if h == nil {
		t.Fatal("no sandboxed host is registered: add an external test file importing internal/daemon/daemontest for its side effect (see the agenttest package doc)")
	}
	if why := h.Probe(t.Context()); why != "" {
		t.Skipf("this host cannot build sandboxes: %s", why)
	}
	if tg.Sandboxed.Unsupported != "" {
		checkUnsupported(t, tg, h)
		t.Skipf("%s does not run sandboxed: %s", tg.Name, tg.Sandboxed.Unsupported)
	}
	kill := tg.Sandboxed.KillAgent
	if kill == nil {
		kill = h.KillAgent
	}
	if n := tg.Sandboxed.New; n != nil {
		tg.New = func(t *testing.T, llm LLM) agent.Adapter { return n(t, llm, h.StateDir(t)) }
	}
	skip := maps.Clone(tg.Sandboxed.Skip)
	if skip == nil {
		skip = map[string]string{}
	}
	if !fullSandboxed() {
		for _, c := range subtests {
			if _, ok := skip[c.name]; !ok && !slices.Contains(quick, c.name) {
				skip[c.name] = "not in the default sandboxed subset (set " + FullEnv + "=full to run every subtest sandboxed)"
			}
		}
	}
	runOn(t, tg, h, kill, skip)
}

// checkUnsupported holds Target.Sandboxed.Unsupported to the truth: a
// sandboxed session of the agent must be refused with an error saying it
// cannot run sandboxed (agent.ErrNoSandbox), at its creation or its
// first turn. Once the agent can, the declaration fails the run.
func checkUnsupported(t *testing.T, tg Target, h Host) {
	t.Helper()
	s := newSuite(t, tg, h)
	ctx, cancel := context.WithTimeout(t.Context(), tg.Timeout)
	defer cancel()
	var env map[string]string
	if tg.Env != nil {
		env = tg.Env(s.LLM)
	}
	ses, err := s.C.CreateSession(ctx, client.CreateSession{Agent: tg.Name, Cwd: h.Workspace(t), Env: env, Policy: h.Policy()})
	if err == nil {
		defer func() { _ = s.C.DeleteSession(context.Background(), ses.ID, false) }()
		var tr client.Turn
		if tr, err = s.C.Send(ctx, ses.ID, "hello"); err == nil {
			var tc event.TurnCompleted
			tc, err = s.C.WaitTurn(ctx, ses.ID, tr.TurnID, 0, nil)
			if err == nil && tc.StopReason == event.StopError {
				err = errors.New(tc.Message)
			}
		}
	}
	if err == nil || !strings.Contains(err.Error(), agent.ErrNoSandbox.Error()) {
		t.Errorf("Target.Sandboxed.Unsupported says %s cannot run sandboxed, but a sandboxed session was not refused with %q (err: %v): remove the declaration", tg.Name, agent.ErrNoSandbox, err)
	}
}

// runOn builds a stack on h and runs the subtests but those of skip,
// which are skipped with their reason.
func runOn(t *testing.T, tg Target, h Host, kill func(*testing.T, string), skip map[string]string) {
	tg.KillAgent = kill
	s := newSuite(t, tg, h)
	for _, c := range subtests {
		start := time.Now()
		t.Run(c.name, func(t *testing.T) {
			if why, ok := skip[c.name]; ok {
				t.Skip(why)
			}
			c.fn(s, t)
		})
		t.Logf("%s: %s", c.name, time.Since(start).Round(time.Millisecond))
	}
}

type suite struct {
	tg Target
	*Stack
}

func newSuite(t *testing.T, tg Target, h Host) *suite {
	t.Helper()
	s := NewStack(t, StackOptions{
		Name:      tg.Name,
		New:       func(_ testing.TB, llm LLM) agent.Adapter { return tg.New(t, llm) },
		Env:       tg.Env,
		URLSuffix: tg.URLSuffix,
		Timeout:   tg.Timeout,
		Host:      h,
	})
	info := s.Adapter.Info(context.Background())
	if !info.Available {
		t.Fatalf("agent %s is not available: %s", tg.Name, info.Reason)
	}
	if info.Capabilities != tg.Caps {
		t.Errorf("Target.Caps %+v differ from the adapter's Info().Capabilities %+v", tg.Caps, info.Capabilities)
	}
	t.Logf("agent %s %s (%s), caps %+v", tg.Name, info.Version, info.Path, tg.Caps)
	return &suite{tg: tg, Stack: s}
}

// sessionCheck says how a session's log is checked at the end of a subtest.
type sessionCheck struct {
	// shape is the pattern (MatchShape) the whole log must match.
	shape []string
}

// session creates a session in a fresh directory. At the end of the
// subtest the session is deleted (terminated) and its whole log is read
// back and checked with CheckInvariants and against chk.shape.
func (s *suite) session(t *testing.T, mode string, chk sessionCheck) (client.Session, string) {
	t.Helper()
	ses, cwd := s.Create(t, mode, nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.C.DeleteSession(ctx, ses.ID, false); err != nil {
			t.Errorf("delete session: %v", err)
		}
		var log []event.Event
		if err := s.C.EventsAll(ctx, ses.ID, 0, func(e event.Event) error { log = append(log, e); return nil }); err != nil {
			t.Errorf("read the log: %v", err)
			return
		}
		// No exception, not even for an agent that died mid-item: the
		// engine completes what the agent left open.
		if errs := CheckInvariants(log); len(errs) > 0 {
			t.Errorf("invariants of session %s:\n%v\nshape:\n  %s\nevents:\n%s", ses.ID, joinErrs(errs),
				strings.Join(Shape(log), "\n  "), Dump(log))
		}
		if chk.shape != nil {
			if err := MatchShape(Shape(log), chk.shape...); err != nil {
				t.Error(err)
			}
		}
		s.Host.Check(t, ses.ID, log)
		if t.Failed() {
			t.Logf("events of session %s:\n%s", ses.ID, Dump(log))
		}
	})
	return ses, cwd
}

// textDeltas counts the text deltas of item id.
func textDeltas(evs []event.Event, id string) int {
	n := 0
	for _, e := range evs {
		if e.Type == event.TypeItemDelta {
			if d := decode[event.ItemDelta](e); d.ItemID == id && d.Field == event.DeltaText {
				n++
			}
		}
	}
	return n
}

func ofType(evs []event.Event, typ event.Type) []event.Event {
	var out []event.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func fileContent(cwd, name string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(cwd, name))
	return string(b), err == nil
}

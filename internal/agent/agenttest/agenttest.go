package agenttest

import (
	"context"
	"os"
	"path/filepath"
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
	// sessionCwd, as a crash would (SIGKILL). Nil means KillAgentByCwd:
	// the direct child of the test process whose cwd is sessionCwd.
	KillAgent func(t *testing.T, sessionCwd string)
	// Timeout bounds each turn (DefaultTimeout).
	Timeout time.Duration
	// InterruptWithin bounds the time from the interrupt request to the
	// turn's turn.completed (DefaultInterruptWithin).
	InterruptWithin time.Duration
}

// Run builds one stack for tg (SQLite store, session engine with the
// adapter registered, HTTP API on a real server, the Go client) and one
// fake LLM behind a scenario switcher, and runs the conformance subtests on
// it one after another. See the package doc.
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
	if tg.KillAgent == nil {
		tg.KillAgent = KillAgentByCwd
	}
	s := newSuite(t, tg)
	for _, c := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"write", s.testWrite},
		{"permission_allow", func(t *testing.T) { s.testPermission(t, true) }},
		{"permission_deny", func(t *testing.T) { s.testPermission(t, false) }},
		{"two_turns", s.testTwoTurns},
		{"interrupt", s.testInterrupt},
		{"crash", s.testCrash},
		{"upstream_error", s.testUpstreamError},
	} {
		start := time.Now()
		t.Run(c.name, c.fn)
		t.Logf("%s: %s", c.name, time.Since(start).Round(time.Millisecond))
	}
}

type suite struct {
	tg Target
	*Stack
}

func newSuite(t *testing.T, tg Target) *suite {
	t.Helper()
	s := NewStack(t, StackOptions{
		Name:      tg.Name,
		New:       func(_ testing.TB, llm LLM) agent.Adapter { return tg.New(t, llm) },
		Env:       tg.Env,
		URLSuffix: tg.URLSuffix,
		Timeout:   tg.Timeout,
		// Resolve symlinks (e.g. a /tmp link) so cwd compares equal to
		// /proc/PID/cwd.
		Cwd: func(t testing.TB) string {
			cwd := t.TempDir()
			if r, err := filepath.EvalSymlinks(cwd); err == nil {
				cwd = r
			}
			return cwd
		},
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

// Package providertest is the conformance suite every sandbox provider
// (internal/provider/...) passes, like storetest for stores and agenttest
// for agents. A provider's test calls Run with a factory:
//
//	func TestConformance(t *testing.T) {
//		providertest.Run(t, func(t *testing.T) providertest.Harness {
//			return providertest.Harness{Provider: docker.New(...)}
//		})
//	}
//
// The host daemon of the relay steps runs in the test binary, which must
// be able to be the helpers the daemon re-executes itself as; the
// provider's test package calls Main from its TestMain:
//
//	func TestMain(m *testing.M) { providertest.Main(m) }
//
// Run builds the static agentbox binary once per test binary (Main
// removes it at the end), and runs the sequence as subtests, each on a fresh
// provider from the factory: the lifecycle (Create with a token made for
// the sandbox, the inner daemon answering with that token alone, Connect,
// List, Destroy leaving nothing, an unknown option refused with nothing
// left), an exec with a policy through a host daemon (exec.go), a process
// through it (process.go), the
// optional abilities the provider has (pause, snapshots: snapshot.go),
// then a session relayed by a host daemon (see relay.go). A step
// the provider cannot do is skipped, naming the capability or the
// Harness field it lacks.
package providertest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/reexec"
	"github.com/agentbox/agentbox/internal/sdkgen/sdktest"
)

// Harness is a provider under test and what the suite needs around it.
type Harness struct {
	// Provider is the provider under test, configured (credentials,
	// endpoints of its fake control plane).
	Provider provider.Provider
	// Options are the Spec.Options every sandbox is created with.
	Options map[string]string
	// Binary is the static agentbox binary uploaded into sandboxes;
	// empty: the suite builds it (Binary).
	Binary string
	// KillInner kills the inner daemon of a sandbox (not the sandbox), as
	// a crash inside it would; nil skips the "inner daemon killed" step.
	KillInner func(ctx context.Context, id string) error
	// Timeout bounds each provider call (default 3 minutes: sandboxes
	// are slow to make on a loaded machine).
	Timeout time.Duration
}

// Factory returns a fresh harness for one subtest; cleanups it needs go
// through t.Cleanup.
type Factory func(t *testing.T) Harness

// Binary builds the static agentbox binary once per test binary and
// returns its path.
func Binary(t testing.TB) string { return sdktest.Binary(t) }

// RemoveBinary removes what Binary built (Main does).
func RemoveBinary() { sdktest.RemoveBinary() }

// Main is the TestMain of a provider's test package: the test binary
// runs the helper its argv names, as the daemon re-executes itself (and
// exits), or else the tests, then removes the binary Binary built.
func Main(m *testing.M) {
	reexec.Init()
	code := m.Run()
	RemoveBinary()
	os.Exit(code)
}

// Run runs the conformance suite against the providers the factory makes.
func Run(t *testing.T, factory Factory) {
	t.Run("Lifecycle", func(t *testing.T) { testLifecycle(t, setup(t, factory)) })
	t.Run("UnknownOption", func(t *testing.T) { testUnknownOption(t, setup(t, factory)) })
	t.Run("ConnectGone", func(t *testing.T) { testConnectGone(t, setup(t, factory)) })
	t.Run("Exec", func(t *testing.T) { testExec(t, setup(t, factory)) })
	t.Run("Process", func(t *testing.T) { testProcess(t, setup(t, factory)) })
	runAbilities(t, factory)
	runRelay(t, factory)
}

// suite is one subtest's harness, completed.
type suite struct {
	Harness
	owner string
}

func setup(t *testing.T, factory Factory) *suite {
	t.Helper()
	h := factory(t)
	if h.Provider == nil {
		t.Fatal("providertest: the factory returned no Provider")
	}
	if h.Binary == "" {
		h.Binary = Binary(t)
	}
	if h.Timeout == 0 {
		h.Timeout = 3 * time.Minute
	}
	s := &suite{Harness: h, owner: "providertest-" + randomToken(t)[:12]}
	// Whatever a failing step left is removed, and the provider must
	// list nothing of the owner afterwards.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
		defer cancel()
		l, ok := s.Provider.(provider.Lister)
		if !ok {
			return
		}
		ids, err := l.List(ctx, s.owner)
		if err != nil {
			t.Errorf("List at cleanup: %v", err)
			return
		}
		for _, id := range ids {
			if err := s.Provider.Destroy(ctx, id); err != nil {
				t.Errorf("Destroy(%s) at cleanup: %v", id, err)
			}
		}
	})
	return s
}

func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), s.Timeout)
	t.Cleanup(cancel)
	return ctx
}

func (s *suite) spec(t *testing.T) provider.Spec {
	return provider.Spec{
		Owner:   s.owner,
		Binary:  s.Binary,
		Token:   randomToken(t),
		Options: s.Options,
		Labels:  map[string]string{"test": t.Name()},
	}
}

// randomToken makes a token as the host daemon does: 32 bytes of
// crypto/rand.
func randomToken(t testing.TB) string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// inner returns a client of the sandbox's inner daemon.
func inner(t *testing.T, sb provider.Sandbox, token string) *client.Client {
	t.Helper()
	c, err := client.New(sb.Address, client.WithToken(token))
	if err != nil {
		t.Fatalf("client.New(%q): %v", sb.Address, err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// answers checks that the inner daemon is healthy and takes token (and
// only it) for its API.
func answers(ctx context.Context, t *testing.T, sb provider.Sandbox, token string) {
	t.Helper()
	if _, err := inner(t, sb, token).Health(ctx); err != nil {
		t.Fatalf("inner daemon of %s: health: %v", sb.ID, err)
	}
	if _, err := inner(t, sb, token).ListSessions(ctx, client.ListOptions{}); err != nil {
		t.Fatalf("inner daemon of %s refused its token: %v", sb.ID, err)
	}
	_, err := inner(t, sb, randomToken(t)).ListSessions(ctx, client.ListOptions{})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 401 {
		t.Fatalf("inner daemon of %s with another token: %v, want 401", sb.ID, err)
	}
}

// listed reports whether List has id for the suite's owner; ok is false
// when the provider has no Lister.
func (s *suite) listed(ctx context.Context, t *testing.T, id string) (found, ok bool) {
	t.Helper()
	l, ok := s.Provider.(provider.Lister)
	if !ok {
		return false, false
	}
	ids, err := l.List(ctx, s.owner)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return slices.Contains(ids, id), true
}

// empty fails unless List returns nothing for the suite's owner.
func (s *suite) empty(ctx context.Context, t *testing.T) {
	t.Helper()
	l, ok := s.Provider.(provider.Lister)
	if !ok {
		return
	}
	ids, err := l.List(ctx, s.owner)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(ids) != 0 {
		t.Fatalf("List after destroy = %v, want nothing left", ids)
	}
}

func testLifecycle(t *testing.T, s *suite) {
	ctx := s.ctx(t)
	if err := s.Provider.Health(ctx); err != nil {
		t.Fatalf("Health: %v", err)
	}
	spec := s.spec(t)
	sb, err := s.Provider.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if sb.ID == "" || sb.Address == "" || sb.Token != spec.Token {
		t.Fatalf("Create = {ID:%q Address:%q, token given back: %v}", sb.ID, sb.Address, sb.Token == spec.Token)
	}
	answers(ctx, t, sb, spec.Token)
	if found, ok := s.listed(ctx, t, sb.ID); ok && !found {
		t.Fatalf("List(%s) does not have the sandbox %s", s.owner, sb.ID)
	}
	if found, ok := s.listedFor(ctx, t, "another-owner", sb.ID); ok && found {
		t.Fatalf("List(another-owner) has the sandbox %s", sb.ID)
	}
	re, err := s.Provider.Connect(ctx, sb.ID, spec.Token)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	if re.ID != sb.ID {
		t.Fatalf("Connect = %q, want %q", re.ID, sb.ID)
	}
	answers(ctx, t, re, spec.Token)
	if err := s.Provider.Destroy(ctx, sb.ID); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if _, err := s.Provider.Connect(ctx, sb.ID, spec.Token); !errors.Is(err, provider.ErrGone) {
		t.Fatalf("Connect after Destroy = %v, want ErrGone", err)
	}
	if err := s.Provider.Destroy(ctx, sb.ID); err != nil {
		t.Fatalf("Destroy of a gone sandbox = %v, want no error", err)
	}
	s.empty(ctx, t)
}

func (s *suite) listedFor(ctx context.Context, t *testing.T, owner, id string) (found, ok bool) {
	t.Helper()
	l, ok := s.Provider.(provider.Lister)
	if !ok {
		return false, false
	}
	ids, err := l.List(ctx, owner)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return slices.Contains(ids, id), true
}

func testUnknownOption(t *testing.T, s *suite) {
	ctx := s.ctx(t)
	spec := s.spec(t)
	opts := map[string]string{"providertest-no-such-option": "1"}
	for k, v := range s.Options {
		opts[k] = v
	}
	spec.Options = opts
	sb, err := s.Provider.Create(ctx, spec)
	if err == nil {
		_ = s.Provider.Destroy(ctx, sb.ID)
		t.Fatal("Create with an unknown option succeeded, want it refused")
	}
	s.empty(ctx, t)
}

func testConnectGone(t *testing.T, s *suite) {
	ctx := s.ctx(t)
	if _, err := s.Provider.Connect(ctx, "providertest-never-made", randomToken(t)); !errors.Is(err, provider.ErrGone) {
		t.Fatalf("Connect(never made) = %v, want ErrGone", err)
	}
}

package vendortest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/provider"
)

// Faked is a test's view of a vendor's fake (Fake has it).
type Faked interface {
	Fail(op string, fault Fault)
	Running() []string
	Processes() int
	SentIntoSandboxes() []byte
	Logs(id string) string
}

// Vendor is a vendor's provider and its fake.
type Vendor interface {
	provider.Provider
	provider.Lister
}

// Lifecycle checks the life of one sandbox of p on its fake f: create
// (created, when not nil, checks what the fake was asked for) → the inner
// daemon answers with the token and not without → a mock-agent turn
// through it → none of secrets (name → value) and the token only once
// (its file) sent into the sandbox → Connect and List by owner find it →
// Destroy, twice → List empty, Connect ErrGone, nothing left running.
func Lifecycle(t *testing.T, p Vendor, f Faked, sp provider.Spec, secrets map[string]string, created func(provider.Sandbox)) {
	t.Helper()
	ctx := t.Context()
	if err := p.Health(ctx); err != nil {
		t.Fatalf("Health: %v", err)
	}
	sb, err := p.Create(ctx, sp)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sandbox log:\n%s", f.Logs(sb.ID))
		}
	})
	if sb.Token != sp.Token || sb.ID == "" {
		t.Fatalf("Create = %+v", sb)
	}
	if created != nil {
		created(sb)
	}
	// The token is the one asked for: without it the daemon refuses.
	anon, err := client.New(sb.Address)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anon.ListSessions(ctx, client.ListOptions{}); err == nil {
		t.Error("the inner daemon answered without the token")
	}
	c, err := client.New(sb.Address, client.WithToken(sb.Token))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("inner health: %v", err)
	}
	s, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatalf("CreateSession in the sandbox: %v", err)
	}
	turn, err := c.SendMessage(ctx, s.ID, client.SendMessage{Text: "hello"})
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	if _, err := c.WaitTurn(ctx, s.ID, turn.TurnID, 0, nil); err != nil {
		t.Fatalf("WaitTurn: %v", err)
	}
	// No credential entered the sandbox; the token went in a file, never
	// on a command line.
	sent := f.SentIntoSandboxes()
	for name, secret := range secrets {
		if bytes.Contains(sent, []byte(secret)) {
			t.Errorf("the %s was sent into the sandbox", name)
		}
	}
	if n := bytes.Count(sent, []byte(sp.Token)); n != 1 {
		t.Errorf("the token was sent into the sandbox %d times, want once (its file)", n)
	}
	// Connect finds it again (a host restart), and so does List.
	again, err := p.Connect(ctx, sb.ID, sb.Token)
	if err != nil || again.Address != sb.Address {
		t.Fatalf("Connect = %+v, %v", again, err)
	}
	ids, err := p.List(ctx, sp.Owner)
	if err != nil || len(ids) != 1 || ids[0] != sb.ID {
		t.Fatalf("List = %v, %v; want [%s]", ids, err, sb.ID)
	}
	if ids, err := p.List(ctx, "someone-else"); err != nil || len(ids) != 0 {
		t.Fatalf("List(someone-else) = %v, %v", ids, err)
	}
	if err := p.Destroy(ctx, sb.ID); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if err := p.Destroy(ctx, sb.ID); err != nil {
		t.Errorf("Destroy of a gone sandbox: %v", err)
	}
	if ids, err := p.List(ctx, sp.Owner); err != nil || len(ids) != 0 {
		t.Errorf("List after Destroy = %v, %v", ids, err)
	}
	if _, err := p.Connect(ctx, sb.ID, sb.Token); !errors.Is(err, provider.ErrGone) {
		t.Errorf("Connect after Destroy = %v, want ErrGone", err)
	}
	Empty(t, f)
}

// Empty checks that nothing is left on the fake: no sandbox, no process.
func Empty(t testing.TB, f Faked) {
	t.Helper()
	if r, n := f.Running(), f.Processes(); len(r) != 0 || n != 0 {
		t.Errorf("left on the fake: sandboxes %v, processes %d", r, n)
	}
}

// FaultCase is one failure of a vendor, injected into an operation.
type FaultCase struct {
	Name  string
	Op    string
	Fault Fault
	// Want is the contract's sentinel the failed Create wraps (none when
	// nil), and Message the vendor's message its text keeps.
	Want    error
	Message string
}

// Faults checks that each failure fails Create with the contract's
// sentinel and the vendor's message, never secret, and leaves nothing
// running. setup makes a fresh fake and its provider for each case
// (bounding requests short when hang: what the client waits is the
// test's subject, not a timing); spec is what Create asks for.
func Faults(t *testing.T, cases []FaultCase, setup func(t *testing.T, hang bool) (Vendor, Faked, string), spec func(t *testing.T) provider.Spec) {
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			p, f, secret := setup(t, tc.Fault.Hang)
			f.Fail(tc.Op, tc.Fault)
			_, err := p.Create(t.Context(), spec(t))
			if err == nil {
				t.Fatal("Create succeeded")
			}
			if tc.Want != nil && !errors.Is(err, tc.Want) {
				t.Errorf("Create: %v, want %v", err, tc.Want)
			}
			if !strings.Contains(err.Error(), tc.Message) {
				t.Errorf("Create: %v, want the vendor's message %q", err, tc.Message)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error holds the credential: %v", err)
			}
			Empty(t, f)
		})
	}
}

// NewSpec is what a vendor's test asks Create for: an owner and a token
// named after the test, the agentbox binary at binary, one label.
func NewSpec(t testing.TB, binary string) provider.Spec {
	name := strings.ReplaceAll(t.Name(), "/", "-")
	return provider.Spec{Owner: "host-" + name, Binary: binary, Token: "tok-" + name + "-0123456789", Labels: map[string]string{"purpose": "test"}}
}

// RequestTimeout is a test's bound of a provider's requests: short when
// the fault injected is a hang (what the client waits is the test's
// subject, not a timing), else normal.
func RequestTimeout(hang bool, normal time.Duration) time.Duration {
	if hang {
		return 300 * time.Millisecond
	}
	return normal
}

// Recorder is a testing.TB that keeps what is reported with Errorf: what
// a validating handler (Spec.Handler) reports, for the tests of what it
// refuses.
type Recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

// Errorf keeps the report.
func (r *Recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// Helper implements testing.TB.
func (r *Recorder) Helper() {}

// Reports is what was reported, a line a report.
func (r *Recorder) Reports() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.errs, "\n")
}

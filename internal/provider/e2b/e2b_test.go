package e2b_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/e2b"
	"github.com/agentbox/agentbox/internal/provider/e2b/e2btest"
	"github.com/agentbox/agentbox/internal/provider/providertest"
)

// TestMain runs the re-exec helpers the host daemon of the relay steps
// starts (providertest.Main) and removes the built binary.
func TestMain(m *testing.M) { providertest.Main(m) }

// setup starts a fake E2B and a provider pointed at it.
func setup(t *testing.T) (*e2btest.Fake, *e2b.Provider) {
	t.Helper()
	f := e2btest.New(t)
	p, err := e2b.New(e2b.Config{APIKey: f.APIKey, APIURL: f.URL(), SandboxURL: f.SandboxURL, RequestTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return f, p
}

func spec(t *testing.T) provider.Spec {
	return provider.Spec{
		Owner:  "host-" + strings.ReplaceAll(t.Name(), "/", "-"),
		Binary: providertest.Binary(t),
		Token:  "tok-" + strings.ReplaceAll(t.Name(), "/", "-") + "-0123456789",
		Labels: map[string]string{"purpose": "test"},
	}
}

// TestLifecycle: create → the inner daemon answers with the token → a
// session with the mock agent through it → destroy → nothing left.
func TestLifecycle(t *testing.T) {
	f, p := setup(t)
	ctx := t.Context()
	if err := p.Health(ctx); err != nil {
		t.Fatalf("Health: %v", err)
	}
	sp := spec(t)
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

	// The API key never entered the sandbox; the token went in a file,
	// never on a command line.
	sent := f.SentIntoSandboxes()
	if bytes.Contains(sent, []byte(f.APIKey)) {
		t.Error("the E2B API key was sent into the sandbox")
	}
	if n := bytes.Count(sent, []byte(sp.Token)); n != 1 {
		t.Errorf("the token was sent into the sandbox %d times, want once (its file)", n)
	}

	// Connect finds it again (a host restart).
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
	if r, n := f.Running(), f.Processes(); len(r) != 0 || n != 0 {
		t.Errorf("left on the fake: sandboxes %v, processes %d", r, n)
	}
}

// TestFaults: each failure of the vendor gives the contract's sentinel
// with the vendor's message, and leaves nothing running.
func TestFaults(t *testing.T) {
	const quota = "you have reached the maximum number of concurrent E2B sandboxes (20). If you need more, please visit 'https://e2b.dev/docs/billing'"
	for _, tc := range []struct {
		name    string
		op      string
		fault   e2btest.Fault
		want    error
		message string
	}{
		{"quota", e2btest.OpCreate, e2btest.Fault{Status: 429, Message: quota}, provider.ErrQuota, quota},
		{"server error", e2btest.OpCreate, e2btest.Fault{Status: 500, Message: "Failed to create sandbox: placement failed"}, provider.ErrUnavailable, "placement failed"},
		{"unavailable", e2btest.OpCreate, e2btest.Fault{Status: 503, Message: "no node available"}, provider.ErrUnavailable, "no node available"},
		{"timeout", e2btest.OpCreate, e2btest.Fault{Hang: true}, provider.ErrUnavailable, "timed out"},
		{"refused key", e2btest.OpCreate, e2btest.Fault{Status: 401, Message: "Invalid API key"}, provider.ErrCredentials, "Invalid API key"},
		{"upload fails", e2btest.OpUpload, e2btest.Fault{Status: 507, Message: "not enough disk space available"}, nil, "not enough disk space available"},
		{"upload 500", e2btest.OpUpload, e2btest.Fault{Status: 500, Message: "error opening file"}, provider.ErrUnavailable, "error opening file"},
		{"start fails", e2btest.OpStart, e2btest.Fault{Message: "error starting process: exec format error"}, provider.ErrUnavailable, "exec format error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := e2btest.New(t)
			cfg := e2b.Config{APIKey: f.APIKey, APIURL: f.URL(), SandboxURL: f.SandboxURL, RequestTimeout: 20 * time.Second}
			if tc.fault.Hang {
				cfg.RequestTimeout = 300 * time.Millisecond // what the client waits is the test's subject, not a timing
			}
			p, err := e2b.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			f.Fail(tc.op, tc.fault)
			sp := spec(t)
			_, err = p.Create(t.Context(), sp)
			if err == nil {
				t.Fatal("Create succeeded")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Create: %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Errorf("Create: %v, want the vendor's message %q", err, tc.message)
			}
			if strings.Contains(err.Error(), f.APIKey) {
				t.Errorf("the error holds the API key: %v", err)
			}
			if r, n := f.Running(), f.Processes(); len(r) != 0 || n != 0 {
				t.Errorf("left on the fake: sandboxes %v, processes %d", r, n)
			}
		})
	}
}

// TestCredentials: a missing key names the variable; a refused one is
// ErrCredentials with E2B's message.
func TestCredentials(t *testing.T) {
	_, err := e2b.FromEnv(func(string) string { return "" })
	if !errors.Is(err, provider.ErrCredentials) || !strings.Contains(err.Error(), e2b.EnvAPIKey) {
		t.Errorf("FromEnv without a key: %v", err)
	}
	cfg, err := e2b.FromEnv(func(k string) string {
		return map[string]string{e2b.EnvAPIKey: "k", e2b.EnvAPIURL: "https://api.example", e2b.EnvDomain: "example"}[k]
	})
	if err != nil || cfg.APIKey != "k" || cfg.APIURL != "https://api.example" || cfg.Domain != "example" {
		t.Errorf("FromEnv = %+v, %v", cfg, err)
	}
	f := e2btest.New(t)
	p, err := e2b.New(e2b.Config{APIKey: "e2b_wrong", APIURL: f.URL(), SandboxURL: f.SandboxURL})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Health(t.Context()); !errors.Is(err, provider.ErrCredentials) || !strings.Contains(err.Error(), "Invalid API key") {
		t.Errorf("Health with a wrong key: %v", err)
	}
	if _, err := p.List(t.Context(), "x"); !errors.Is(err, provider.ErrCredentials) {
		t.Errorf("List with a wrong key: %v", err)
	}
}

// TestSpecRefused: what E2B cannot do is refused before anything is
// created, naming the field.
func TestSpecRefused(t *testing.T) {
	f, p := setup(t)
	for _, tc := range []struct {
		name  string
		edit  func(*provider.Spec)
		field string
	}{
		{"cpus", func(s *provider.Spec) { s.CPUs = 2 }, "cpus"},
		{"memory", func(s *provider.Spec) { s.MemoryBytes = 1 << 30 }, "memory_bytes"},
		{"unknown option", func(s *provider.Spec) { s.Options = map[string]string{"region": "eu"} }, `"region"`},
		{"timeout", func(s *provider.Spec) { s.Timeout = 48 * time.Hour }, "timeout"},
		{"owner label", func(s *provider.Spec) { s.Labels = map[string]string{e2b.OwnerKey: "x"} }, e2b.OwnerKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := provider.Spec{Owner: "o", Binary: "/nonexistent", Token: "t"}
			tc.edit(&sp)
			_, err := p.Create(t.Context(), sp)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Create: %v, want an error naming %s", err, tc.field)
			}
		})
	}
	if r := f.Running(); len(r) != 0 {
		t.Errorf("created: %v", r)
	}
	// An unknown template is E2B's refusal, with its message.
	sp := spec(t)
	sp.Options = map[string]string{"template": "nope"}
	if _, err := p.Create(t.Context(), sp); err == nil || !strings.Contains(err.Error(), "template 'nope' not found") {
		t.Errorf("Create with an unknown template: %v", err)
	}
}

// TestListPages: List follows X-Next-Token across pages.
func TestListPages(t *testing.T) {
	// Many sandboxes are too slow to start for real: create through the
	// fake's control plane only, as a crashed daemon leaves them.
	f, p := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const n = 205
	for range n {
		f.CreateBare(t, map[string]string{e2b.OwnerKey: "crashed"})
	}
	f.CreateBare(t, map[string]string{e2b.OwnerKey: "other"})
	ids, err := p.List(ctx, "crashed")
	if err != nil || len(ids) != n {
		t.Fatalf("List = %d ids, %v; want %d", len(ids), err, n)
	}
	for _, id := range ids {
		if err := p.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if r := f.Running(); len(r) != 1 {
		t.Errorf("running after reconciliation: %v, want the other owner's one", r)
	}
}

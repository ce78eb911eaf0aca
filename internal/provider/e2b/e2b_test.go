package e2b_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/e2b"
	"github.com/agentbox/agentbox/internal/provider/e2b/e2btest"
	"github.com/agentbox/agentbox/internal/provider/providertest"
	"github.com/agentbox/agentbox/internal/provider/vendortest"
)

// TestMain runs the re-exec helpers the host daemon of the relay steps
// starts (providertest.Main) and removes the built binary.
func TestMain(m *testing.M) { providertest.Main(m) }

// setup starts a fake E2B and a provider pointed at it, its requests
// bounded by timeout.
func setup(t *testing.T, timeout time.Duration) (*e2btest.Fake, *e2b.Provider) {
	t.Helper()
	f := e2btest.New(t)
	p, err := e2b.New(e2b.Config{APIKey: f.APIKey, APIURL: f.URL(), SandboxURL: f.SandboxURL, RequestTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return f, p
}

func spec(t *testing.T) provider.Spec { return vendortest.NewSpec(t, providertest.Binary(t)) }

// TestLifecycle: create → the inner daemon answers with the token → a
// session with the mock agent through it → destroy → nothing left; the
// API key never sent into the sandbox.
func TestLifecycle(t *testing.T) {
	f, p := setup(t, 20*time.Second)
	vendortest.Lifecycle(t, p, f, spec(t), map[string]string{"E2B API key": f.APIKey}, nil)
}

// TestFaults: each failure of the vendor gives the contract's sentinel
// with the vendor's message, and leaves nothing running.
func TestFaults(t *testing.T) {
	const quota = "you have reached the maximum number of concurrent E2B sandboxes (20). If you need more, please visit 'https://e2b.dev/docs/billing'"
	vendortest.Faults(t, []vendortest.FaultCase{
		{Name: "quota", Op: e2btest.OpCreate, Fault: e2btest.Fault{Status: 429, Message: quota}, Want: provider.ErrQuota, Message: quota},
		{Name: "server error", Op: e2btest.OpCreate, Fault: e2btest.Fault{Status: 500, Message: "Failed to create sandbox: placement failed"}, Want: provider.ErrUnavailable, Message: "placement failed"},
		{Name: "unavailable", Op: e2btest.OpCreate, Fault: e2btest.Fault{Status: 503, Message: "no node available"}, Want: provider.ErrUnavailable, Message: "no node available"},
		{Name: "timeout", Op: e2btest.OpCreate, Fault: e2btest.Fault{Hang: true}, Want: provider.ErrUnavailable, Message: "timed out"},
		{Name: "refused key", Op: e2btest.OpCreate, Fault: e2btest.Fault{Status: 401, Message: "Invalid API key"}, Want: provider.ErrCredentials, Message: "Invalid API key"},
		{Name: "upload fails", Op: e2btest.OpUpload, Fault: e2btest.Fault{Status: 507, Message: "not enough disk space available"}, Want: nil, Message: "not enough disk space available"},
		{Name: "upload 500", Op: e2btest.OpUpload, Fault: e2btest.Fault{Status: 500, Message: "error opening file"}, Want: provider.ErrUnavailable, Message: "error opening file"},
		{Name: "start fails", Op: e2btest.OpStart, Fault: e2btest.Fault{Message: "error starting process: exec format error"}, Want: provider.ErrUnavailable, Message: "exec format error"},
	}, func(t *testing.T, hang bool) (vendortest.Vendor, vendortest.Faked, string) {
		f, p := setup(t, vendortest.RequestTimeout(hang, 20*time.Second))
		return p, f, f.APIKey
	}, spec)
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
	f, p := setup(t, 20*time.Second)
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
	f, p := setup(t, 20*time.Second)
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

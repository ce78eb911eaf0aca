package daytona_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/daytona"
	"github.com/agentbox/agentbox/internal/provider/daytona/daytonatest"
	"github.com/agentbox/agentbox/internal/provider/providertest"
	"github.com/agentbox/agentbox/internal/provider/vendortest"
)

// TestMain runs the re-exec helpers the host daemon of the relay steps
// starts (providertest.Main) and removes the built binary.
func TestMain(m *testing.M) { providertest.Main(m) }

// setup starts a fake Daytona and a provider pointed at it, its requests
// bounded by timeout.
func setup(t *testing.T, timeout time.Duration) (*daytonatest.Fake, *daytona.Provider) {
	t.Helper()
	f := daytonatest.New(t)
	p, err := daytona.New(daytona.Config{APIKey: f.APIKey, APIURL: f.URL(), RequestTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return f, p
}

func spec(t *testing.T) provider.Spec { return vendortest.NewSpec(t, providertest.Binary(t)) }

// TestLifecycle: create (with resources) → the inner daemon answers with
// the token → a mock-agent turn through it → destroy → nothing left.
func TestLifecycle(t *testing.T) {
	f, p := setup(t, 20*time.Second)
	sp := spec(t)
	sp.CPUs, sp.MemoryBytes = 2, 2<<30
	vendortest.Lifecycle(t, p, f, sp, map[string]string{"Daytona API key": f.APIKey}, func(sb provider.Sandbox) {
		if cpu, mem, _ := f.Created(sb.ID); cpu != 2 || mem != 2 {
			t.Errorf("created with cpu %d, memory %d GiB; want 2, 2", cpu, mem)
		}
	})
}

// TestFaults: each failure gives the contract's sentinel with Daytona's
// message and leaves nothing running.
func TestFaults(t *testing.T) {
	vendortest.Faults(t, []vendortest.FaultCase{
		{Name: "quota", Op: daytonatest.OpCreate, Fault: daytonatest.Fault{Status: 429, Message: "Total CPU quota exceeded. Maximum allowed: 10"}, Want: provider.ErrQuota, Message: "Total CPU quota exceeded"},
		{Name: "server error", Op: daytonatest.OpCreate, Fault: daytonatest.Fault{Status: 500, Message: "Internal server error"}, Want: provider.ErrUnavailable, Message: "Internal server error"},
		{Name: "timeout", Op: daytonatest.OpCreate, Fault: daytonatest.Fault{Hang: true}, Want: provider.ErrUnavailable, Message: "timed out"},
		{Name: "refused key", Op: daytonatest.OpCreate, Fault: daytonatest.Fault{Status: 401, Message: "Unauthorized"}, Want: provider.ErrCredentials, Message: "Unauthorized"},
		{Name: "upload fails", Op: daytonatest.OpUpload, Fault: daytonatest.Fault{Status: 500, Message: "no space left on device"}, Want: provider.ErrUnavailable, Message: "no space left on device"},
		{Name: "exec fails", Op: daytonatest.OpExec, Fault: daytonatest.Fault{Status: 400, Message: "failed to execute command"}, Want: nil, Message: "failed to execute command"},
		{Name: "preview fails", Op: daytonatest.OpPreview, Fault: daytonatest.Fault{Status: 503, Message: "proxy unavailable"}, Want: provider.ErrUnavailable, Message: "proxy unavailable"},
	}, func(t *testing.T, hang bool) (vendortest.Vendor, vendortest.Faked, string) {
		f, p := setup(t, vendortest.RequestTimeout(hang, 20*time.Second))
		return p, f, f.APIKey
	}, spec)
}

func TestCredentials(t *testing.T) {
	_, err := daytona.FromEnv(func(string) string { return "" })
	if !errors.Is(err, provider.ErrCredentials) || !strings.Contains(err.Error(), daytona.EnvAPIKey) {
		t.Errorf("FromEnv without a key: %v", err)
	}
	f := daytonatest.New(t)
	p, err := daytona.New(daytona.Config{APIKey: "dtn_wrong", APIURL: f.URL()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Health(t.Context()); !errors.Is(err, provider.ErrCredentials) || !strings.Contains(err.Error(), "Invalid API key") {
		t.Errorf("Health with a wrong key: %v", err)
	}
}

// TestSpecRefused: what Daytona cannot do is refused before anything is
// created, naming the field; the vendor's own refusal keeps its message.
func TestSpecRefused(t *testing.T) {
	f, p := setup(t, 20*time.Second)
	for _, tc := range []struct {
		name  string
		edit  func(*provider.Spec)
		field string
	}{
		{"fractional cpus", func(s *provider.Spec) { s.CPUs = 1.5 }, "cpus"},
		{"memory not in GiB", func(s *provider.Spec) { s.MemoryBytes = 1500 << 20 }, "memory_bytes"},
		{"timeout", func(s *provider.Spec) { s.Timeout = time.Hour }, "timeout"},
		{"unknown option", func(s *provider.Spec) { s.Options = map[string]string{"image": "x"} }, `"image"`},
		{"owner label", func(s *provider.Spec) { s.Labels = map[string]string{daytona.OwnerKey: "x"} }, daytona.OwnerKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := provider.Spec{Owner: "o", Binary: "/nonexistent", Token: "t"}
			tc.edit(&sp)
			if _, err := p.Create(t.Context(), sp); err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Create: %v, want an error naming %s", err, tc.field)
			}
		})
	}
	sp := spec(t)
	sp.CPUs = 16
	if _, err := p.Create(t.Context(), sp); !errors.Is(err, provider.ErrCredentials) || !strings.Contains(err.Error(), "exceeds maximum") {
		t.Errorf("Create beyond the organization's maximum: %v", err)
	}
	if r := f.Running(); len(r) != 0 {
		t.Errorf("created: %v", r)
	}
}

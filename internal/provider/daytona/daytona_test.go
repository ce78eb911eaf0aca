package daytona_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/daytona"
	"github.com/agentbox/agentbox/internal/provider/daytona/daytonatest"
	"github.com/agentbox/agentbox/internal/provider/providertest"
)

// TestMain runs the re-exec helpers the host daemon of the relay steps
// starts (providertest.Main) and removes the built binary.
func TestMain(m *testing.M) { providertest.Main(m) }

func setup(t *testing.T) (*daytonatest.Fake, *daytona.Provider) {
	t.Helper()
	f := daytonatest.New(t)
	p, err := daytona.New(daytona.Config{APIKey: f.APIKey, APIURL: f.URL(), RequestTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return f, p
}

func spec(t *testing.T) provider.Spec {
	name := strings.ReplaceAll(t.Name(), "/", "-")
	return provider.Spec{Owner: "host-" + name, Binary: providertest.Binary(t), Token: "tok-" + name + "-0123456789", Labels: map[string]string{"purpose": "test"}}
}

// TestLifecycle: create (with resources) → the inner daemon answers with
// the token → a mock-agent turn through it → destroy → nothing left.
func TestLifecycle(t *testing.T) {
	f, p := setup(t)
	ctx := t.Context()
	if err := p.Health(ctx); err != nil {
		t.Fatalf("Health: %v", err)
	}
	sp := spec(t)
	sp.CPUs, sp.MemoryBytes = 2, 2<<30
	sb, err := p.Create(ctx, sp)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sandbox log:\n%s", f.Logs(sb.ID))
		}
	})
	if cpu, mem, _ := f.Created(sb.ID); cpu != 2 || mem != 2 {
		t.Errorf("created with cpu %d, memory %d GiB; want 2, 2", cpu, mem)
	}
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
	sent := f.SentIntoSandboxes()
	if bytes.Contains(sent, []byte(f.APIKey)) {
		t.Error("the Daytona API key was sent into the sandbox")
	}
	if n := bytes.Count(sent, []byte(sp.Token)); n != 1 {
		t.Errorf("the token was sent into the sandbox %d times, want once (its file)", n)
	}
	again, err := p.Connect(ctx, sb.ID, sb.Token)
	if err != nil || again.Address != sb.Address {
		t.Fatalf("Connect = %+v, %v", again, err)
	}
	ids, err := p.List(ctx, sp.Owner)
	if err != nil || len(ids) != 1 || ids[0] != sb.ID {
		t.Fatalf("List = %v, %v; want [%s]", ids, err, sb.ID)
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

// TestFaults: each failure gives the contract's sentinel with Daytona's
// message and leaves nothing running.
func TestFaults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		op      string
		fault   daytonatest.Fault
		want    error
		message string
	}{
		{"quota", daytonatest.OpCreate, daytonatest.Fault{Status: 429, Message: "Total CPU quota exceeded. Maximum allowed: 10"}, provider.ErrQuota, "Total CPU quota exceeded"},
		{"server error", daytonatest.OpCreate, daytonatest.Fault{Status: 500, Message: "Internal server error"}, provider.ErrUnavailable, "Internal server error"},
		{"timeout", daytonatest.OpCreate, daytonatest.Fault{Hang: true}, provider.ErrUnavailable, "timed out"},
		{"refused key", daytonatest.OpCreate, daytonatest.Fault{Status: 401, Message: "Unauthorized"}, provider.ErrCredentials, "Unauthorized"},
		{"upload fails", daytonatest.OpUpload, daytonatest.Fault{Status: 500, Message: "no space left on device"}, provider.ErrUnavailable, "no space left on device"},
		{"exec fails", daytonatest.OpExec, daytonatest.Fault{Status: 400, Message: "failed to execute command"}, nil, "failed to execute command"},
		{"preview fails", daytonatest.OpPreview, daytonatest.Fault{Status: 503, Message: "proxy unavailable"}, provider.ErrUnavailable, "proxy unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := daytonatest.New(t)
			cfg := daytona.Config{APIKey: f.APIKey, APIURL: f.URL(), RequestTimeout: 20 * time.Second}
			if tc.fault.Hang {
				cfg.RequestTimeout = 300 * time.Millisecond
			}
			p, err := daytona.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			f.Fail(tc.op, tc.fault)
			_, err = p.Create(t.Context(), spec(t))
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
	f, p := setup(t)
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

package vercel_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/providertest"
	"github.com/agentbox/agentbox/internal/provider/vendortest"
	"github.com/agentbox/agentbox/internal/provider/vercel"
	"github.com/agentbox/agentbox/internal/provider/vercel/verceltest"
)

// TestMain runs the re-exec helpers the host daemon of the relay steps
// starts (providertest.Main) and removes the built binary.
func TestMain(m *testing.M) { providertest.Main(m) }

// config is the provider's configuration for the fake f. A request's
// bound is generous: the upload carries the whole binary, which the fake
// validates and unpacks, slowly under -race on a loaded machine.
func config(f *verceltest.Fake) vercel.Config {
	return vercel.Config{Token: f.Token, TeamID: f.TeamID, ProjectID: f.ProjectID, APIURL: f.URL(), RequestTimeout: 2 * time.Minute}
}

// setup starts a fake Vercel and a provider pointed at it, its requests
// bounded by timeout.
func setup(t *testing.T, timeout time.Duration) (*verceltest.Fake, *vercel.Provider) {
	t.Helper()
	f := verceltest.New(t)
	cfg := config(f)
	cfg.RequestTimeout = timeout
	p, err := vercel.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f, p
}

func spec(t *testing.T) provider.Spec { return vendortest.NewSpec(t, providertest.Binary(t)) }

// TestLifecycle: create (with resources, a session that boots) → the
// inner daemon answers with the token → a mock-agent turn through it →
// destroy → nothing left; no credential and the token once (its file)
// sent into the sandbox.
func TestLifecycle(t *testing.T) {
	f, p := setup(t, 2*time.Minute)
	sp := spec(t)
	sp.CPUs, sp.MemoryBytes = 4, 4*vercel.MemoryPerVCPU
	secrets := map[string]string{"Vercel token": f.Token, "Vercel team": f.TeamID, "Vercel project": f.ProjectID}
	vendortest.Lifecycle(t, p, f, sp, secrets, func(sb provider.Sandbox) {
		vcpus, timeout, tags, persistent := f.Created(sb.ID)
		if vcpus != 4 || timeout != vercel.DefaultTimeout.Milliseconds() || persistent {
			t.Errorf("created with vcpus %d, timeout %d ms, persistent %v; want 4, %d, false", vcpus, timeout, persistent, vercel.DefaultTimeout.Milliseconds())
		}
		if tags[vercel.OwnerKey] != sp.Owner || tags["purpose"] != "test" || len(tags) != 2 {
			t.Errorf("tags %v", tags)
		}
	})
}

// TestFaults: each failure gives the contract's sentinel with Vercel's
// message and leaves nothing running.
func TestFaults(t *testing.T) {
	vendortest.Faults(t, []vendortest.FaultCase{
		{Name: "quota", Op: verceltest.OpCreate, Fault: verceltest.Fault{Status: 429, Code: "too_many_requests", Message: "You have reached the limit of 10 concurrent sandboxes"}, Want: provider.ErrQuota, Message: "limit of 10 concurrent sandboxes"},
		{Name: "server error", Op: verceltest.OpCreate, Fault: verceltest.Fault{Status: 500, Message: "An unexpected internal error occurred"}, Want: provider.ErrUnavailable, Message: "unexpected internal error"},
		{Name: "bad gateway", Op: verceltest.OpCreate, Fault: verceltest.Fault{Status: 502, Message: "upstream unavailable"}, Want: provider.ErrUnavailable, Message: "upstream unavailable"},
		{Name: "timeout", Op: verceltest.OpCreate, Fault: verceltest.Fault{Hang: true}, Want: provider.ErrUnavailable, Message: "timed out"},
		{Name: "refused token", Op: verceltest.OpCreate, Fault: verceltest.Fault{Status: 403, Code: "forbidden", Message: "Not authorized"}, Want: provider.ErrCredentials, Message: "Not authorized"},
		{Name: "session fails", Op: verceltest.OpSession, Fault: verceltest.Fault{Status: 503, Message: "session service unavailable"}, Want: provider.ErrUnavailable, Message: "session service unavailable"},
		{Name: "session hangs", Op: verceltest.OpSession, Fault: verceltest.Fault{Hang: true}, Want: provider.ErrUnavailable, Message: "timed out"},
		{Name: "upload fails", Op: verceltest.OpWrite, Fault: verceltest.Fault{Status: 500, Message: "no space left on device"}, Want: provider.ErrUnavailable, Message: "no space left on device"},
		{Name: "command fails", Op: verceltest.OpCmd, Fault: verceltest.Fault{Status: 400, Code: "bad_request", Message: "failed to execute command"}, Want: nil, Message: "failed to execute command"},
		{Name: "command quota", Op: verceltest.OpCmd, Fault: verceltest.Fault{Status: 429, Message: "too many commands"}, Want: provider.ErrQuota, Message: "too many commands"},
	}, func(t *testing.T, hang bool) (vendortest.Vendor, vendortest.Faked, string) {
		f, p := setup(t, vendortest.RequestTimeout(hang, 2*time.Minute))
		return p, f, f.Token
	}, spec)
}

// TestDestroyFails: a delete that fails after a failed start says so,
// and the sandbox is listed for the next start's reconciliation.
func TestDestroyFails(t *testing.T) {
	f, p := setup(t, 2*time.Minute)
	f.Fail(verceltest.OpCmd, verceltest.Fault{Status: 500, Message: "cannot start"})
	f.Fail(verceltest.OpDelete, verceltest.Fault{Status: 500, Message: "cannot delete"})
	sp := spec(t)
	_, err := p.Create(t.Context(), sp)
	if err == nil || !strings.Contains(err.Error(), "cannot start") || !strings.Contains(err.Error(), "cannot delete") || !strings.Contains(err.Error(), "reconciliation") {
		t.Fatalf("Create: %v", err)
	}
	f.Fail(verceltest.OpDelete, verceltest.Fault{})
	ids, err := p.List(t.Context(), sp.Owner)
	if err != nil || len(ids) != 1 {
		t.Fatalf("List = %v, %v; want the half-created sandbox", ids, err)
	}
	if err := p.Destroy(t.Context(), ids[0]); err != nil {
		t.Fatal(err)
	}
	if r := f.Running(); len(r) != 0 {
		t.Errorf("left: %v", r)
	}
}

func TestCredentials(t *testing.T) {
	env := map[string]string{vercel.EnvToken: "t", vercel.EnvTeamID: "team_1", vercel.EnvProjectID: "prj_1"}
	for _, missing := range []string{vercel.EnvToken, vercel.EnvTeamID, vercel.EnvProjectID} {
		_, err := vercel.FromEnv(func(k string) string {
			if k == missing {
				return ""
			}
			return env[k]
		})
		if !errors.Is(err, provider.ErrCredentials) || !strings.Contains(err.Error(), missing) {
			t.Errorf("FromEnv without %s: %v", missing, err)
		}
	}
	if cfg, err := vercel.FromEnv(func(k string) string { return env[k] }); err != nil || cfg.Token != "t" || cfg.TeamID != "team_1" || cfg.ProjectID != "prj_1" {
		t.Errorf("FromEnv = %+v, %v", cfg, err)
	}
	f := verceltest.New(t)
	for name, edit := range map[string]func(*vercel.Config){
		"wrong token": func(c *vercel.Config) { c.Token = "vcp_wrong" },
		"wrong team":  func(c *vercel.Config) { c.TeamID = "team_other" },
	} {
		cfg := config(f)
		edit(&cfg)
		p, err := vercel.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Health(t.Context()); !errors.Is(err, provider.ErrCredentials) || !strings.Contains(err.Error(), "forbidden") {
			t.Errorf("Health with a %s: %v", name, err)
		}
	}
	cfg := config(f)
	cfg.ProjectID = "prj_other"
	p, err := vercel.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Health(t.Context()); err == nil || !strings.Contains(err.Error(), "Project not found") {
		t.Errorf("Health with another project: %v", err)
	}
}

// TestSpecRefused: what Vercel cannot do is refused before anything is
// created, naming the field; the vendor's own refusal keeps its message.
func TestSpecRefused(t *testing.T) {
	f, p := setup(t, 2*time.Minute)
	for _, tc := range []struct {
		name  string
		edit  func(*provider.Spec)
		field string
	}{
		{"fractional cpus", func(s *provider.Spec) { s.CPUs = 1.5 }, "cpus"},
		{"odd cpus", func(s *provider.Spec) { s.CPUs = 3 }, "cpus"},
		{"too many cpus", func(s *provider.Spec) { s.CPUs = 16 }, "cpus"},
		{"memory not per vCPU", func(s *provider.Spec) { s.MemoryBytes = 1 << 30 }, "memory_bytes"},
		{"timeout too long", func(s *provider.Spec) { s.Timeout = 48 * time.Hour }, "timeout"},
		{"timeout too short", func(s *provider.Spec) { s.Timeout = time.Millisecond }, "timeout"},
		{"unknown option", func(s *provider.Spec) { s.Options = map[string]string{"template": "x"} }, `"template"`},
		{"empty option", func(s *provider.Spec) { s.Options = map[string]string{"region": ""} }, "region"},
		{"owner label", func(s *provider.Spec) { s.Labels = map[string]string{vercel.OwnerKey: "x"} }, vercel.OwnerKey},
		{"too many labels", func(s *provider.Spec) {
			s.Labels = map[string]string{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5"}
		}, "labels"},
		{"label with a colon", func(s *provider.Spec) { s.Labels = map[string]string{"a:b": "1"} }, `"a:b"`},
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
	sp.Timeout = 2 * time.Hour // within the API's bound, beyond the fake's plan
	if _, err := p.Create(t.Context(), sp); err == nil || !strings.Contains(err.Error(), "maximum of 45 minutes") {
		t.Errorf("Create beyond the plan's maximum: %v", err)
	}
	sp = spec(t)
	sp.Options = map[string]string{"image": "my-repo:v1"}
	if _, err := p.Create(t.Context(), sp); err == nil || !strings.Contains(err.Error(), "my-repo:v1 not found (image_not_found)") {
		t.Errorf("Create from an unknown image: %v", err)
	}
	if r := f.Running(); len(r) != 0 {
		t.Errorf("created: %v", r)
	}
}

// TestList: List pages through the project's sandboxes by the owner's tag.
func TestList(t *testing.T) {
	f, p := setup(t, 2*time.Minute)
	f.PendingPolls, f.MaxPage = 0, 2
	mine, other := spec(t), spec(t)
	other.Owner = "someone-else"
	var want []string
	for range 3 {
		sb, err := p.Create(t.Context(), mine)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, sb.ID)
	}
	if _, err := p.Create(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	got, err := p.List(t.Context(), mine.Owner)
	if err != nil || len(got) != 3 {
		t.Fatalf("List = %v, %v; want %v", got, err, want)
	}
	for _, id := range want {
		if !strings.Contains(strings.Join(got, " "), id) {
			t.Errorf("List misses %s: %v", id, got)
		}
	}
}

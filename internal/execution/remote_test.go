package execution

import (
	"context"
	"errors"
	"testing"

	"github.com/agentbox/agentbox/internal/provider"
)

// mustNotRun is a Remote that fails the test if an exec reaches it.
type mustNotRun struct{ t *testing.T }

func (m mustNotRun) Exec(context.Context, RemoteRequest, Hooks) (Result, error) {
	m.t.Error("the exec reached the provider")
	return Result{}, errors.New("reached")
}

// TestExecOnProviderRefusedHere: an exec naming a provider is refused on
// this host, before any provider is asked, when no provider is
// configured, when the request is malformed, or when its policy is
// refused here; no local sandbox is made for it.
func TestExecOnProviderRefusedHere(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remote bool
		req    Request
		want   error
	}{
		{"no providers", false, Request{Argv: []string{"true"}, Provider: "docker"}, provider.ErrUnknown},
		{"malformed", true, Request{Argv: []string{""}, Provider: "docker"}, ErrInvalid},
		{"bad file path", true, Request{Argv: []string{"true"}, Files: map[string][]byte{"../x": nil}, Provider: "docker"}, ErrInvalid},
		{"policy refused", true, Request{Argv: []string{"true"}, Policy: PolicyRef{Preset: "refused"}, Provider: "docker"}, ErrPolicyDenied},
		{"policy invalid", true, Request{Argv: []string{"true"}, Policy: PolicyRef{Preset: "nope"}, Provider: "docker"}, ErrPolicyInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestService(t, func(o *Options) {
				if tc.remote {
					o.Remote = mustNotRun{t}
				}
			})
			if _, err := env.svc.Exec(t.Context(), tc.req); !errors.Is(err, tc.want) {
				t.Fatalf("Exec = %v, want %v", err, tc.want)
			}
			if n := len(env.rt.Specs()); n != 0 {
				t.Fatalf("%d local sandboxes made for an exec on a provider", n)
			}
		})
	}
}

package execution

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/execution/exectest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
)

// TestWarmPoolKeyedByGlobalPolicy checks that a sandbox warmed under one
// global policy is never handed out under another, even when the
// request's effective policy comes out the same under both.
func TestWarmPoolKeyedByGlobalPolicy(t *testing.T) {
	parse := func(src string) *policy.Policy {
		p, err := policy.Parse("global.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	globals := []*policy.Policy{
		parse("version: 1\nresources: {memory: 8Gi}\nnetwork: {mode: none}\n"),
		parse("version: 1\nresources: {memory: 2Gi}\nnetwork: {mode: none}\n"),
	}
	// One resolver per global policy, built once as the daemon does.
	resolvers := []Resolver{PolicyResolver(globals[0]), PolicyResolver(globals[1])}
	var current atomic.Int32
	rt := &exectest.Runtime{Key: policy.IsolationProcess}
	reg := sandbox.NewRegistry()
	reg.Register(rt)
	svc, err := New(Options{Runtimes: reg, WorkDir: t.TempDir(), PoolSize: 1, PoolIdle: time.Hour,
		Resolve: func(ref PolicyRef) (Policy, error) { return resolvers[current.Load()](ref) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := svc.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	req := Request{Argv: []string{"true"}, Policy: PolicyRef{Inline: []byte(`{"version":1,"resources":{"memory":"1Gi"},"network":{"mode":"none"}}`)}}
	exec := func() Result {
		t.Helper()
		res, err := svc.Exec(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	exec() // cold; starts warming
	waitFor(t, "the pool to fill", func() bool { return svc.metrics.poolReady.Value() == 1 })
	current.Store(1)
	if res := exec(); res.Sandbox.Warm {
		t.Fatalf("a sandbox warmed under the previous global policy was handed out: %+v", res.Sandbox)
	}
	waitFor(t, "the pool to fill", func() bool { return svc.metrics.poolReady.Value() == 2 })
	if res := exec(); !res.Sandbox.Warm {
		t.Fatalf("no warm sandbox under an unchanged global policy: %+v", res.Sandbox)
	}
}

// TestPresetResolvedOnce: a resolver keeps what a preset resolves to, and
// what it keeps is what resolving it afresh gives (the same policy, the
// same pool key), per global policy; presets that do not resolve are
// refused every time and not kept.
func TestPresetResolvedOnce(t *testing.T) {
	global, err := policy.Parse("global.yaml", []byte("version: 1\nresources: {memory: 2Gi}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []*policy.Policy{nil, global} {
		r := PolicyResolver(g)
		for _, name := range []string{"strict", "exec-default"} {
			first, err := r(PolicyRef{Preset: name})
			if err != nil {
				t.Fatal(err)
			}
			again, err := r(PolicyRef{Preset: name})
			if err != nil {
				t.Fatal(err)
			}
			fresh, err := PolicyResolver(g)(PolicyRef{Preset: name})
			if err != nil {
				t.Fatal(err)
			}
			if first != again {
				t.Errorf("%s: resolved again instead of kept", name)
			}
			if again.Hash() != fresh.Hash() || again.Isolation() != fresh.Isolation() {
				t.Errorf("%s: kept %s/%s, fresh %s/%s", name, again.Hash(), again.Isolation(), fresh.Hash(), fresh.Isolation())
			}
		}
		for range 2 {
			if _, err := r(PolicyRef{Preset: "no-such-preset"}); err == nil {
				t.Fatal("an unknown preset resolved")
			}
		}
	}
	strict, _ := PolicyResolver(nil)(PolicyRef{Preset: "strict"})
	under, _ := PolicyResolver(global)(PolicyRef{Preset: "strict"})
	if strict.Hash() == under.Hash() {
		t.Fatal("the same pool key under two global policies")
	}
}

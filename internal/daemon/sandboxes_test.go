package daemon

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
)

// TestDefaultGlobalPolicy checks that the built-in operator policy admits
// every preset and refuses what only an operator may grant.
func TestDefaultGlobalPolicy(t *testing.T) {
	load, err := loadGlobalPolicy("")
	if err != nil {
		t.Fatal(err)
	}
	g := load()
	for _, name := range policy.PresetNames() {
		p, err := policy.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := policy.Effective(g, p); err != nil {
			t.Errorf("preset %s under the default global policy: %v", name, err)
		}
	}
	for _, src := range []string{
		"version: 1\nnetwork:\n  mode: host\n",
		"version: 1\nallow_degraded: true\n",
		"version: 1\nfilesystem:\n  write: [/etc]\n",
		"version: 1\nenv:\n  pass: [AWS_SECRET_ACCESS_KEY]\n",
	} {
		req, err := policy.Parse("req.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := policy.Effective(g, req); err == nil {
			t.Errorf("the default global policy admitted %q", src)
		}
	}
}

// TestSandboxesNetwork reads the network section of stored policies, the
// engine's only view of it, before and after ReplaceAllow.
func TestSandboxesNetwork(t *testing.T) {
	load, err := loadGlobalPolicy("")
	if err != nil {
		t.Fatal(err)
	}
	s := &sessionSandboxes{global: load}
	for _, tc := range []struct {
		name, src string
		want      engine.Network
	}{
		{"empty", "version: 1\n", engine.Network{Allow: []string{}}},
		{"rules", "version: 1\nnetwork:\n  mode: proxy\n  default: ask\n  allow: [a.example.com:443]\n  deny: [10.0.0.0/8]\n",
			engine.Network{Mode: "proxy", Default: "ask", Allow: []string{"a.example.com:443"}, Deny: []string{"10.0.0.0/8"}}},
		{"none", "version: 1\nnetwork:\n  mode: none\n", engine.Network{Mode: "none", Allow: []string{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Parse("p.yaml", []byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			raw, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Network(raw)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Network = %+v, want %+v", got, tc.want)
			}
		})
	}
	raw, err := json.Marshal(&policy.Policy{Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	updated, err := s.ReplaceAllow(raw, []string{"b.example.com:443"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Network(updated); err != nil || !reflect.DeepEqual(got.Allow, []string{"b.example.com:443"}) {
		t.Fatalf("after ReplaceAllow: %+v %v", got, err)
	}
	if _, err := s.Network(json.RawMessage(`{"version":1,"network":{"allow":"nope"}}`)); err == nil {
		t.Fatal("a malformed stored policy was read")
	}
}

package daemon

import (
	"testing"

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

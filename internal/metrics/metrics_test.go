package metrics

import (
	"slices"
	"testing"
)

// TestRegisterOnce: a metric name registers once per registry; Names
// lists what was registered.
func TestRegisterOnce(t *testing.T) {
	m := New()
	if err := m.Register(NewViolations()); err != nil {
		t.Fatal(err)
	}
	if err := m.Register(NewViolations()); err == nil {
		t.Error("a second agentbox_policy_violations_total registered")
	}
	names := m.Names()
	for _, want := range []string{"agentbox_policy_violations_total", "agentbox_sessions_created_total", "go_goroutines"} {
		if !slices.Contains(names, want) {
			t.Errorf("Names() lacks %s: %q", want, names)
		}
	}
	if len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Errorf("Names() lists a name twice: %q", names)
	}
}

package acp

import (
	"context"
	"testing"
)

// TestAgents: every built-in adapter reports its registry name, and a
// custom agent needs a name and a command it can find.
func TestAgents(t *testing.T) {
	none := func(string) func() (string, string, error) {
		return func() (string, string, error) { return "/bin/true", "1.0", nil }
	}
	for name, a := range Agents(Config{Binary: none}) {
		if info := a.Info(context.Background()); info.Name != name || !info.Available || info.Title == "" {
			t.Errorf("%s: info %+v", name, info)
		}
	}
	if _, err := FromConfig(Custom{Name: "x"}, "", Options{}); err == nil {
		t.Error("a custom agent without a command was accepted")
	}
	a, err := FromConfig(Custom{Name: "mine", Command: "no-such-acp-agent-binary"}, "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if info := a.Info(context.Background()); info.Available || info.Reason == "" {
		t.Errorf("a missing command: info %+v, want unavailable with a reason", info)
	}
}

// TestCustomNameIsPlain: a configured agent's name names the directory of
// its homes under the data dir, so it is one plain path element.
func TestCustomNameIsPlain(t *testing.T) {
	data := t.TempDir()
	for _, name := range []string{"..", ".", "../escape", "a/b", "/abs"} {
		if _, err := FromConfig(Custom{Name: name, Command: "/bin/true"}, data, Options{}); err == nil {
			t.Errorf("agent name %q was accepted", name)
		}
	}
}

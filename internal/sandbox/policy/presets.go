package policy

import (
	"embed"
	"fmt"
	"slices"
	"strings"
)

// The presets are policy files like any other, parsed (and so
// schema-checked) from the binary; docs/policy.md shows them.
//
//go:embed presets/*.yaml
var presetFS embed.FS

// PresetNames returns the preset names, sorted.
func PresetNames() []string {
	entries, err := presetFS.ReadDir("presets")
	if err != nil {
		panic("policy: presets: " + err.Error())
	}
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	slices.Sort(names)
	return names
}

// Preset returns a fresh copy of the named preset: "strict",
// "agent-default" or "exec-default".
func Preset(name string) (*Policy, error) {
	if !slices.Contains(PresetNames(), name) {
		return nil, fmt.Errorf("unknown policy preset %q (known: %s)", name, strings.Join(PresetNames(), ", "))
	}
	file := "presets/" + name + ".yaml"
	data, err := presetFS.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("policy preset %s: %w", name, err)
	}
	return Parse(file, data)
}

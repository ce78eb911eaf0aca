package main

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/internal/reexec"
)

// TestHelpersListed: main's comment lists exactly the helpers this binary
// can become, so reading main.go shows every entry point.
func TestHelpersListed(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, m := range regexp.MustCompile(`(?m)^\s*//\s+(agentbox-[a-z-]+)\s`).FindAllSubmatch(src, -1) {
		listed = append(listed, string(m[1]))
	}
	registered := reexec.Names()
	slices.Sort(listed)
	slices.Sort(registered)
	if !slices.Equal(listed, registered) {
		t.Errorf("main.go lists helpers %q; registered: %q", listed, registered)
	}
}

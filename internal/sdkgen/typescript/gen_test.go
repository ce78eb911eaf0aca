package typescript

import (
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/golden"
)

// sdkDir is the TypeScript SDK, from this package's directory.
var sdkDir = filepath.Join("..", "..", "..", "sdks", "typescript")

// TestGenerated fails when the SDK's committed generated files differ from
// what api/openapi.json and the event schema give; -update rewrites them.
func TestGenerated(t *testing.T) {
	files, err := Generate(api.OpenAPI(), event.JSONSchema())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		golden.Check(t, filepath.Join(sdkDir, "src", name), files[name])
	}
}

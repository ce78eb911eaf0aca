// Package golden is the test support of the module's golden files and
// generated documents (testdata/*.golden, api/openapi.json,
// event/schema/event.v1.json, docs/events.md, docs/agents.md): the one
// -update flag that rewrites them from the code, and Check. Only tests
// import it.
//
//	go test ./internal/agent/claude -run TestGolden -update
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files and generated documents from the code")

// Update reports whether the tests run with -update: each test that
// checks a file against the code rewrites it instead.
func Update() bool { return *update }

// Check compares got with the golden file at path, or, with -update,
// (re)writes the file.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (rerun the test with -update to write it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got); rerun with -update if intended:\n%s", path, diff)
	}
}

package golden

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCheckUpdate: with -update, Check writes the file (and its
// directory); without, a file equal to got passes.
func TestCheckUpdate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "testdata", "x.golden")
	defer func(prev bool) { *update = prev }(*update)
	*update = true
	Check(t, path, []byte("hello\n"))
	if b, err := os.ReadFile(path); err != nil || string(b) != "hello\n" {
		t.Fatalf("after -update: %q, %v", b, err)
	}
	*update = false
	Check(t, path, []byte("hello\n"))
}

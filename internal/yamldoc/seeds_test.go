package yamldoc

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// committed lists every YAML document committed in the repository: the
// files, and the ```yaml examples of README.md and docs/.
func committed(t testing.TB) map[string]string {
	docs := map[string]string{}
	root := "../.."
	var files []string
	for _, g := range []string{"internal/sandbox/policy/presets/*.yaml", "internal/daemon/*.yaml", "internal/sandbox/policy/testdata/*.yaml", "internal/*/testdata/*.yaml", "testdata/*.yaml"} {
		m, _ := filepath.Glob(filepath.Join(root, g))
		files = append(files, m...)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs[f] = string(b)
	}
	md, _ := filepath.Glob(filepath.Join(root, "docs/*.md"))
	for _, f := range append(md, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range yamlBlock.FindAllStringSubmatch(string(b), -1) {
			docs[f+"#"+string(rune('a'+i))] = m[1]
		}
	}
	if len(docs) < 10 {
		t.Fatalf("found only %d committed documents", len(docs))
	}
	return docs
}

var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

func seeds(t testing.TB) []string {
	var s []string
	for _, d := range committed(t) {
		s = append(s, d)
	}
	for _, tt := range parseTests {
		s = append(s, tt.src)
	}
	for _, tt := range refusalTests {
		s = append(s, tt.src)
	}
	return s
}

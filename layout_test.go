package agentbox_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/agentbox/agentbox"

// goPackages maps each package directory of the module to its non-test Go
// files.
func goPackages(t *testing.T) map[string][]string {
	t.Helper()
	pkgs := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "scripts") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			pkgs[filepath.Dir(path)] = append(pkgs[filepath.Dir(path)], path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// TestPackageDocs: every package says its one responsibility in a doc
// comment.
func TestPackageDocs(t *testing.T) {
	fset := token.NewFileSet()
	for dir, files := range goPackages(t) {
		documented := false
		for _, f := range files {
			af, err := parser.ParseFile(fset, f, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if af.Doc != nil {
				text := af.Doc.Text()
				if strings.HasPrefix(text, "Package "+af.Name.Name+" ") || strings.HasPrefix(text, "Command ") {
					documented = true
				}
			}
		}
		if !documented {
			t.Errorf("package %s has no doc comment starting with \"Package <name> \"", dir)
		}
	}
}

// TestImportRules: the composition root is imported only by the binary,
// the embeddable server and its own test-support package (daemontest,
// imported by tests only); public packages never import internal ones
// (except that embeddable server); nothing is named utils or common.
func TestImportRules(t *testing.T) {
	fset := token.NewFileSet()
	public := map[string]bool{"client": true, "event": true}
	for dir, files := range goPackages(t) {
		if base := filepath.Base(dir); base == "utils" || base == "common" || base == "util" {
			t.Errorf("package %s: no utils/common packages", dir)
		}
		for _, f := range files {
			af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range af.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if p == module+"/internal/daemon" && dir != "." && dir != filepath.Join("cmd", "agentbox") && dir != filepath.Join("internal", "daemon", "daemontest") {
					t.Errorf("%s imports internal/daemon; only cmd/agentbox, the root package and internal/daemon/daemontest may", f)
				}
				if p == module+"/internal/daemon/daemontest" {
					t.Errorf("%s imports internal/daemon/daemontest, which only tests may import", f)
				}
				if public[strings.Split(dir, string(filepath.Separator))[0]] && strings.HasPrefix(p, module+"/internal/") {
					t.Errorf("public package file %s imports %s", f, p)
				}
			}
		}
	}
}

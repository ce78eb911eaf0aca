package agentbox_test

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
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

// The layer table: which of the module's packages each package may import.
// docs/ARCHITECTURE.md describes the layers; this table enforces them
// (TestImportRules), the way Tailscale's deptest pins its import graph.
// Paths are relative to the module ("." is the root package); "x/..." is
// x and every package below it.

// layer is one row: a package matching from may import, of the module's
// packages, only what only lists (when only is not nil) and nothing deny
// lists.
type layer struct {
	from string
	only []string
	deny []string
	why  string
}

// anyLeaf are leaf packages every package may import: the error kinds, and
// the metrics every subsystem registers its own on.
var anyLeaf = []string{"internal/errkind", "internal/metrics"}

var layers = []layer{
	{from: ".", only: []string{"client", "event", "internal/daemon", "internal/reexec"},
		why: "the embeddable server: the public packages, the composition root and the re-exec registry"},
	{from: "client", only: []string{"event"}, why: "the public SDK imports no internal package"},
	{from: "event", only: []string{}, why: "the public event types import nothing of agentbox"},
	{from: "internal/errkind", only: []string{}, why: "the error kinds are a leaf"},
	{from: "internal/metrics", only: []string{}, why: "the metrics are a leaf"},
	{from: "internal/reexec", only: []string{}, why: "the re-exec registry is a leaf"},
	{from: "internal/residency", only: []string{}, why: "giving back a process's start-up pages knows nothing of what the process does"},
	{from: "internal/prefault", only: []string{}, why: "mapping a start's pages ahead imports nothing with an init, so that its own runs first"},
	{from: "internal/procs", only: []string{}, why: "sizing the scheduler to the load knows nothing of what the process does"},
	{from: "internal/golden", only: []string{}, why: "the golden-file support is a leaf"},
	{from: "internal/tracing", only: []string{"internal/version"}, why: "spans and their export know nothing of what they trace"},
	{from: "internal/sandbox", only: []string{"internal/inert"},
		why: "the runtime contract knows nothing of agentbox"},
	{from: "internal/sandbox/egress", only: []string{"internal/sandbox"}, why: "the egress proxy imports only the runtime contract"},
	{from: "internal/sandbox/...", deny: []string{"internal/agent/...", "internal/engine/...", "internal/httpapi/...", "internal/store/...", "internal/execution/...", "internal/daemon/..."},
		why: "sandboxes know nothing of agents, sessions, executions, HTTP or storage"},
	{from: "internal/agent/...", deny: []string{"internal/httpapi/...", "internal/engine/...", "internal/store/...", "internal/daemon/..."},
		why: "adapters see only agent.Host: they know no HTTP surface, and the engine persists their events"},
	{from: "internal/engine/...", deny: []string{"internal/store/sqlite/...", "internal/sandbox/policy/...", "internal/sandbox/process/...", "internal/sandbox/gvisor/...", "internal/sandbox/microvm/...", "internal/httpapi/...", "internal/daemon/..."},
		why: "the engine depends on store.Store and engine.Sandboxes; internal/daemon joins them to SQLite, policies and runtimes"},
	{from: "internal/httpapi/...", deny: []string{"internal/store/...", "internal/daemon/..."},
		why: "handlers go through the engine"},
	{from: "internal/execution/...", deny: []string{"internal/engine/...", "internal/agent/...", "internal/httpapi/...", "internal/store/...", "internal/daemon/..."},
		why: "code execution knows sandboxes and policies, not sessions"},
	{from: "internal/store/postgres/pgwire", only: []string{}, why: "the PostgreSQL wire-protocol client knows nothing of the store above it"},
	{from: "internal/store/...", deny: []string{"internal/engine/...", "internal/agent/...", "internal/httpapi/...", "internal/daemon/...", "internal/sandbox/..."},
		why: "the store keeps records and events, nothing above them"},
	{from: "internal/acpserver", only: []string{"client", "event", "internal/acpwire", "internal/version"},
		why: "agentbox as an ACP agent is an API client"},
	{from: "internal/acpwire", only: []string{}, why: "the ACP wire format is a leaf"},
	{from: "internal/sdkgen/python", only: []string{}, why: "the Python SDK's generator reads the documents as bytes"},
	{from: "internal/inspector", only: []string{"api"}, why: "the inspector is a page that reaches the daemon only through its HTTP API, as any browser client (api: its content coding)"},
	{from: "internal/snapshot", only: []string{"internal/textdiff"}, why: "workspace states and their diffs know nothing of sessions"},
	{from: "internal/provider", only: []string{"internal/errkind"}, why: "the provider contract says where a sandbox lives and knows nothing of sessions, agents or the store"},
	{from: "internal/provider/vendorapi", only: []string{"client", "internal/provider"}, why: "the vendors' clients' shared part knows only the provider contract and reaches the inner daemon as an API client"},
	{from: "internal/provider/e2b", only: []string{"client", "internal/provider", "internal/provider/vendorapi"}, why: "a vendor's provider is a client of the vendor's API and of the inner daemon, nothing of sessions or the store"},
	{from: "internal/provider/daytona", only: []string{"client", "internal/provider", "internal/provider/vendorapi"}, why: "a vendor's provider is a client of the vendor's API and of the inner daemon, nothing of sessions or the store"},
	{from: "internal/provider/docker", only: []string{"client", "internal/errkind", "internal/provider", "internal/sandbox/policy", "internal/sandbox/egress"}, why: "the Docker provider makes containers, maps a policy onto them (the policy model, the egress placeholders) and reaches the inner daemon only through the public client"},
	{from: "internal/provider/relay", only: []string{"client", "event", "internal/agent", "internal/provider", "internal/execution", "internal/sandbox", "internal/sandbox/policy"}, why: "the relay is an agent adapter, and the execution service's remote runner (its request and result types, the policy it resolved), that reaches the inner daemon only as an API client; the engine persists what it hands over"},
	{from: "internal/provider/localproc", only: []string{"client", "internal/provider"}, why: "the local test-support provider starts the inner daemon and reaches it only as an API client"},
	{from: "internal/cli/...", deny: []string{"internal/daemon/...", "internal/engine/...", "internal/httpapi/...", "internal/store/..."},
		why: "every command is an API client or a local tool"},
}

// importedOnlyBy: a package only the listed packages (and test-support
// packages) import.
var importedOnlyBy = map[string][]string{
	"internal/daemon":         {".", "cmd/agentbox"},
	"internal/httpapi":        {"internal/daemon"},
	"internal/store/sqlite":   {"internal/daemon"},
	"internal/store/postgres": {"internal/daemon"},
	"internal/agent/mock":     {"internal/daemon"},
}

// allowance is a known exception to the table: file may import imp
// today. The list may only shrink: an allowance no file needs any more
// fails the test until it is removed.
type allowance struct{ file, imp, why string }

var allowances = []allowance{}

// testSupport reports whether p is a test-support package (a path
// element ending in "test", or internal/golden): only tests and other
// test-support packages import one, and one may import anything but what
// the rows naming it deny.
func testSupport(p string) bool {
	if p == "internal/golden" {
		return true
	}
	for _, e := range strings.Split(p, "/") {
		if strings.HasSuffix(e, "test") {
			return true
		}
	}
	return false
}

// match reports whether package p matches pattern ("x" or "x/...").
func match(pattern, p string) bool {
	if tree, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == tree || strings.HasPrefix(p, tree+"/")
	}
	return p == pattern
}

func matchAny(patterns []string, p string) bool {
	return slices.ContainsFunc(patterns, func(pat string) bool { return match(pat, p) })
}

// importEdge is one import of the module's own packages by a non-test
// file: pkg (module-relative) imports imp from file.
type importEdge struct{ pkg, file, imp string }

// checkLayers returns every edge that breaks the table and is not
// allowed, and every allowance no edge needs.
func checkLayers(edges []importEdge, layers []layer, onlyBy map[string][]string, allowed []allowance) (broken []string, stale []allowance) {
	used := make([]bool, len(allowed))
	for _, e := range edges {
		var why []string
		for _, l := range layers {
			if !match(l.from, e.pkg) {
				continue
			}
			if l.only != nil && !slices.Contains(l.only, e.imp) && !slices.Contains(anyLeaf, e.imp) {
				why = append(why, fmt.Sprintf("%s imports only %q: %s", l.from, l.only, l.why))
			}
			if matchAny(l.deny, e.imp) {
				why = append(why, fmt.Sprintf("%s may not import %s: %s", l.from, e.imp, l.why))
			}
		}
		if by, ok := onlyBy[e.imp]; ok && !slices.Contains(by, e.pkg) && !testSupport(e.pkg) {
			why = append(why, fmt.Sprintf("%s is imported only by %q and test support", e.imp, by))
		}
		if testSupport(e.imp) && !testSupport(e.pkg) {
			why = append(why, e.imp+" is test support: only tests import it")
		}
		if len(why) == 0 {
			continue
		}
		if i := slices.IndexFunc(allowed, func(a allowance) bool { return a.file == e.file && a.imp == e.imp }); i >= 0 {
			used[i] = true
			continue
		}
		broken = append(broken, fmt.Sprintf("%s imports %s: %s", e.file, e.imp, strings.Join(why, "; ")))
	}
	for i, a := range allowed {
		if !used[i] {
			stale = append(stale, a)
		}
	}
	return broken, stale
}

// moduleEdges parses the imports of every non-test file of the module.
func moduleEdges(t *testing.T) []importEdge {
	t.Helper()
	fset := token.NewFileSet()
	var edges []importEdge
	for dir, files := range goPackages(t) {
		for _, f := range files {
			af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range af.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if p == module {
					p = "."
				} else if rel, ok := strings.CutPrefix(p, module+"/"); ok {
					p = rel
				} else {
					continue
				}
				edges = append(edges, importEdge{pkg: filepath.ToSlash(dir), file: filepath.ToSlash(f), imp: p})
			}
		}
	}
	return edges
}

// TestImportRules: every import of the module's own packages keeps to the
// layer table (or is a listed allowance, each of which is still needed);
// nothing is named utils or common.
func TestImportRules(t *testing.T) {
	for dir := range goPackages(t) {
		if base := filepath.Base(dir); base == "utils" || base == "common" || base == "util" {
			t.Errorf("package %s: no utils/common packages", dir)
		}
	}
	broken, stale := checkLayers(moduleEdges(t), layers, importedOnlyBy, allowances)
	for _, b := range broken {
		t.Error(b)
	}
	for _, a := range stale {
		t.Errorf("allowance %s → %s is no longer needed: remove it from layout_test.go", a.file, a.imp)
	}
}

// TestLayoutChecker: the checker finds an import that breaks the table,
// honours an allowance, and reports one that is no longer needed.
func TestLayoutChecker(t *testing.T) {
	edges := []importEdge{
		{"internal/sandbox/process", "internal/sandbox/process/a.go", "internal/engine"},        // denied
		{"internal/agent/claude", "internal/agent/claude/b.go", "internal/httpapi"},             // denied, and only daemon imports httpapi
		{"client", "client/c.go", "internal/ids"},                                               // not in only
		{"internal/cli", "internal/cli/d.go", "internal/golden"},                                // test support
		{"internal/engine", "internal/engine/e.go", "internal/errkind"},                         // fine
		{"internal/sandbox/egress", "internal/sandbox/egress/f.go", "internal/errkind"},         // a leaf anyone imports
		{"internal/daemon/daemontest", "internal/daemon/daemontest/g.go", "internal/daemon"},    // test support
		{"internal/httpapi", "internal/httpapi/h.go", "internal/store"},                         // allowed
		{"internal/agent/mock", "internal/agent/mock/i.go", "internal/agent/agenttest/mcptest"}, // test support
	}
	allowed := []allowance{
		{"internal/httpapi/h.go", "internal/store", "test"},
		{"internal/httpapi/gone.go", "internal/store", "test"},
	}
	broken, stale := checkLayers(edges, layers, importedOnlyBy, allowed)
	want := []string{"internal/sandbox/process/a.go", "internal/agent/claude/b.go", "client/c.go", "internal/cli/d.go", "internal/agent/mock/i.go"}
	if len(broken) != len(want) {
		t.Errorf("broken = %q, want one each for %q", broken, want)
	}
	for i, w := range want {
		if i >= len(broken) || !strings.HasPrefix(broken[i], w+" ") {
			t.Errorf("broken = %q, want %s reported", broken, w)
		}
	}
	if !strings.Contains(strings.Join(broken, "\n"), "imported only by") {
		t.Errorf("broken = %q, want internal/httpapi's importer rule named", broken)
	}
	if len(stale) != 1 || stale[0].file != "internal/httpapi/gone.go" {
		t.Errorf("stale = %+v, want the gone.go allowance", stale)
	}
}

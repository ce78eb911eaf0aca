package sandboxtest

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestSuiteSize keeps the escape suite's description in docs/sandbox.md
// true: its total and the size of each group.
func TestSuiteSize(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/sandbox.md")
	if err != nil {
		t.Fatal(err)
	}
	groups := []struct {
		name  string
		cases []tcase
	}{
		{"conformance", conformanceCases()},
		{"filesystem", filesystemCases()},
		{"processes", processCases()},
		{"kernel", kernelCases()},
		{"network", networkCases()},
		{"egress proxy", egressCases()},
		{"resources", resourceCases()},
		{"commit", commitCases()},
	}
	total := 0
	for _, g := range groups {
		total += len(g.cases)
		re := regexp.MustCompile(`(?m)^\| ` + regexp.QuoteMeta(g.name) + ` \| (\d+) \|`)
		m := re.FindSubmatch(doc)
		if m == nil {
			t.Errorf("docs/sandbox.md: no row %q in the escape suite's table", g.name)
			continue
		}
		if n, _ := strconv.Atoi(string(m[1])); n != len(g.cases) {
			t.Errorf("docs/sandbox.md: group %q says %d cases, the suite has %d", g.name, n, len(g.cases))
		}
	}
	if total != len(suite()) {
		t.Fatalf("the groups above hold %d cases, suite() %d: add the new group here", total, len(suite()))
	}
	if want := fmt.Sprintf("suite every runtime must pass: %d cases.", total); !regexp.MustCompile(regexp.QuoteMeta(want)).Match(doc) {
		t.Errorf("docs/sandbox.md does not say %q", want)
	}
}

package audit

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agentbox/agentbox/internal/sandbox"
)

func TestLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Violation("session", "ses_1", sandbox.Violation{Kind: sandbox.ViolationFilesystem, Target: "CLAUDE.md", Rule: "protected:**/CLAUDE.md", Action: "dropped", Detail: "created"})
	l.Record("exec", "exec_2", sandbox.Violation{Kind: sandbox.ViolationResource, Detail: "memory limit", Action: "blocked"})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(l.Violations.WithLabelValues("filesystem")); got != 1 {
		t.Errorf("filesystem count %v, want 1", got)
	}
	if got := testutil.ToFloat64(l.Violations.WithLabelValues("resource")); got != 0 {
		t.Errorf("Record counted: resource count %v, want 0", got)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("audit log mode %v (%v), want 0600", fi.Mode(), err)
	}
	f, _ := os.Open(path)
	defer f.Close()
	var recs []Record
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 2 || recs[0].Scope != "session" || recs[0].ID != "ses_1" || recs[0].Rule != "protected:**/CLAUDE.md" || recs[1].Kind != "resource" {
		t.Fatalf("records %+v", recs)
	}
}

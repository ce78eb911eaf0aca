package audit

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
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
	if got := l.Violations.WithLabelValues("filesystem").Value(); got != 1 {
		t.Errorf("filesystem count %v, want 1", got)
	}
	if got := l.Violations.WithLabelValues("resource").Value(); got != 0 {
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

// TestEgressRecords checks the egress proxy's lines: a network violation is
// counted but leaves the writing to the proxy's deny record, a secret's
// line names it and nothing else, and a rule change lists both sets.
func TestEgressRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Violation("session", "ses_1", sandbox.Violation{Kind: sandbox.ViolationNetwork, Host: "evil.example", Port: 443, Action: "blocked"})
	l.Egress(egress.Record{Type: "egress", Scope: "session", ID: "ses_1", Decision: "deny", By: "policy", Via: "connect",
		Host: "evil.example", Port: 443, Rule: "default:deny", Reason: "not allowed", Process: &sandbox.Peer{Pid: 7, Name: "curl"}})
	l.Egress(egress.Record{Type: "secret", Scope: "session", ID: "ses_1", Decision: "allow", Via: "route", Host: "api.anthropic.com", Secret: "anthropic-api-key"})
	l.NetworkUpdate("session", "ses_1", nil, []string{"api.github.com:443"})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := l.Violations.WithLabelValues("network").Value(); got != 1 {
		t.Errorf("network count %v, want 1", got)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3 (the network violation is the deny record):\n%s", len(lines), b)
	}
	var deny, secret, update Record
	for i, r := range []*Record{&deny, &secret, &update} {
		if err := json.Unmarshal([]byte(lines[i]), r); err != nil {
			t.Fatal(err)
		}
	}
	if deny.Type != TypeEgress || deny.Decision != "deny" || deny.Host != "evil.example" || deny.Process == nil || deny.Process.Name != "curl" {
		t.Errorf("deny record %+v", deny)
	}
	if secret.Type != TypeSecret || secret.Secret != "anthropic-api-key" || secret.Host != "api.anthropic.com" {
		t.Errorf("secret record %+v", secret)
	}
	if update.Type != TypeNetworkUpdate || len(update.Previous) != 0 || !slices.Equal(update.Allow, []string{"api.github.com:443"}) ||
		!strings.Contains(lines[2], `"previous":[]`) {
		t.Errorf("update record %s", lines[2])
	}
}

// TestDenialsCoalesced floods the log with one sandbox's refused
// connections: a bounded number of lines whose counts add up, the first
// written at once; allowed connections and other sandboxes' denials are
// never folded in.
func TestDenialsCoalesced(t *testing.T) {
	const n, bound = 5000, 150
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	deny := func(id string, port int) {
		l.Egress(egress.Record{Type: "egress", Scope: "exec", ID: id, Decision: "deny", By: "policy", Via: "connect",
			Host: "denied.example", Port: port, Rule: "default:deny", Reason: "not allowed"})
	}
	deny("exec:a", 443)
	if b, _ := os.ReadFile(path); strings.Count(string(b), "\n") != 1 {
		t.Fatalf("the first denial was not written at once:\n%s", b)
	}
	for i := range n - 1 {
		port := 443
		if i%3 == 0 {
			port = 10000 + i
		}
		deny("exec:a", port)
	}
	deny("exec:b", 443)
	l.Egress(egress.Record{Type: "egress", Scope: "exec", ID: "exec:a", Decision: "allow", By: "policy", Via: "connect", Host: "ok.example", Port: 443})
	l.Settle("exec", "exec:a")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	lines := map[string]int{}
	overRate := 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		// 1667 ports, 20 reported at once: the rest are counted and
		// 32 of them named.
		if strings.Contains(r.Reason, "over the sandbox's reporting rate") {
			overRate++
			if !strings.Contains(r.Reason, "of 1648 distinct kinds; 32 picked at random: denied.example:") {
				t.Errorf("over-rate summary %q", r.Reason)
			}
		}
		key := r.ID + "/" + r.Decision
		lines[key]++
		counts[key] += max(r.Count, 1)
		if r.Count > 1 && (r.FirstAt == nil || r.LastAt == nil) {
			t.Errorf("summary without its times: %s", line)
		}
	}
	if lines["exec:a/deny"] > bound || counts["exec:a/deny"] != n {
		t.Errorf("%d deny lines counting %d, want at most %d counting %d", lines["exec:a/deny"], counts["exec:a/deny"], bound, n)
	}
	if overRate != 1 {
		t.Errorf("%d over-rate summaries, want 1", overRate)
	}
	if counts["exec:b/deny"] != 1 || counts["exec:a/allow"] != 1 {
		t.Errorf("other records: %v", counts)
	}
}

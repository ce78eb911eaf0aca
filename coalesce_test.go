package agentbox_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/agenttest"
)

// floodScript opens n connections through the sandbox's egress proxy, each
// refused by the policy: most to one destination, the rest each to
// another port, so that both repeats and many distinct destinations are
// covered. It prints how many the proxy refused.
func floodScript(n, distinct int) string {
	return fmt.Sprintf(`python3 - <<'EOF'
import socket
refused = 0
for i in range(%d):
    port = 443 if i >= %d else 10000 + i
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(b"CONNECT denied.example:%%d HTTP/1.1\r\nHost: denied.example\r\n\r\n" %% port)
    if b" 403 " in s.recv(200):
        refused += 1
    s.close()
print("refused", refused)
EOF
`, n, distinct)
}

// floodPolicy lifts the connection rate bound (TestEgressFlood tests the
// bounds): every connection here is refused by the rules.
const floodPolicy = `{"version":1,"filesystem":{"read_outside_workspace":true},"network":{"mode":"proxy","default":"deny","allow":["allowed.example.com"],"max_connection_rate":100000}}`

// floodGlobal is a global policy that permits floodPolicy.
const floodGlobal = `version: 1
filesystem: {read_outside_workspace: true}
network: {mode: proxy, allow: ["*"], max_connection_rate: 100000}
`

// TestRefusedConnectionsCoalesced floods the egress proxy with refused
// connections from one session's sandbox and from one exec: the session
// log, the exec result and the audit log get a bounded number of
// violations, whose counts add up to the connections refused.
func TestRefusedConnectionsCoalesced(t *testing.T) {
	requireSandbox(t)
	const n, distinct, bound = 2000, 200, 150
	dataDir := t.TempDir()
	global := filepath.Join(t.TempDir(), "global.yaml")
	if err := os.WriteFile(global, []byte(floodGlobal), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := start(t, agentbox.Options{DataDir: dataDir, GlobalPolicy: global})
	c := srv.Client()

	s, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Policy: json.RawMessage(floodPolicy)})
	if err != nil {
		t.Fatal(err)
	}
	tc, evs := turn(t, c, s.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindCommand, Command: floodScript(n, distinct), Timeout: mock.Duration(5 * time.Minute)}))
	if tc.StopReason != event.StopEndTurn {
		t.Fatalf("turn: %+v", tc)
	}
	if out := commandOutput(t, evs); !strings.Contains(out, fmt.Sprintf("refused %d", n)) {
		t.Fatalf("the flood: %q, want all %d refused\n%s", out, n, agenttest.Dump(evs))
	}
	var events, total int
	for _, e := range evs {
		if e.Type != event.TypeSandboxViolation {
			continue
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		v := p.(*event.SandboxViolation)
		if v.Kind != event.ViolationNetwork {
			continue
		}
		events++
		total += max(v.Count, 1)
	}
	if events > bound || total != n {
		t.Errorf("%d sandbox.violation events counting %d connections; want at most %d events counting all %d", events, total, bound, n)
	}
	// The audit log's summaries are written as their window ends, and all
	// that are left when the sandbox closes.
	if err := c.DeleteSession(t.Context(), s.ID, false); err != nil {
		t.Fatal(err)
	}
	checkAudit(t, dataDir, s.ID, n, bound)

	res, err := c.Exec(t.Context(), client.ExecRequest{Argv: []string{"/bin/sh", "-c", floodScript(n, distinct)}, Policy: json.RawMessage(floodPolicy)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Stdout, fmt.Sprintf("refused %d", n)) {
		t.Fatalf("the exec's flood: %+v", res)
	}
	total = 0
	for _, v := range res.Violations {
		total += max(v.Count, 1)
	}
	if len(res.Violations) > bound || total != n {
		t.Errorf("the exec result has %d violations counting %d connections; want at most %d counting all %d", len(res.Violations), total, bound, n)
	}
	checkAudit(t, dataDir, "exec:"+res.Sandbox.ID, n, bound)
}

// checkAudit checks the audit log's deny records of one sandbox: at most
// bound lines, counting n refused connections. The last summaries are
// written as the sandbox closes, which for an exec comes after its answer
// (the teardown follows the answer): it waits up to 30 s for them.
func checkAudit(t *testing.T, dataDir, id string, n, bound int) {
	t.Helper()
	var lines, total int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		lines, total = 0, 0
		for _, r := range findAudit(auditRecords(t, dataDir), map[string]any{"type": "egress", "decision": "deny", "id": id}) {
			lines++
			if c, ok := r["count"].(float64); ok {
				total += int(c)
			} else {
				total++
			}
		}
		if total >= n || time.Now().After(deadline) {
			break
		}
	}
	if lines > bound || total != n {
		t.Errorf("%d audit deny records of %s counting %d connections; want at most %d counting all %d", lines, id, total, bound, n)
	}
}

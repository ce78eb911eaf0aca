package cli

import (
	"strings"
	"testing"
)

// TestSessionsProcesses drives a process in a sandboxed session's sandbox
// through the CLI: start prints its id, logs follows it to its exit and
// exits with its code, the list shows it, kill ends a running one (its
// logs then exit 137) and rm forgets it.
func TestSessionsProcesses(t *testing.T) {
	h := sandboxedHarness(t)
	id := h.sandboxed(t, `"agent-default"`)
	if t.Failed() {
		t.FailNow()
	}
	r := h.run(t.Context(), nil, "sessions", "processes", "start", id, "--tag", "once", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	pid := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(pid, "prc_") {
		t.Fatalf("start: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	r = h.run(t.Context(), nil, "sessions", "processes", "logs", id, "once")
	r.check(t, 3, []string{"out\n"}, []string{"err\n"})

	r = h.run(t.Context(), nil, "sessions", "processes", "start", id, "--tag", "long", "--", "sleep", "61.4")
	if r.code != 0 {
		t.Fatalf("start: exit %d stderr %q", r.code, r.stderr)
	}
	r = h.run(t.Context(), nil, "sessions", "processes", id)
	r.check(t, 0, []string{pid, "once", "exited", "long", "running"}, nil)
	r = h.run(t.Context(), nil, "sessions", "processes", "kill", id, "long", "-s", "KILL")
	r.check(t, 0, nil, nil)
	r = h.run(t.Context(), nil, "sessions", "processes", "logs", id, "long")
	r.check(t, 137, nil, nil)
	r = h.run(t.Context(), nil, "sessions", "processes", "rm", id, pid)
	r.check(t, 0, nil, nil)
	r = h.run(t.Context(), nil, "sessions", "processes", "logs", id, pid)
	r.check(t, 1, nil, []string{"404"})
}

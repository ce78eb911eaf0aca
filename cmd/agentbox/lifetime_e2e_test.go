package main

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/fakellm"
	"github.com/agentbox/agentbox/internal/sandbox/owner"
)

// TestNoAgentOutlivesItsSession runs, in a mock session, a command that
// writes to the workspace every 50 ms from three processes: the shell, a
// child it backgrounds, and a grandchild that called setsid and was
// orphaned. Then it ends the session's life the hard way — the daemon is
// killed with SIGKILL mid-turn — or the ordinary way — the session is
// deleted — and checks that, within a bounded wait, no process of the
// session remains and the workspace stops changing. Unsandboxed, and in
// a sandbox with the agent-default policy (where the host can sandbox).
func TestNoAgentOutlivesItsSession(t *testing.T) {
	t.Cleanup(func() {
		if _, err := owner.Default().ReapDead(daemon.Reapers()...); err != nil {
			t.Logf("removing the daemons' leftovers: %v", err)
		}
	})
	for _, sb := range []struct {
		name   string
		policy json.RawMessage
	}{
		{"unsandboxed", nil},
		{"sandboxed", json.RawMessage(`"agent-default"`)},
	} {
		for _, end := range []struct {
			name string
			do   func(t *testing.T, d *daemonProc, id string)
		}{
			{"daemon SIGKILL", func(t *testing.T, d *daemonProc, _ string) { d.kill9(t) }},
			{"session delete", func(t *testing.T, d *daemonProc, id string) {
				if err := d.c.DeleteSession(t.Context(), id, false); err != nil {
					t.Fatalf("delete the session: %v", err)
				}
			}},
		} {
			t.Run(sb.name+"/"+end.name, func(t *testing.T) {
				if sb.policy != nil && os.Geteuid() != 0 {
					t.Skip("the process sandbox needs root here")
				}
				noAgentOutlives(t, sb.policy, end.do)
			})
		}
	}
}

// TestNoClaudeOutlivesTheDaemon is TestNoAgentOutlivesItsSession's
// daemon kill for the real Claude Code CLI, unsandboxed with permission
// mode bypass, its Bash tool running the writers (driven by the fake LLM).
func TestNoClaudeOutlivesTheDaemon(t *testing.T) {
	in := agenttest.RequireInstalled(t, "claude")
	t.Logf("claude %s", in.Version)
	marker := "agentbox-lifetime-" + rand.Text()
	llm, err := fakellm.Start(t.Context(), fakellm.Options{Scenarios: map[string]*fakellm.Scenario{"writers": {
		Turns: []fakellm.Turn{{Calls: []fakellm.Call{{Kind: "shell", Command: writersCommand(marker)}}}, {Text: "done"}}}},
		Default: "writers"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { llm.Close() })
	// The daemon finds the CLI in the same cache: DIR/agents/….
	cache := filepath.Dir(in.Binary)
	for filepath.Base(cache) != "agents" && cache != "/" {
		cache = filepath.Dir(cache)
	}
	d := startDaemonEnv(t, t.TempDir(), freePort(t), []string{"AGENTBOX_CACHE_DIR=" + filepath.Dir(cache)})
	s, err := d.c.CreateSession(t.Context(), client.CreateSession{Agent: "claude", PermissionMode: client.PermissionBypass,
		Env: map[string]string{"ANTHROPIC_BASE_URL": llm.URL(), "ANTHROPIC_API_KEY": "sk-fake-lifetime"}})
	if err != nil {
		t.Fatalf("create the session: %v", err)
	}
	if _, err := d.c.Send(t.Context(), s.ID, "Run the writers"); err != nil {
		t.Fatal(err)
	}
	watchWriters(t, d, s, marker, func(t *testing.T, d *daemonProc, _ string) { d.kill9(t) })
}

// writersCommand is a shell command that writes three files in its
// working directory every 50 ms: from the shell, from a child it
// backgrounds, from a grandchild that called setsid and was orphaned.
// Each process's command line holds marker.
func writersCommand(marker string) string {
	loop := func(file string) string {
		return fmt.Sprintf(`true %s; while :; do echo x >> %s; sleep 0.05; done`, marker, file)
	}
	return fmt.Sprintf(`(%s) & setsid sh -c '(%s) & exit 0'; %s`, loop("bg.out"), loop("setsid.out"), loop("sh.out"))
}

func noAgentOutlives(t *testing.T, policy json.RawMessage, end func(t *testing.T, d *daemonProc, id string)) {
	marker := "agentbox-lifetime-" + rand.Text()
	d := startDaemon(t, t.TempDir())
	s, err := d.c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Policy: policy})
	if err != nil {
		t.Fatalf("create the session: %v", err)
	}
	if _, err := d.c.Send(t.Context(), s.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindCommand, Command: writersCommand(marker),
		Timeout: mock.Duration(10 * time.Minute)})); err != nil {
		t.Fatal(err)
	}
	watchWriters(t, d, s, marker, end)
}

// watchWriters waits for the writers of session s to write, ends the
// session's life with end, and checks that within a bounded wait no
// process of the session is left and the files stop growing.
func watchWriters(t *testing.T, d *daemonProc, s client.Session, marker string, end func(t *testing.T, d *daemonProc, id string)) {
	t.Helper()
	// Unsandboxed, the files are in the workspace; in a sandbox, in its
	// workspace overlay, which the host sees through a process's cwd. An
	// open file stays readable after the sandbox is gone.
	names := []string{"bg.out", "setsid.out", "sh.out"}
	files := make([]*os.File, len(names))
	t.Cleanup(func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	})
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		procs := sessionProcesses(s.Cwd, marker)
		ready := len(procs) >= 3
		for i, name := range names {
			for _, dir := range append([]string{s.Cwd}, procDirs(procs)...) {
				if files[i] == nil {
					files[i], _ = os.Open(filepath.Join(dir, name))
				}
			}
			ready = ready && fileSize(files[i]) > 0
		}
		if ready {
			break
		}
		if time.Now().After(deadline) {
			evs, _ := d.c.Events(t.Context(), s.ID, 0, 50)
			t.Fatalf("timed out waiting for every writer to write: files %v, processes\n%s\nevents: %+v",
				files, describePids(procs), evs)
		}
	}
	t.Logf("the session's processes before: %v", sessionProcesses(s.Cwd, marker))

	end(t, d, s.ID)
	deadline := time.Now().Add(5 * time.Second)
	for left := sessionProcesses(s.Cwd, marker); len(left) > 0; left = sessionProcesses(s.Cwd, marker) {
		if time.Now().After(deadline) {
			t.Fatalf("5s after the end, processes of the session are alive:\n%s", describePids(left))
		}
		time.Sleep(20 * time.Millisecond)
	}
	sizes := func() []int64 {
		var out []int64
		for _, f := range files {
			out = append(out, fileSize(f))
		}
		return out
	}
	before := sizes()
	time.Sleep(300 * time.Millisecond) // six of the writers' periods
	if after := sizes(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the workspace changed after the end: sizes %v, then %v", before, after)
	}
}

// procDirs are the working directories of pids, as paths the host can open.
func procDirs(pids []int) []string {
	out := make([]string, len(pids))
	for i, pid := range pids {
		out[i] = fmt.Sprintf("/proc/%d/cwd", pid)
	}
	return out
}

func fileSize(f *os.File) int64 {
	if f == nil {
		return 0
	}
	st, err := f.Stat()
	if err != nil {
		return 0
	}
	return st.Size()
}

// sessionProcesses lists the live processes of a session, seen from the
// host: those whose command line carries marker, or whose working
// directory is the session's workspace.
func sessionProcesses(cwd, marker string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(pid); err != nil || st.zombie {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		dir, _ := os.Readlink("/proc/" + e.Name() + "/cwd")
		if strings.Contains(string(cmd), marker) || (cwd != "" && dir == cwd) {
			out = append(out, pid)
		}
	}
	return out
}

func describePids(pids []int) string {
	var b strings.Builder
	for _, pid := range pids {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		fmt.Fprintf(&b, "  pid %d: %s\n", pid, strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	return b.String()
}

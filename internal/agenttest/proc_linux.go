package agenttest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// AgentPIDs returns the agent processes adapters started for a session
// with working directory dir: the processes in dir that are direct
// children of this test process or of a process-tree supervisor
// (agent.StartTree) that is, not the supervisors themselves. The commands
// an agent runs are not included. It reads /proc.
func AgentPIDs(dir string) []int {
	self := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err != nil || cwd != dir || isSupervisor(pid) {
			continue
		}
		if p := ParentPID(pid); p == self || (isSupervisor(p) && ParentPID(p) == self) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// isSupervisor says pid is an agent process-tree supervisor.
func isSupervisor(pid int) bool {
	comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	return err == nil && strings.TrimSpace(string(comm)) == "agentbox-tree"
}

// ParentPID reads the parent pid from /proc/PID/stat (the field after the
// parenthesised command name, which may itself hold spaces or parens); 0
// when the process is gone.
func ParentPID(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// KillAgentByCwd is the default Target.KillAgent: it SIGKILLs the agent
// process (a direct child of the test process) whose working directory is
// the session's. It fails the test unless exactly one such process exists.
func KillAgentByCwd(t *testing.T, cwd string) {
	t.Helper()
	pids := AgentPIDs(cwd)
	if len(pids) != 1 {
		t.Fatalf("want one agent process in %s (a child of the test process), found %v", cwd, pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatalf("kill %d: %v", pids[0], err)
	}
	t.Logf("killed agent process %d (SIGKILL)", pids[0])
}

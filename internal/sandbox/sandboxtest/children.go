package sandboxtest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Children returns the pids of this process's children that run with
// argv[0] arg0, from a scan of /proc: for a test to check what a runtime
// left behind (the process runtime's sandbox inits,
// "agentbox-sandbox-init", spares included). The children of this
// process's sandbox launcher ("agentbox-sandbox-launcher", which starts
// the process runtime's inits) count as its own. A child that exited and
// was not reaped yet is listed too.
func Children(arg0 string) []int {
	parents := map[string]bool{strconv.Itoa(os.Getpid()): true}
	for _, pid := range childrenOf(parents, "agentbox-sandbox-launcher") {
		parents[strconv.Itoa(pid)] = true
	}
	return childrenOf(parents, arg0)
}

// childrenOf lists the processes whose parent is in parents and whose
// argv[0] is arg0.
func childrenOf(parents map[string]bool, arg0 string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The fields after the command name, which may hold anything:
		// the state, then the parent's pid.
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 || !parents[f[1]] {
			continue
		}
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.HasPrefix(string(cmd), arg0+"\x00") {
			out = append(out, pid)
		}
	}
	return out
}

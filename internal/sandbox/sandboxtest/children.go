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
// "agentbox-sandbox-init", spares included). A child that exited and
// was not reaped yet is listed too.
func Children(arg0 string) []int {
	ents, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
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
		if len(f) < 2 || f[1] != self {
			continue
		}
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.HasPrefix(string(cmd), arg0+"\x00") {
			out = append(out, pid)
		}
	}
	return out
}

package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// sandboxInits lists the sandbox inits (the process runtime's, spares
// included) this process started that still run.
func sandboxInits() []int {
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
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.HasPrefix(string(cmd), "agentbox-sandbox-init\x00") {
			out = append(out, pid)
		}
	}
	return out
}

// TestShutdownEndsSpareInit: the daemon keeps a spare sandbox init once it
// made a sandbox, and its shutdown leaves no init behind, spare or not.
func TestShutdownEndsSpareInit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("process sandboxes need root")
	}
	if left := sandboxInits(); len(left) > 0 {
		t.Fatalf("sandbox inits before the test: %v", left)
	}
	c, _, stop := runDaemon(t, filepath.Join(t.TempDir(), "data"), "")
	if _, err := c.Exec(t.Context(), client.ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(sandboxInits()) == 0 { // the spare the exec's Create started
		if time.Now().After(deadline) {
			t.Fatal("no spare init after an exec")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if left := sandboxInits(); len(left) > 0 {
		t.Errorf("sandbox inits after shutdown: %v", left)
	}
}

package process

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/reexec"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/cgroup"
	"github.com/agentbox/agentbox/internal/sandbox/owner"
)

// The second agentbox process of TestSlotsAreHostWide: the test binary,
// re-executed with secondProcessEnv set to the number of sandboxes to
// create over the workspace secondWorkspaceEnv names. It prints each
// sandbox's slot and id, then "ready", and closes them all once its
// stdin ends.
const (
	secondProcessEnv   = "AGENTBOX_PROCESS_TEST_SECOND"
	secondWorkspaceEnv = "AGENTBOX_PROCESS_TEST_SECOND_WS"
)

func TestMain(m *testing.M) {
	reexec.Init()
	if n := os.Getenv(secondProcessEnv); n != "" {
		os.Exit(runSecondProcess(n, os.Getenv(secondWorkspaceEnv)))
	}
	if ws := os.Getenv(spareProcessEnv); ws != "" {
		os.Exit(runSpareProcess(ws))
	}
	os.Exit(m.Run())
}

func runSecondProcess(n, ws string) int {
	count, _ := strconv.Atoi(n)
	var boxes []sandbox.Sandbox
	defer func() {
		for _, sb := range boxes {
			if _, err := sb.Close(context.Background()); err != nil {
				fmt.Println("error", err)
			}
		}
	}()
	for range count {
		sb, err := New(Options{}).Create(context.Background(), sandbox.Spec{Workspace: ws, Env: map[string]string{"PATH": "/usr/bin:/bin"}})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		boxes = append(boxes, sb)
		fmt.Println("slot", sb.(*box).slot, sb.ID())
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test is done with us
	return 0
}

// TestSlotsAreHostWide: two agentbox processes on one host never give two
// live sandboxes the same uid slot (the same host uids). Before slots
// were host-wide, each process counted from 0 on its own. The other
// process closes its sandboxes at the end; if it cannot, it is killed and
// what it left is reaped: nothing of it stays on the host.
func TestSlotsAreHostWide(t *testing.T) {
	needRoot(t)
	const n = 3
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), secondProcessEnv+"="+strconv.Itoa(n), secondWorkspaceEnv+"="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var theirs []int
	var ids []string
	finished := false
	finish := func() {
		if finished {
			return
		}
		finished = true
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the second process: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("the second process did not close its sandboxes")
			_ = cmd.Process.Kill()
			<-done
			if _, err := owner.Default().ReapDead(owner.Reaper{Kind: cgroup.KindCgroup, Reap: func(r owner.Record) error {
				return cgroup.Remove(r.Name)
			}}); err != nil {
				t.Errorf("reaping what it left: %v", err)
			}
		}
	}
	t.Cleanup(finish)
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "ready" {
		line := sc.Text()
		if s, ok := strings.CutPrefix(line, "slot "); ok {
			slot, id, _ := strings.Cut(s, " ")
			v, _ := strconv.Atoi(slot)
			theirs = append(theirs, v)
			ids = append(ids, id)
			continue
		}
		t.Fatalf("second process: %s", line)
	}
	if len(theirs) != n {
		t.Fatalf("second process made %d sandboxes, want %d", len(theirs), n)
	}
	for range n {
		sb, _ := newBox(t, nil)
		if s := sb.(*box).slot; slices.Contains(theirs, s) {
			t.Errorf("slot %d (host uids %d and %d) is in use by a sandbox of the other process too (its slots: %v)",
				s, 100000+s, 101000+s, theirs)
		}
	}
	groups := func(id string) []string {
		gs, _ := filepath.Glob("/sys/fs/cgroup/*/agentbox/agentbox-" + id)
		if _, err := os.Stat("/sys/fs/cgroup/agentbox/agentbox-" + id); err == nil {
			gs = append(gs, "/sys/fs/cgroup/agentbox/agentbox-"+id)
		}
		return gs
	}
	for _, id := range ids {
		if len(groups(id)) == 0 {
			t.Fatalf("no cgroup of the other process's sandbox %s to look for", id)
		}
	}
	finish()
	// Nothing of the other process's sandboxes is left: their cgroups
	// (in every hierarchy) went with them.
	for _, id := range ids {
		if left := groups(id); len(left) > 0 {
			t.Errorf("the other process's sandbox %s left %v", id, left)
		}
	}
}

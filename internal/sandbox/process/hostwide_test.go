package process

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// secondProcessEnv makes the test binary the second agentbox process of
// TestSlotsAreHostWide: it creates that many sandboxes, prints their
// slots and waits to be killed.
const secondProcessEnv = "AGENTBOX_PROCESS_TEST_SECOND"

func TestMain(m *testing.M) {
	if n := os.Getenv(secondProcessEnv); n != "" {
		runSecondProcess(n)
		return
	}
	os.Exit(m.Run())
}

func runSecondProcess(n string) {
	count, _ := strconv.Atoi(n)
	ws, err := os.MkdirTemp("", "agentbox-second-")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	defer os.RemoveAll(ws)
	var boxes []sandbox.Sandbox
	for range count {
		sb, err := New(Options{}).Create(context.Background(), sandbox.Spec{Workspace: ws, Env: map[string]string{"PATH": "/usr/bin:/bin"}})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		boxes = append(boxes, sb)
		fmt.Println("slot", sb.(*box).slot)
	}
	fmt.Println("ready")
	time.Sleep(time.Hour)
	_ = boxes
}

// TestSlotsAreHostWide: two agentbox processes on one host never give two
// live sandboxes the same uid slot (the same host uids). Before slots
// were host-wide, each process counted from 0 on its own.
func TestSlotsAreHostWide(t *testing.T) {
	needRoot(t)
	const n = 3
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), secondProcessEnv+"="+strconv.Itoa(n))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var theirs []int
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "ready" {
		line := sc.Text()
		if s, ok := strings.CutPrefix(line, "slot "); ok {
			v, _ := strconv.Atoi(s)
			theirs = append(theirs, v)
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
}

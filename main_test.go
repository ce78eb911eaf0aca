package agentbox_test

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/agentbox/agentbox"
)

// noInitEnv makes the test binary skip Init, as a program that forgot it.
const noInitEnv = "AGENTBOX_TEST_NO_INIT"

// TestMain does what an embedding program's main must: Init first.
func TestMain(m *testing.M) {
	if os.Getenv(noInitEnv) == "" {
		agentbox.Init()
	}
	os.Exit(m.Run())
}

// TestStartNeedsInit: in a program whose main did not call Init, Start
// refuses (its helper processes would run the program's own main).
func TestStartNeedsInit(t *testing.T) {
	if os.Getenv(noInitEnv) != "" {
		_, err := agentbox.Start(t.Context(), agentbox.Options{DataDir: t.TempDir(), InsecureNoAuth: true})
		if !errors.Is(err, agentbox.ErrNoInit) {
			t.Fatalf("Start without Init = %v, want ErrNoInit", err)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStartNeedsInit$", "-test.count=1")
	cmd.Env = append(os.Environ(), noInitEnv+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

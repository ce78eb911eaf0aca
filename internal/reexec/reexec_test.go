package reexec

import (
	"errors"
	"os"
	"os/exec"
	"testing"
)

const testHelper = "agentbox-reexec-test"

func init() { Register(testHelper, func() int { return 7 }) }

func TestMain(m *testing.M) {
	Init()
	os.Exit(m.Run())
}

// TestInitRunsHelper re-executes the test binary under the helper's name:
// the helper's main runs and its result is the exit code.
func TestInitRunsHelper(t *testing.T) {
	for _, arg0 := range []string{testHelper, "/some/dir/" + testHelper} {
		cmd := exec.Command("/proc/self/exe", "-test.run=^$")
		cmd.Args[0] = arg0
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 7 {
			t.Errorf("argv[0] %q: %v, want exit 7 from the helper", arg0, err)
		}
	}
	if !Initialized() {
		t.Error("Initialized() = false after Init")
	}
	if err := Check(testHelper); err != nil {
		t.Errorf("Check(%q) = %v", testHelper, err)
	}
	if err := Check("agentbox-reexec-unregistered"); err == nil {
		t.Error("Check of an unregistered helper passed")
	}
	called.Store(false)
	defer called.Store(true)
	if err := Check(testHelper); err == nil {
		t.Error("Check passed without Init")
	}
}

func TestLookup(t *testing.T) {
	for _, tc := range []struct {
		pid  int
		args []string
		want bool
	}{
		{100, []string{testHelper}, true},
		{100, []string{"/x/" + testHelper, "a", "b"}, true},
		{100, []string{"agentbox", testHelper}, false},
		{1, []string{"/init", testHelper}, true},
		{1, []string{"/init", testHelper, "more"}, false},
		{1, []string{"/init"}, false},
		{100, nil, false},
		{100, []string{"agentbox-unregistered"}, false},
	} {
		if got := lookup(tc.pid, tc.args) != nil; got != tc.want {
			t.Errorf("lookup(%d, %q) found = %v, want %v", tc.pid, tc.args, got, tc.want)
		}
	}
}

func TestRegisterPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"duplicate": func() { Register(testHelper, func() int { return 0 }) },
		"empty":     func() { Register("", func() int { return 0 }) },
		"nil main":  func() { Register("agentbox-reexec-nil", nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Register did not panic", name)
				}
			}()
			f()
		}()
	}
}

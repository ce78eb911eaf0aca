package gvisor

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/agentbox/agentbox/internal/reexec"
	"github.com/agentbox/agentbox/internal/sandbox/seccomp"
)

// runsc (20221219) applies the OCI seccomp section to the container's
// first process only, not to `runsc exec` processes. So every command
// starts as this binary, bound read-only into the container, which installs
// the profile inside gVisor's kernel and then execs the real command: the
// workload meets the same filter as in the process runtime.
const (
	wrapperArg0 = "agentbox-gvisor-exec"
	wrapperPath = "/.agentbox/" + wrapperArg0
)

// init registers the wrapper (and the forwarder), which this binary
// becomes when main calls reexec.Init.
func init() {
	reexec.Register(wrapperArg0, func() int {
		// A profile name never starts with "--": the forwarder of network
		// mode proxy (egress.go) is the same binary with this flag first.
		if len(os.Args) > 1 && os.Args[1] == forwardFlag {
			return forwarderMain(os.Args[2:])
		}
		return wrapperMain(os.Args[1:])
	})
}

// wrapperArgs is the argv of a wrapped command.
func wrapperArgs(profile string, deny []string, args []string) []string {
	return append([]string{wrapperPath, profile, strings.Join(deny, ","), "--"}, args...)
}

func wrapperMain(args []string) int {
	if len(args) < 4 || args[2] != "--" {
		fmt.Fprintln(os.Stderr, "agentbox: bad wrapper arguments")
		return 126
	}
	profile, deny, argv := args[0], []string{}, args[3:]
	if args[1] != "" {
		deny = strings.Split(args[1], ",")
	}
	// syslog inside gVisor reads gVisor's own log (dmesg shows "Starting
	// gVisor..."), nothing of the host's.
	if err := seccomp.InstallAllowing(profile, deny, []string{"syslog"}); err != nil {
		fmt.Fprintf(os.Stderr, "agentbox: %v\n", err)
		return 126
	}
	path := argv[0]
	if !strings.Contains(path, "/") {
		p, err := exec.LookPath(path) // PATH of the sandbox's environment
		if err != nil {
			fmt.Fprintf(os.Stderr, "agentbox: %s: command not found\n", path)
			return 127
		}
		path = p
	}
	err := syscall.Exec(path, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "agentbox: exec %s: %v\n", argv[0], err)
	if os.IsNotExist(err) {
		return 127
	}
	return 126
}

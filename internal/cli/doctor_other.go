//go:build !linux

package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// doctorCmd, off Linux: the mechanisms doctor probes (namespaces, Landlock,
// seccomp, cgroups, gVisor, KVM) are Linux's, and so is the daemon; this
// binary is a client of a daemon on a Linux machine.
func (a *app) doctorCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check which sandbox mechanisms work on this machine (Linux only)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return &ExitError{Code: 1, Err: fmt.Errorf("doctor checks the sandbox mechanisms of Linux (namespaces, Landlock, seccomp, cgroups, gVisor, KVM): run it on the Linux machine of the daemon; on %s, agentbox is a client of that daemon (--url or %s)", runtime.GOOS, EnvURL)}
		},
	}
}

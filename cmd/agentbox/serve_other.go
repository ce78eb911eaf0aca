//go:build !linux

package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/cli"
)

// serveCommand, off Linux: the daemon needs Linux (its sandboxes are
// namespaces, Landlock, seccomp and cgroups); this binary is a client of a
// daemon on a Linux machine. Any flags are taken, so that the answer is
// this one and not a usage error.
func serveCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "serve",
		Short:              "Run the agentbox daemon (Linux only)",
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return &cli.ExitError{Code: 1, Err: fmt.Errorf("the daemon runs on Linux only (this is %s/%s): start `agentbox serve` on a Linux machine and point this client at it with --url or %s", runtime.GOOS, runtime.GOARCH, cli.EnvURL)}
		},
	}
}

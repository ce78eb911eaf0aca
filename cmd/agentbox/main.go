// Command agentbox is the agentbox daemon and its CLI in one static binary:
// `agentbox serve` runs the daemon; every other command is a client of it.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/internal/reexec"
	"github.com/agentbox/agentbox/internal/version"
)

// started is when main began: the beginning of serve's start-up trace.
var started time.Time

func main() {
	started = time.Now()
	// First: when this process is one of the helpers the binary
	// re-executes itself as, run it and exit. Each registers itself from
	// its package's init; the names (argv[0]) are:
	//   agentbox-agent-supervisor  internal/agent (tree_linux.go): an agent's process tree
	//   agentbox-deathwatch        internal/daemon (deathwatch_linux.go): reaps after a dead daemon
	//   agentbox-sandbox-init      internal/sandbox/process (init_linux.go): PID 1 of a sandbox
	//   agentbox-sandbox-userns    internal/sandbox/process (init_linux.go): holds a user namespace
	//   agentbox-sandbox-launcher  internal/sandbox/process (launcher_linux.go): starts sandbox inits
	//   agentbox-gvisor-exec       internal/sandbox/gvisor (wrapper.go): seccomp wrapper, egress forwarder
	//   agentbox-guest-probe       internal/sandbox/microvm (guest.go): PID 1 of the probe's guest
	//   agentbox-probe-helper      internal/sandbox/probe (helper.go): the doctor's probes
	if reexec.Init() {
		return
	}
	// Only SIGTERM cancels the context here: SIGINT (Ctrl-C) is handled by
	// the commands themselves (run interrupts the turn; serve shuts down).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	// A daemon's start builds only the root and serve: the client
	// commands are not built for it (cli.NewDaemonRoot). Any other first
	// argument (a global flag before serve, too) gets the whole tree.
	var root *cobra.Command
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		root = cli.NewDaemonRoot(version.String())
	} else {
		root = cli.NewRoot(version.String())
		root.AddCommand(devCommand())
	}
	root.AddCommand(serveCommand())
	code := cli.Execute(ctx, root)
	stop()
	os.Exit(code)
}

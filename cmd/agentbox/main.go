// Command agentbox is the agentbox daemon and its CLI in one static binary:
// `agentbox serve` runs the daemon; every other command is a client of it.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/internal/version"
)

func main() {
	// Only SIGTERM cancels the context here: SIGINT (Ctrl-C) is handled by
	// the commands themselves (run interrupts the turn; serve shuts down).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	root := cli.NewRoot(version.String())
	root.AddCommand(serveCommand())
	root.AddCommand(devCommand())
	code := cli.Execute(ctx, root)
	stop()
	os.Exit(code)
}

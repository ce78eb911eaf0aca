//go:build unix

package cli

import (
	"os"
	"os/signal"
	"syscall"
)

// notifyResize relays SIGWINCH, the local terminal's change of size.
func notifyResize(c chan<- os.Signal) (stop func()) {
	signal.Notify(c, syscall.SIGWINCH)
	return func() { signal.Stop(c) }
}

//go:build !unix

package cli

import "os"

// notifyResize: without SIGWINCH, the size is sent once, at the start.
func notifyResize(chan<- os.Signal) (stop func()) { return func() {} }

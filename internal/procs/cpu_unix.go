//go:build unix

package procs

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user and system) the process's threads used.
var cpuTime = func() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

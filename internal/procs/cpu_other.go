//go:build !unix

package procs

import "time"

// cpuTime is not measured here: Govern changes nothing.
var cpuTime func() time.Duration

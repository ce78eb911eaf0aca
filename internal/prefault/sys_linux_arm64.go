package prefault

// The system calls' numbers on linux/arm64.
const (
	sysOpenat  = 56
	sysClose   = 57
	sysRead    = 63
	sysMadvise = 233
)

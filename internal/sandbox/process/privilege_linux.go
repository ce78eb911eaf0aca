package process

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// The capabilities every process sandbox needs in the host's user
// namespace: CAP_SETUID and CAP_SETGID to map the sandbox's root and user
// to host uids of their own (a slot, not the daemon's uid), CAP_SYS_ADMIN
// for the idmapped mounts, the cgroup and the mount setup around the init.
var neededCaps = []struct {
	bit  uint
	name string
}{
	{unix.CAP_SYS_ADMIN, "CAP_SYS_ADMIN"},
	{unix.CAP_SETUID, "CAP_SETUID"},
	{unix.CAP_SETGID, "CAP_SETGID"},
}

// privilege says why this process cannot create process sandboxes, or ""
// when it can. It is the one check every sandbox passes (Probe, then
// Create), so an unprivileged daemon is refused by name rather than by
// whichever helper happens to fail first.
func privilege() string {
	var effective uint64
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err == nil {
		effective = uint64(data[0].Effective) | uint64(data[1].Effective)<<32
	}
	uidMap, _ := os.ReadFile("/proc/self/uid_map")
	return privilegeReason(os.Geteuid(), effective, string(uidMap))
}

// privilegeReason is privilege on given facts: the effective uid, the
// effective capability set and the content of /proc/self/uid_map.
func privilegeReason(euid int, effective uint64, uidMap string) string {
	var missing []string
	for _, c := range neededCaps {
		if effective&(1<<c.bit) == 0 {
			missing = append(missing, c.name)
		}
	}
	// Capabilities count only in the host's user namespace: inside
	// another one, host uids outside its map cannot be mapped at all.
	initial := strings.Join(strings.Fields(uidMap), " ") == "0 0 4294967295"
	switch {
	case len(missing) == 0 && initial:
		return ""
	case len(missing) == 0:
		return fmt.Sprintf("the process runtime needs root in the host's user namespace: it maps each sandbox to host uids of its own, and this process (uid %d) runs in a nested user namespace (uid_map %q); run the daemon as root on the host", euid, strings.TrimSpace(uidMap))
	}
	return fmt.Sprintf("the process runtime needs root (%s): it maps each sandbox to host uids of its own (newuidmap is not used) and sets up its mounts and cgroup; this process runs as uid %d without %s: run the daemon as root",
		joinCaps(), euid, strings.Join(missing, ", "))
}

func joinCaps() string {
	names := make([]string, len(neededCaps))
	for i, c := range neededCaps {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

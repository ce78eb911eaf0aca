package microvm

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/reexec"
)

// guestArg is the kernel command line word (after "--") that the kernel
// passes to /init; it tells the running binary it is the probe's guest.
const guestArg = "agentbox-guest-probe"

// guestMarker is what the guest prints once its init runs.
const guestMarker = "AGENTBOX_GUEST_INIT_OK"

// init registers the guest's init, which this binary becomes as the
// guest's PID 1 (argv ["/init", guestArg]) when main calls reexec.Init.
func init() {
	reexec.Register(guestArg, func() int {
		guestInit()
		return 0
	})
}

// guestInit runs as PID 1 of the probe's guest: it proves that the guest
// kernel reached user space, then reboots, which ends QEMU (-no-reboot).
// Under a pid namespace (the package's test) reboot ends the namespace.
func guestInit() {
	up := ""
	var info unix.Sysinfo_t
	if unix.Sysinfo(&info) == nil {
		up = (time.Duration(info.Uptime) * time.Second).String()
	}
	// PID 1 of a throwaway guest: a failure has nowhere to be reported,
	// and the host sees a missing marker as the probe failing.
	_, _ = fmt.Fprintf(os.Stdout, "\n%s uptime=%s\n", guestMarker, up)
	_ = os.Stdout.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	os.Exit(0) // only reached when reboot is not permitted
}

package execution

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal of the given size. The master stays in
// the daemon (non-blocking, in the runtime's poller, so reads and writes
// take deadlines); the slave is a plain blocking descriptor, opened
// without becoming anybody's controlling terminal, to hand to the
// sandboxed process.
func openPTY(rows, cols uint16) (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	defer func() {
		if err != nil {
			_ = master.Close()
		}
	}()
	var sfd int
	var ctlErr error
	// Control, not Fd: Fd would put the master back in blocking mode.
	rc, err := master.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	if err := rc.Control(func(fd uintptr) {
		if ctlErr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ctlErr != nil {
			ctlErr = fmt.Errorf("unlock the pseudo-terminal: %w", ctlErr)
			return
		}
		if ctlErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); ctlErr != nil {
			ctlErr = fmt.Errorf("size the pseudo-terminal: %w", ctlErr)
			return
		}
		// TIOCGPTPEER opens the slave through the master, with no path
		// lookup in /dev/pts that another mount could stand in for.
		r, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
		if errno != 0 {
			ctlErr = fmt.Errorf("open the pseudo-terminal's slave: %w", errno)
			return
		}
		sfd = int(r)
	}); err != nil {
		return nil, nil, err
	}
	if ctlErr != nil {
		return nil, nil, ctlErr
	}
	return master, os.NewFile(uintptr(sfd), "/dev/pts (slave)"), nil
}

// resizePTY sets the terminal's size; the kernel sends SIGWINCH to its
// foreground process group.
func resizePTY(master *os.File, rows, cols uint16) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var ioErr error
	if err := rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); err != nil {
		return err
	}
	return ioErr
}

// signalPTY sends sig to the terminal's foreground process group, as its
// keys do (the kernel takes SIGINT, SIGQUIT and SIGTSTP only).
func signalPTY(master *os.File, sig syscall.Signal) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var ioErr error
	if err := rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetInt(int(fd), unix.TIOCSIG, int(sig))
	}); err != nil {
		return err
	}
	if ioErr != nil {
		return fmt.Errorf("signal the terminal's foreground group: %w", ioErr)
	}
	return nil
}

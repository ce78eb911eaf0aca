package daemon

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/reexec"
	"github.com/agentbox/agentbox/internal/residency"
	"github.com/agentbox/agentbox/internal/sandbox/owner"
)

// The deathwatch is a small process a daemon that makes sandboxes starts
// beside it (this binary, re-executed) and that outlives it just long
// enough to remove what its sandboxes left when it dies without cleaning
// up (SIGKILL, the OOM killer): gVisor containers above all, which are not
// the daemon's children and would otherwise run on, with the agent in
// them, until the next agentbox start reaps them. It removes exactly what
// package owner has recorded for the daemon, with the same reapers a
// start uses, and nothing of any other process.
//
// It learns of the death from a socket pair whose other end only the
// daemon holds: end of stream, however the daemon went. A daemon that
// shuts down cleanly (its sandboxes closed) says so first, and the
// deathwatch exits without reaping.
const deathwatchArg0 = "agentbox-deathwatch"

// deathwatchBye is what a daemon that shut down cleanly sends.
const deathwatchBye = "bye"

// reapRetries are the pauses between the deathwatch's attempts to reap:
// the kernel releases the daemon's owner lock as the daemon exits, a
// moment after the socket's end of stream may arrive.
var reapRetries = []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second, 5 * time.Second}

// init registers the deathwatch, which this binary becomes when main
// calls reexec.Init.
func init() {
	reexec.Register(deathwatchArg0, func() int {
		if len(os.Args) != 3 {
			return 2
		}
		name := []byte(deathwatchArg0[:15] + "\x00") // named for ps (the executable is "exe")
		_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0)
		return deathwatch(os.Args[1], os.Args[2])
	})
}

// deathwatch waits on the socket at descriptor fd for its daemon, owner
// id, to go, then reaps what it left. It returns the exit code.
func deathwatch(fd, id string) int {
	var n int
	if _, err := fmt.Sscan(fd, &n); err != nil {
		return 2
	}
	f := os.NewFile(uintptr(n), "deathwatch")
	// It waits for as long as the daemon lives: what its start mapped of
	// this binary goes (internal/residency).
	_, _ = residency.ReleaseImage()
	buf := make([]byte, 16)
	for {
		k, err := f.Read(buf)
		if err == nil && string(buf[:k]) == deathwatchBye {
			return 0
		}
		if err != nil || k == 0 {
			break // the daemon is gone
		}
	}
	f.Close()
	for _, d := range reapRetries {
		time.Sleep(d)
		dead, rep, err := owner.Default().ReapOwner(id, Reapers()...)
		if err != nil {
			fmt.Fprintf(os.Stderr, "agentbox deathwatch: removing what daemon %s left: %v\n", id, err)
		}
		if dead && len(rep.Kept) == 0 {
			return 0
		}
	}
	return 1 // the next agentbox start reaps what is left
}

// startDeathwatch starts the deathwatch of this process, which must be
// the host's owner self; the returned file is the daemon's end of its
// socket, kept open for the daemon's whole life (see stopDeathwatch).
func startDeathwatch() (*os.File, error) {
	if err := reexec.Check(deathwatchArg0); err != nil {
		return nil, fmt.Errorf("deathwatch: %w", err)
	}
	self, err := owner.Default().Self()
	if err != nil {
		return nil, fmt.Errorf("deathwatch: %w", err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("deathwatch: socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "deathwatch"), os.NewFile(uintptr(fds[1]), "deathwatch")
	defer theirs.Close() // the child has its copy
	// /proc/self/exe: this very binary, even if the file was replaced.
	// Not tied to any request or context: it must outlive the daemon.
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{deathwatchArg0, "3", self.ID()},
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, ExtraFiles: []*os.File{theirs}, Stderr: os.Stderr,
		// A session of its own: no terminal signal meant for the daemon
		// reaches it.
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if err := cmd.Start(); err != nil {
		ours.Close()
		return nil, fmt.Errorf("deathwatch: start: %w", err)
	}
	// Its exit is collected by whoever reaps it; the daemon does not wait.
	go func() { _ = cmd.Wait() }()
	return ours, nil
}

// stopDeathwatch tells the deathwatch the daemon shut down cleanly and
// closes the daemon's end.
func stopDeathwatch(f *os.File) error {
	if f == nil {
		return nil
	}
	_, werr := f.Write([]byte(deathwatchBye))
	return errors.Join(werr, f.Close())
}

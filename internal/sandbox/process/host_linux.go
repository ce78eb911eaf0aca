package process

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/reexec"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Host-side filesystems.
//
// Every filesystem the supervisor must be able to read after the sandbox
// ran (the overlay's upper layer for Commit, /tmp and $HOME for the disk
// verdict) is created here as a *detached* mount: fsopen+fsmount for a
// tmpfs, open_tree(OPEN_TREE_CLONE) for a bind. The supervisor keeps the
// mount fd; the init moves it into its own mount namespace with
// move_mount. We chose this over mounting under a host directory or going
// through /proc/<init>/root because:
//
//   - it never touches the host's mount table, so nothing can leak there,
//     not even if the daemon is killed -9: the kernel frees a detached
//     tmpfs when its last fd closes;
//   - the supervisor can read the upper dir (/proc/self/fd/N/u) and statfs
//     the tmpfs (fstatfs) after the init died, which /proc/<pid>/root
//     cannot;
//   - the init never needs to resolve a host path: binds of paths whose
//     parents are not searchable by the sandbox's unprivileged host uid
//     (e.g. a 0700 temp dir) still work.
//
// Workspace ownership: inside, the sandbox user (uid 1000) is an
// unprivileged host uid, which does not own the host workspace. The lower
// layer is therefore an idmapped mount that maps the workspace owner's
// uid/gid to the sandbox user's host ids, so the workspace looks owned by
// the sandbox user inside, and nothing else changes ownership.

// newTmpfs creates a detached tmpfs whose root has mode and owner. size 0
// leaves the kernel default (half of RAM); inodes bounds its entries
// (nr_inodes: one more is ENOSPC), 0 leaves the kernel default.
func newTmpfs(size, inodes int64, mode uint32, uid, gid int) (*os.File, error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsopen tmpfs: %w", err)
	}
	defer func() { _ = unix.Close(fs) }() // an fs context: closing it loses nothing
	opts := [][2]string{
		{"mode", strconv.FormatUint(uint64(mode), 8)},
		{"uid", strconv.Itoa(uid)},
		{"gid", strconv.Itoa(gid)},
	}
	if size > 0 {
		opts = append(opts, [2]string{"size", strconv.FormatInt(size, 10)})
	}
	if inodes > 0 {
		opts = append(opts, [2]string{"nr_inodes", strconv.FormatInt(inodes, 10)})
	}
	for _, o := range opts {
		if err := unix.FsconfigSetString(fs, o[0], o[1]); err != nil {
			return nil, fmt.Errorf("tmpfs option %s=%s: %w", o[0], o[1], err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return nil, fmt.Errorf("create tmpfs: %w", err)
	}
	mfd, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return nil, fmt.Errorf("fsmount tmpfs: %w", err)
	}
	return os.NewFile(uintptr(mfd), "tmpfs"), nil
}

// cloneTree returns a detached copy of the mount at path (with its
// submounts when recursive), with attrs set and, when usernsFD >= 0,
// idmapped through that user namespace.
func cloneTree(path string, recursive bool, attrs uint64, usernsFD int) (*os.File, error) {
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC)
	setFlags := uint(unix.AT_EMPTY_PATH)
	if recursive {
		flags |= unix.AT_RECURSIVE
		setFlags |= unix.AT_RECURSIVE
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, flags)
	if err != nil {
		return nil, fmt.Errorf("open_tree %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	if usernsFD >= 0 {
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(usernsFD)}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
			f.Close()
			return nil, fmt.Errorf("idmap %s: %w", path, err)
		}
	}
	if attrs != 0 {
		if err := unix.MountSetattr(fd, "", setFlags, &unix.MountAttr{Attr_set: attrs}); err != nil {
			f.Close()
			return nil, fmt.Errorf("set mount attributes on %s: %w", path, err)
		}
	}
	return f, nil
}

// idmapKey identifies one idmapping: host owner ids → sandbox user ids.
type idmapKey struct{ uid, gid, toUID, toGID int }

// idmaps caches user namespaces used only as idmappings. A userns fd keeps
// the namespace alive without any process in it, and uid slots are reused,
// so after warm-up a sandbox's idmap costs nothing.
var idmaps = struct {
	sync.Mutex
	m map[idmapKey]int
}{m: map[idmapKey]int{}}

// idmapUserns returns a user namespace fd mapping k.uid→k.toUID and
// k.gid→k.toGID. The fd is owned by the cache.
func idmapUserns(k idmapKey) (int, error) {
	idmaps.Lock()
	defer idmaps.Unlock()
	if fd, ok := idmaps.m[k]; ok {
		return fd, nil
	}
	if err := reexec.Check(usernsArg0); err != nil {
		return -1, err
	}
	// A user namespace needs a process to be created; this one blocks on
	// stdin until we have opened its namespace, then exits.
	// Its lifetime is this function's: it exits on stdin's EOF below.
	cmd := exec.CommandContext(context.Background(), sandbox.SelfExe())
	cmd.Args = []string{usernsArg0}
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: k.uid, HostID: k.toUID, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: k.gid, HostID: k.toGID, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return -1, err
	}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("start idmap helper: %w", err)
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	stdin.Close()
	werr := cmd.Wait()
	if err != nil {
		return -1, fmt.Errorf("open idmap user namespace: %w", err)
	}
	if werr != nil {
		_ = unix.Close(fd) // a namespace fd: closing it loses nothing
		return -1, fmt.Errorf("idmap helper: %w", werr)
	}
	idmaps.m[k] = fd
	return fd, nil
}

// runUsernsHelper is the idmap helper's whole life.
func runUsernsHelper() int {
	_, _ = io.Copy(io.Discard, os.Stdin) // EOF or an error: either way the parent is done
	return 0
}

// ownerOf returns the uid and gid owning path.
func ownerOf(path string) (uid, gid int, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, err
	}
	return int(st.Uid), int(st.Gid), nil
}

// freeSpace is the space and the inodes left on the filesystem of a mount
// fd.
func freeSpace(f *os.File) (bytes int64, inodes uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * st.Bsize, st.Ffree, nil
}

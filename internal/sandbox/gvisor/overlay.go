package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// workspaceOverlay is the host-side overlay the container sees as its
// workspace: the host workspace as the lower layer (id-mapped so its owner
// appears as the sandbox user), writes landing in upper on a scratch tmpfs
// (sized by the disk limit), applied back by workspace.Commit.
type workspaceOverlay struct {
	layered
	// tmp and home are the sandbox's /tmp and $HOME: sized host tmpfs,
	// so a full one is visible from the host (the disk-limit verdict) and
	// the file-count limit is the host kernel's nr_inodes.
	tmp, home string
}

// layered is one host-side overlay under a directory of the sandbox's:
// a host directory as the lower layer, id-mapped so that its owner
// appears as the sandbox user, and the writes in upper, on a scratch
// tmpfs whose size and nr_inodes are the bounds.
type layered struct {
	scratch, upper, work, lower, merged string
	idmapped                            bool
}

func newLayered(dir, merged string) layered {
	l := layered{scratch: filepath.Join(dir, "scratch"), lower: filepath.Join(dir, "lower"), merged: merged}
	l.upper, l.work = filepath.Join(l.scratch, "upper"), filepath.Join(l.scratch, "work")
	return l
}

// tmpfsOptions are the options of a scratch tmpfs of mode holding extra
// inodes of its own, bounded by the disk and file limits (0: the kernel's
// defaults).
func tmpfsOptions(mode string, l sandbox.Limits, extra int64) string {
	opts := "mode=" + mode
	if l.DiskBytes > 0 {
		opts += ",size=" + strconv.FormatInt(l.DiskBytes, 10)
	}
	if n := sandbox.TmpfsInodes(l.Files, extra); n > 0 {
		opts += ",nr_inodes=" + strconv.FormatInt(n, 10)
	}
	return opts
}

// mountLayers mounts the scratch tmpfs (options opts), makes the upper
// and work directories, id-maps src when the sandbox user does not own it,
// and mounts the overlay at merged. The caller takes a partly built one
// down with unmount.
func (o *layered) mountLayers(src, opts string) error {
	for _, d := range []string{o.scratch, o.lower, o.merged} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := unix.Mount("tmpfs", o.scratch, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("gvisor: scratch tmpfs: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	if err := os.Mkdir(o.upper, os.FileMode(st.Mode&0o777)); err != nil {
		return err
	}
	// The merged root takes the upper root's owner: the sandbox user's,
	// so it can create files at the top of the directory.
	if err := os.Chown(o.upper, sandboxUID, sandboxGID); err != nil {
		return err
	}
	if err := os.Mkdir(o.work, 0o700); err != nil {
		return err
	}
	lower := src
	if int(st.Uid) != sandboxUID || int(st.Gid) != sandboxGID {
		if err := idmapMount(src, o.lower, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
		o.idmapped = true
		lower = o.lower
	}
	// redirect_dir, metacopy and index off: the upper layer then holds
	// only plain files, directories, whiteouts and opaque markers, which
	// is all workspace.Commit applies.
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=off,metacopy=off,index=off", lower, o.upper, o.work)
	if err := unix.Mount("overlay", o.merged, "overlay", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return fmt.Errorf("gvisor: overlay of %s: %w", src, err)
	}
	return nil
}

// unmount takes the layers down; safe on partly built ones.
func (o *layered) unmount() error {
	var errs []error
	for _, m := range []string{o.merged, o.lower, o.scratch} {
		if m == "" {
			continue
		}
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// mountState builds the overlay of state directory src (Spec.StateDirs)
// under dir, its writable layer bounded by the limits less what src holds
// already, so that src, which Commit writes back to, stays within them.
func mountState(dir, src string, l sandbox.Limits) (_ *layered, err error) {
	o := newLayered(dir, filepath.Join(dir, "merged"))
	defer func() {
		if err != nil {
			if uerr := o.unmount(); uerr != nil {
				err = errors.Join(err, uerr)
			}
		}
	}()
	room, err := sandbox.StateRoom(src, l)
	if err != nil {
		return nil, fmt.Errorf("gvisor: state directory %s: %w", src, err)
	}
	if err := o.mountLayers(src, tmpfsOptions("0700", room, sandbox.InodesUpper)); err != nil {
		return nil, err
	}
	return &o, nil
}

// mountOverlay builds the overlay under dir for the host workspace ws.
func mountOverlay(dir, ws string, limits sandbox.Limits) (_ *workspaceOverlay, err error) {
	o := &workspaceOverlay{
		layered: newLayered(dir, filepath.Join(dir, "workspace")),
		tmp:     filepath.Join(dir, "tmp"),
		home:    filepath.Join(dir, "home"),
	}
	defer func() {
		if err != nil {
			// A mount that cannot be taken down is leaked: say so.
			if uerr := o.unmount(); uerr != nil {
				err = errors.Join(err, uerr)
			}
		}
	}()
	for _, d := range []string{o.tmp, o.home} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := unix.Mount("tmpfs", o.tmp, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpfsOptions("1777", limits, sandbox.InodesTmpfs)); err != nil {
		return nil, fmt.Errorf("gvisor: /tmp tmpfs: %w", err)
	}
	homeOpts := tmpfsOptions("0700", limits, sandbox.InodesTmpfs) + fmt.Sprintf(",uid=%d,gid=%d", sandboxUID, sandboxGID)
	if err := unix.Mount("tmpfs", o.home, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, homeOpts); err != nil {
		return nil, fmt.Errorf("gvisor: home tmpfs: %w", err)
	}
	if err := o.mountLayers(ws, tmpfsOptions("0700", limits, sandbox.InodesUpper)); err != nil {
		return nil, err
	}
	return o, nil
}

// unmount takes the overlay down; safe on a partly built one.
func (o *workspaceOverlay) unmount() error {
	var errs []error
	for _, m := range []string{o.tmp, o.home} {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	return errors.Join(append(errs, o.layered.unmount())...)
}

// idmapMount attaches an id-mapped copy of src at dst in which files owned
// by uid:gid appear as owned by the sandbox user (others appear as the
// overflow id). The mapping's user namespace comes from a short-lived
// child that blocks on its stdin.
func idmapMount(src, dst string, uid, gid int) error {
	cat, err := exec.LookPath("cat")
	if err != nil {
		return fmt.Errorf("gvisor: id-map helper: %w", err)
	}
	// Its lifetime is this function's: the defer below ends it.
	cmd := exec.CommandContext(context.Background(), cat)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: sandboxUID, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: sandboxGID, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("gvisor: id-map helper: %w", err)
	}
	defer func() {
		stdin.Close()
		_ = cmd.Process.Kill() // it may have ended on stdin's EOF already
		_ = cmd.Wait()         // killed: the status carries nothing
	}()
	userns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	if err != nil {
		return fmt.Errorf("gvisor: id-map helper: %w", err)
	}
	defer userns.Close()
	tree, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("gvisor: open_tree %s: %w", src, err)
	}
	defer func() { _ = unix.Close(tree) }() // a detached mount tree: closing it loses nothing
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns.Fd())}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("gvisor: id-map the workspace: %w", err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("gvisor: attach the id-mapped workspace: %w", err)
	}
	return nil
}

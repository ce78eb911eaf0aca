package workspace

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Overlayfs keeps its metadata in xattrs: "trusted.overlay.*" on a mount by
// real root, "user.overlay.*" on one made with -o userxattr (inside a user
// namespace). Both are read, so either kind of mount can be committed.
var xattrPrefixes = []string{"trusted.overlay.", "user.overlay."}

// Violation details.
const (
	detailCreate  = "creation of a protected path dropped"
	detailChange  = "change to a protected path dropped"
	detailRemove  = "removal of a protected path dropped"
	detailSpecial = "special file (device, fifo or socket) not copied back"
)

// Commit applies the overlayfs upper directory upperDir onto the host
// directory workspace: new and changed files, directories and symlinks are
// copied, whiteouts (0/0 character devices) delete, and opaque directories
// replace the host directory's contents. Changes to paths matching a
// protected pattern (see Match) are not applied; each becomes a Violation
// with Action "dropped". Devices, fifos and sockets are never copied.
//
// The host side is walked with one directory file descriptor per level,
// opened with O_NOFOLLOW, and every change is made relative to it (mkdirat,
// renameat, unlinkat...), so a symlink on the host (say "a" -> /etc) is
// replaced, never written through. The upper side is opened the same way:
// the sandbox may still be running and swapping entries under us.
// Symlinks are copied as symlinks; their targets are never resolved.
//
// Modes keep the permission bits only (no setuid, setgid or sticky: the
// copy runs as root and must not mint privileged binaries). New entries get
// the owner of the workspace root; replaced files keep their owner.
//
// Commit is idempotent: applying the same upper directory again changes
// nothing more (unchanged files are skipped by size, mtime and mode). It
// reports protected changes again each time; Committer remembers what it
// already reported.
//
// A problem with one entry does not stop the others; all of them are
// returned joined.
func Commit(upperDir, workspace string, protected []string) ([]sandbox.Violation, error) {
	root, err := filepath.EvalSymlinks(workspace)
	if err != nil {
		return nil, fmt.Errorf("workspace: resolve %s: %w", workspace, err)
	}
	hostFd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("workspace: open %s: %w", root, err)
	}
	defer closeFd(hostFd)
	upFd, err := unix.Open(upperDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("workspace: open upper dir %s: %w", upperDir, err)
	}
	defer closeFd(upFd)

	var rootSt unix.Stat_t
	if err := unix.Fstat(hostFd, &rootSt); err != nil {
		return nil, fmt.Errorf("workspace: stat %s: %w", root, err)
	}
	c := &commit{protected: protected, uid: int(rootSt.Uid), gid: int(rootSt.Gid)}
	c.dir(upFd, hostFd, "")
	return c.violations, errors.Join(c.errs...)
}

// Committer commits the same upper directory repeatedly (while the sandbox
// runs, and once more at the end) and returns each protected change only
// the first time it is seen in a given state, so one write to CLAUDE.md is
// one violation however often it is committed.
type Committer struct {
	Upper, Workspace string
	Protected        []string

	mu   sync.Mutex
	seen map[string]string // target → fingerprint of the dropped upper entry
}

// Commit runs Commit and filters out violations already reported for an
// unchanged upper entry.
func (c *Committer) Commit() ([]sandbox.Violation, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	vs, err := Commit(c.Upper, c.Workspace, c.Protected)
	if c.seen == nil {
		c.seen = map[string]string{}
	}
	var fresh []sandbox.Violation
	for _, v := range vs {
		fp := v.Detail + "|" + fingerprint(filepath.Join(c.Upper, filepath.FromSlash(v.Target)))
		if c.seen[v.Target] == fp {
			continue
		}
		c.seen[v.Target] = fp
		fresh = append(fresh, v)
	}
	return fresh, err
}

// fingerprint identifies the state of an upper entry without following it.
func fingerprint(p string) string {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return "absent"
	}
	return fmt.Sprintf("%o/%d/%d.%d/%d", st.Mode, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ino)
}

type commit struct {
	protected  []string
	uid, gid   int // owner given to new entries
	violations []sandbox.Violation
	errs       []error
}

func (c *commit) violation(rel, detail, pattern string) {
	c.violations = append(c.violations, sandbox.Violation{
		Kind:   sandbox.ViolationFilesystem,
		Detail: detail,
		Target: rel,
		Rule:   "protected:" + pattern,
		Action: "dropped",
	})
}

func (c *commit) fail(rel string, err error) {
	if rel == "" {
		rel = "."
	}
	c.errs = append(c.errs, fmt.Errorf("workspace: %s: %w", rel, err))
}

// upperEntry is one entry of the upper directory, classified.
type upperEntry struct {
	name, rel string
	st        unix.Stat_t
	kind      entryKind
	opaque    bool   // directories: hide everything below on the host
	target    string // symlinks
}

type entryKind int

const (
	kindFile entryKind = iota
	kindDir
	kindSymlink
	kindWhiteout
	kindSpecial
)

// dir applies the upper directory open at upFd onto the host directory
// open at hostFd (both the directory at rel).
func (c *commit) dir(upFd, hostFd int, rel string) {
	names, err := readDirNames(upFd)
	if err != nil {
		c.fail(rel, fmt.Errorf("read upper dir: %w", err))
		return
	}
	for _, name := range names {
		e, err := c.classify(upFd, name, join(rel, name))
		if err != nil {
			c.fail(join(rel, name), err)
			continue
		}
		c.apply(upFd, hostFd, e)
	}
}

func (c *commit) classify(upFd int, name, rel string) (*upperEntry, error) {
	e := &upperEntry{name: name, rel: rel}
	if err := unix.Fstatat(upFd, name, &e.st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, fmt.Errorf("stat upper: %w", err)
	}
	switch e.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		e.kind = kindDir
		fd, err := openDir(upFd, name)
		if err != nil {
			return nil, fmt.Errorf("open upper dir: %w", err)
		}
		defer closeFd(fd)
		if hasOverlayXattr(fd, "redirect") {
			// A renamed directory whose content still lives in the lower
			// layer under its old name: copying it would lose files.
			return nil, errors.New("overlay redirect_dir entry; mount the overlay with redirect_dir=off")
		}
		e.opaque = overlayXattr(fd, "opaque") == "y"
	case unix.S_IFREG:
		e.kind = kindFile
		fd, err := unix.Openat(upFd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return nil, fmt.Errorf("open upper file: %w", err)
		}
		defer closeFd(fd)
		if hasOverlayXattr(fd, "metacopy") {
			// Metadata-only copy-up: the data is still in the lower
			// layer; copying it would truncate the file.
			return nil, errors.New("overlay metacopy entry; mount the overlay with metacopy=off")
		}
		if hasOverlayXattr(fd, "whiteout") && e.st.Size == 0 {
			e.kind = kindWhiteout
		}
	case unix.S_IFLNK:
		e.kind = kindSymlink
		t, err := readlinkat(upFd, name)
		if err != nil {
			return nil, fmt.Errorf("readlink upper: %w", err)
		}
		e.target = t
	case unix.S_IFCHR:
		if e.st.Rdev == 0 {
			e.kind = kindWhiteout
		} else {
			e.kind = kindSpecial
		}
	default:
		e.kind = kindSpecial
	}
	return e, nil
}

func (c *commit) apply(upFd, hostFd int, e *upperEntry) {
	var hst unix.Stat_t
	hostExists := true
	if err := unix.Fstatat(hostFd, e.name, &hst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if !errors.Is(err, unix.ENOENT) {
			c.fail(e.rel, fmt.Errorf("stat host: %w", err))
			return
		}
		hostExists = false
	}
	hostIsDir := hostExists && hst.Mode&unix.S_IFMT == unix.S_IFDIR

	if pat, ok := Match(c.protected, e.rel); ok {
		c.protectedChange(upFd, hostFd, e, hostExists, hostIsDir, &hst, pat)
		return
	}

	switch e.kind {
	case kindWhiteout:
		if hostExists {
			c.removeTree(hostFd, e.name, e.rel)
		}
	case kindSpecial:
		c.violations = append(c.violations, sandbox.Violation{
			Kind: sandbox.ViolationFilesystem, Detail: detailSpecial, Target: e.rel, Action: "dropped",
		})
	case kindDir:
		c.applyDir(upFd, hostFd, e, hostExists, hostIsDir)
	case kindFile:
		c.applyFile(upFd, hostFd, e, hostExists, hostIsDir, &hst)
	case kindSymlink:
		c.applySymlink(hostFd, e, hostExists, hostIsDir, &hst)
	}
}

// protectedChange reports an upper entry at a protected path. Directories
// are walked (on the upper side; the host side only to tell creations from
// changes) so each dropped file is named; a directory is reported itself
// when nothing below it was but it still differs from the host (new,
// opaque, another type or another mode).
func (c *commit) protectedChange(upFd, hostFd int, e *upperEntry, hostExists, hostIsDir bool, hst *unix.Stat_t, pat string) {
	switch e.kind {
	case kindWhiteout:
		if hostExists {
			c.violation(e.rel, detailRemove, pat)
		}
	case kindDir:
		before := len(c.violations)
		c.reportTree(upFd, hostFd, e.name, e.rel, pat)
		changed := !hostIsDir || e.opaque || hst.Mode&0o777 != e.st.Mode&0o777
		if len(c.violations) == before && changed {
			c.violation(e.rel, detailFor(hostExists), pat)
		}
	default:
		c.violation(e.rel, detailFor(hostExists), pat)
	}
}

func detailFor(hostExists bool) string {
	if hostExists {
		return detailChange
	}
	return detailCreate
}

// reportTree reports every entry below the protected upper directory name.
// hostFd is the host's parent directory, or -1 when the host has none.
func (c *commit) reportTree(upParent, hostParent int, name, rel, pat string) {
	upFd, err := openDir(upParent, name)
	if err != nil {
		c.fail(rel, fmt.Errorf("open upper dir: %w", err))
		return
	}
	defer closeFd(upFd)
	hostFd := -1
	if hostParent >= 0 {
		if fd, err := openDir(hostParent, name); err == nil {
			hostFd = fd
			defer closeFd(fd)
		}
	}
	names, err := readDirNames(upFd)
	if err != nil {
		c.fail(rel, fmt.Errorf("read upper dir: %w", err))
		return
	}
	for _, n := range names {
		r := join(rel, n)
		// A pattern naming only the directory ("dir/**" does both)
		// still protects what is in it.
		p, ok := Match(c.protected, r)
		if !ok {
			p = pat
		}
		var st, hst unix.Stat_t
		if err := unix.Fstatat(upFd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			c.fail(r, fmt.Errorf("stat upper: %w", err))
			continue
		}
		onHost := hostFd >= 0 && unix.Fstatat(hostFd, n, &hst, unix.AT_SYMLINK_NOFOLLOW) == nil
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFDIR:
			before := len(c.violations)
			c.reportTree(upFd, hostFd, n, r, p)
			if len(c.violations) == before && (!onHost || hst.Mode&unix.S_IFMT != unix.S_IFDIR) {
				c.violation(r, detailFor(onHost), p)
			}
		case st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0:
			if onHost {
				c.violation(r, detailRemove, p)
			}
		default:
			c.violation(r, detailFor(onHost), p)
		}
	}
}

func (c *commit) applyDir(upFd, hostFd int, e *upperEntry, hostExists, hostIsDir bool) {
	perm := uint32(e.st.Mode & 0o777)
	if hostExists && !hostIsDir {
		if err := unix.Unlinkat(hostFd, e.name, 0); err != nil {
			c.fail(e.rel, fmt.Errorf("replace with a directory: %w", err))
			return
		}
		hostExists = false
	}
	if !hostExists {
		if err := unix.Mkdirat(hostFd, e.name, perm); err != nil {
			c.fail(e.rel, fmt.Errorf("mkdir: %w", err))
			return
		}
		if err := unix.Fchownat(hostFd, e.name, c.uid, c.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, unix.EPERM) {
			c.fail(e.rel, fmt.Errorf("chown: %w", err))
		}
	}
	hfd, err := openDir(hostFd, e.name)
	if err != nil {
		// ELOOP or ENOTDIR: the entry was swapped for a symlink or a file
		// since we looked. Never follow it.
		c.fail(e.rel, fmt.Errorf("open host dir: %w", err))
		return
	}
	defer closeFd(hfd)
	if err := unix.Fchmod(hfd, perm); err != nil {
		c.fail(e.rel, fmt.Errorf("chmod: %w", err))
	}
	ufd, err := openDir(upFd, e.name)
	if err != nil {
		c.fail(e.rel, fmt.Errorf("open upper dir: %w", err))
		return
	}
	defer closeFd(ufd)
	if e.opaque && hostExists {
		// The directory was removed and made again inside: what the
		// host has and the upper does not is gone.
		c.clearOpaque(ufd, hfd, e.rel)
	}
	c.dir(ufd, hfd, e.rel)
}

// clearOpaque removes the host entries of an opaque directory that the
// upper directory does not have (those it has are replaced by dir()).
func (c *commit) clearOpaque(upFd, hostFd int, rel string) {
	names, err := readDirNames(hostFd)
	if err != nil {
		c.fail(rel, fmt.Errorf("read host dir: %w", err))
		return
	}
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(upFd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			continue
		}
		c.removeTree(hostFd, name, join(rel, name))
	}
}

// removeTree deletes the host entry name in hostFd, keeping (and
// reporting) protected paths; it reports whether the entry is gone.
func (c *commit) removeTree(hostFd int, name, rel string) bool {
	if pat, ok := Match(c.protected, rel); ok {
		c.violation(rel, detailRemove, pat)
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstatat(hostFd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return true
		}
		c.fail(rel, fmt.Errorf("stat host: %w", err))
		return false
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(hostFd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			c.fail(rel, fmt.Errorf("remove: %w", err))
			return false
		}
		return true
	}
	fd, err := openDir(hostFd, name)
	if err != nil {
		c.fail(rel, fmt.Errorf("open host dir: %w", err))
		return false
	}
	names, err := readDirNames(fd)
	all := err == nil
	if err != nil {
		c.fail(rel, fmt.Errorf("read host dir: %w", err))
	}
	for _, n := range names {
		if !c.removeTree(fd, n, join(rel, n)) {
			all = false
		}
	}
	closeFd(fd)
	if !all {
		return false
	}
	if err := unix.Unlinkat(hostFd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		c.fail(rel, fmt.Errorf("rmdir: %w", err))
		return false
	}
	return true
}

func (c *commit) applyFile(upFd, hostFd int, e *upperEntry, hostExists, hostIsDir bool, hst *unix.Stat_t) {
	perm := uint32(e.st.Mode & 0o777)
	uid, gid := c.uid, c.gid
	if hostExists && !hostIsDir {
		if hst.Mode&unix.S_IFMT == unix.S_IFREG && hst.Size == e.st.Size && hst.Mtim == e.st.Mtim && uint32(hst.Mode&0o777) == perm {
			return // already applied
		}
		uid, gid = int(hst.Uid), int(hst.Gid)
	}
	if hostIsDir && !c.removeTree(hostFd, e.name, e.rel) {
		return
	}
	src, err := unix.Openat(upFd, e.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		c.fail(e.rel, fmt.Errorf("open upper file: %w", err))
		return
	}
	srcF := os.NewFile(uintptr(src), e.rel)
	defer srcF.Close()
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		c.fail(e.rel, errors.New("upper entry changed type while committing"))
		return
	}
	tmp, dstF, err := createTemp(hostFd)
	if err != nil {
		c.fail(e.rel, err)
		return
	}
	ok := false
	defer func() {
		dstF.Close()
		if !ok {
			c.removeTemp(hostFd, tmp, e.rel)
		}
	}()
	if _, err := io.Copy(dstF, srcF); err != nil {
		c.fail(e.rel, fmt.Errorf("copy: %w", err))
		return
	}
	dfd := int(dstF.Fd())
	if err := unix.Fchmod(dfd, perm); err != nil {
		c.fail(e.rel, fmt.Errorf("chmod: %w", err))
		return
	}
	if err := unix.Fchown(dfd, uid, gid); err != nil && !errors.Is(err, unix.EPERM) {
		c.fail(e.rel, fmt.Errorf("chown: %w", err))
		return
	}
	// The mtime is what tells the next Commit the file is already there.
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(hostFd, tmp, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		c.fail(e.rel, fmt.Errorf("set times: %w", err))
		return
	}
	if err := unix.Renameat(hostFd, tmp, hostFd, e.name); err != nil {
		c.fail(e.rel, fmt.Errorf("rename into place: %w", err))
		return
	}
	ok = true
}

func (c *commit) applySymlink(hostFd int, e *upperEntry, hostExists, hostIsDir bool, hst *unix.Stat_t) {
	if hostExists && hst.Mode&unix.S_IFMT == unix.S_IFLNK {
		if t, err := readlinkat(hostFd, e.name); err == nil && t == e.target {
			return
		}
	}
	if hostIsDir && !c.removeTree(hostFd, e.name, e.rel) {
		return
	}
	var tmp string
	for range 10 {
		tmp = tempName()
		err := unix.Symlinkat(e.target, hostFd, tmp)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EEXIST) {
			c.fail(e.rel, fmt.Errorf("symlink: %w", err))
			return
		}
		tmp = ""
	}
	if tmp == "" {
		c.fail(e.rel, errors.New("symlink: no free temporary name"))
		return
	}
	if err := unix.Fchownat(hostFd, tmp, c.uid, c.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, unix.EPERM) {
		c.fail(e.rel, fmt.Errorf("chown symlink: %w", err))
	}
	if err := unix.Renameat(hostFd, tmp, hostFd, e.name); err != nil {
		c.fail(e.rel, fmt.Errorf("rename symlink into place: %w", err))
		c.removeTemp(hostFd, tmp, e.rel)
	}
}

// removeTemp removes the temporary name of a copy that failed. One that
// stays behind is litter in the user's workspace, so that is an error too.
func (c *commit) removeTemp(hostFd int, tmp, rel string) {
	if err := unix.Unlinkat(hostFd, tmp, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		c.fail(rel, fmt.Errorf("remove temporary %s: %w", tmp, err))
	}
}

// createTemp makes a new file next to where the copy goes, so the final
// rename is atomic and a half-copied file is never seen under its name.
func createTemp(dirFd int) (string, *os.File, error) {
	for range 10 {
		name := tempName()
		fd, err := unix.Openat(dirFd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("create temporary file: %w", err)
		}
		return name, os.NewFile(uintptr(fd), name), nil
	}
	return "", nil, errors.New("create temporary file: no free name")
}

func tempName() string {
	var b [8]byte
	rand.Read(b[:])
	return ".agentbox-commit-" + hex.EncodeToString(b[:])
}

// closeFd closes a descriptor Commit only reads through (a directory, an
// upper-layer file): closing it loses no data, so its error is dropped.
func closeFd(fd int) { _ = unix.Close(fd) }

func openDir(dirFd int, name string) (int, error) {
	return unix.Openat(dirFd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// readDirNames lists a directory open at fd without consuming fd.
func readDirNames(fd int) ([]string, error) {
	dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dfd), ".")
	defer f.Close()
	return f.Readdirnames(-1)
}

func readlinkat(dirFd int, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(dirFd, name, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) >= 1<<16 {
			return "", errors.New("symlink target too long")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// overlayXattr returns the value of an overlay xattr on fd, under either
// prefix, or "".
func overlayXattr(fd int, name string) string {
	buf := make([]byte, 64)
	for _, p := range xattrPrefixes {
		n, err := unix.Fgetxattr(fd, p+name, buf)
		if err == nil {
			return string(buf[:n])
		}
	}
	return ""
}

func hasOverlayXattr(fd int, name string) bool {
	for _, p := range xattrPrefixes {
		if _, err := unix.Fgetxattr(fd, p+name, nil); err == nil || errors.Is(err, unix.ERANGE) {
			return true
		}
	}
	return false
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

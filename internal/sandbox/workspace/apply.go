package workspace

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// dirState is a directory of the apply walk.
type dirState struct {
	rel  string
	segs []string // folded
	// onHost: the host has this directory (and the walk opens it).
	onHost bool
	scope  scope
	// shapeDrop names the upper entries that would make this directory a
	// git directory (see shape).
	shapeDrop map[string]bool
}

type frame struct {
	dir   dirState
	names []string
	i     int
}

// walkRoot applies the whole upper layer.
func (c *commit) walkRoot() {
	names, err := c.upNames("")
	if err != nil {
		c.fail("", fmt.Errorf("read upper dir: %w", err))
		return
	}
	root := dirState{onHost: true, scope: c.rootScope}
	c.shape(&root, names, false)
	c.walk(root, names)
}

// walk applies the entries names of the directory d and everything below
// them, depth first, without recursion: the stack holds names, not
// descriptors (those come from the bounded caches).
func (c *commit) walk(d dirState, names []string) {
	stack := []*frame{{dir: d, names: names}}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		if f.i >= len(f.names) || c.ctx.Err() != nil {
			stack = stack[:len(stack)-1]
			continue
		}
		name := f.names[f.i]
		f.i++
		if child := c.entry(&f.dir, name); child != nil {
			stack = append(stack, child)
		}
	}
}

// entry judges and applies one upper entry of the directory d; for a
// directory to descend into it returns its frame.
func (c *commit) entry(d *dirState, name string) *frame {
	rel := join(d.rel, name)
	if len(d.segs)+1 > c.maxDepth {
		c.overflowed(overDepth, rel)
		return nil
	}
	x, err := c.look(d.rel, d.segs, d.onHost, name)
	if err != nil {
		c.fail(rel, err)
		return nil
	}
	if x == nil {
		return nil
	}
	e, h, segs := x.e, &x.h, x.segs
	fname := segs[len(segs)-1]

	if rule, ok := c.protected.rule(segs); ok {
		c.protectedChange(x, rule)
		return nil
	}
	if e.kind == kindSpecial {
		c.violation(rel, detailSpecial, "")
		return nil
	}
	if d.scope.git == nil && !d.scope.private && fname == gitDotGit {
		return c.dotGit(d, x)
	}
	if g := d.scope.git; g != nil {
		inner := g.inner(segs)
		rule := "git:" + strings.Join(inner, "/")
		switch e.kind {
		case kindSymlink:
			if !same(e, h) {
				c.violation(rel, detailFor(h.exists), ruleGitSymlink)
			}
			return nil
		case kindFile:
			if !gitFileAllowed(inner) {
				if !same(e, h) {
					c.violation(rel, detailFor(h.exists), rule)
				}
				return nil
			}
		case kindDir:
			if !gitDirAllowed(inner) {
				if h.isDir() && !e.opaque {
					// The host has it: look inside, file by file, but
					// create nothing and change no mode.
					return c.descend(d, x, d.scope)
				}
				c.violation(rel, detailFor(h.exists), rule)
				return nil
			}
		}
	}
	if d.shapeDrop[name] {
		if !same(e, h) {
			c.violation(rel, detailFor(h.exists), ruleGitShape)
		}
		return nil
	}
	if e.kind == kindSymlink && !d.scope.private && targetIntoGit(e.target) {
		if !same(e, h) {
			c.violation(rel, detailFor(h.exists), ruleSymlinkInGit)
		}
		return nil
	}
	sc := d.scope
	if !sc.reviewed && sc.git == nil && hidden(fname) {
		if _, ok := c.exempt.matchFolded(segs); ok {
			sc.reviewed = true
		} else {
			c.hold(d, x)
			return nil
		}
	}
	switch e.kind {
	case kindWhiteout:
		if h.exists {
			c.removeTree(d, name, sc)
		}
	case kindFile:
		c.applyFile(d, x)
	case kindSymlink:
		c.applySymlink(d, x)
	case kindDir:
		return c.applyDir(d, x, sc)
	}
	return nil
}

// protectedChange reports an upper entry at a protected path. Directories
// are walked (on the upper side; the host side only to tell creations from
// changes) so each dropped file is named; a directory is reported itself
// when nothing below it was but it still differs from the host (new,
// opaque, another type or another mode).
func (c *commit) protectedChange(x *scanEntry, rule string) {
	e, h := x.e, &x.h
	switch e.kind {
	case kindWhiteout:
		if h.exists {
			c.violation(e.rel, detailRemove, rule)
		}
	case kindDir:
		before := len(c.violations)
		c.reportTree(x, rule)
		changed := !h.isDir() || e.opaque || h.st.Mode&0o777 != e.st.Mode&0o777
		if len(c.violations) == before && changed {
			c.violation(e.rel, detailFor(h.exists), rule)
		}
	default:
		if !same(e, h) {
			c.violation(e.rel, detailFor(h.exists), rule)
		}
	}
}

// dotGit handles an upper entry named .git (outside a git directory): the
// host's own git directory is entered (its content judged by the
// allowlist); creating, replacing or removing a .git is dropped.
func (c *commit) dotGit(d *dirState, x *scanEntry) *frame {
	e, h := x.e, &x.h
	switch {
	case e.kind == kindWhiteout:
		if h.exists {
			c.violation(e.rel, detailRemove, ruleDotGit)
		}
	case e.kind == kindDir && h.isDir() && !e.opaque:
		return c.descend(d, x, scope{git: &gitScope{start: len(x.segs), prefix: []string{}}})
	case e.kind == kindFile && h.isReg() && c.sameFileBytes(d.rel, e.name):
	case e.kind == kindSymlink && same(e, h):
	default:
		c.violation(e.rel, detailFor(h.exists), ruleDotGit)
	}
	return nil
}

func (c *commit) sameFileBytes(dirRel, name string) bool {
	ufd, err := c.upDir(dirRel)
	if err != nil {
		return false
	}
	defer closeFd(ufd)
	hfd, err := c.hostDir(dirRel)
	if err != nil {
		return false
	}
	defer closeFd(hfd)
	return sameBytes(ufd, hfd, name, 1<<16)
}

// descend walks into an upper directory the host has, changing nothing
// about the directory itself.
func (c *commit) descend(d *dirState, x *scanEntry, sc scope) *frame {
	names, err := c.upNames(x.e.rel)
	if err != nil {
		c.fail(x.e.rel, fmt.Errorf("read upper dir: %w", err))
		return nil
	}
	child := dirState{rel: x.e.rel, segs: x.segs, onHost: true, scope: sc}
	c.shape(&child, names, false)
	return &frame{dir: child, names: names}
}

func (c *commit) applyDir(d *dirState, x *scanEntry, sc scope) *frame {
	e, h := x.e, &x.h
	perm := uint32(e.st.Mode & 0o777)
	hfd, err := c.hostDir(d.rel)
	if err != nil {
		c.fail(d.rel, fmt.Errorf("open host dir: %w", err))
		return nil
	}
	defer closeFd(hfd)
	exists := h.isDir()
	if !exists {
		if !c.spend(e.rel, 0) {
			return nil
		}
		if h.exists {
			// A file or symlink becomes a directory.
			if err := unix.Unlinkat(hfd, e.name, 0); err != nil {
				c.fail(e.rel, fmt.Errorf("replace with a directory: %w", err))
				return nil
			}
		}
		if err := unix.Mkdirat(hfd, e.name, perm); err != nil {
			c.fail(e.rel, fmt.Errorf("mkdir: %w", err))
			return nil
		}
		if err := unix.Fchownat(hfd, e.name, c.uid, c.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, unix.EPERM) {
			c.fail(e.rel, fmt.Errorf("chown: %w", err))
		}
	}
	dfd, err := openDir(hfd, e.name)
	if err != nil {
		// ELOOP or ENOTDIR: the entry was swapped for a symlink or a file
		// since we looked. Never follow it.
		c.fail(e.rel, fmt.Errorf("open host dir: %w", err))
		return nil
	}
	if err := unix.Fchmod(dfd, perm); err != nil {
		c.fail(e.rel, fmt.Errorf("chmod: %w", err))
	}
	closeFd(dfd)
	names, err := c.upNames(e.rel)
	if err != nil {
		c.fail(e.rel, fmt.Errorf("read upper dir: %w", err))
		return nil
	}
	child := dirState{rel: e.rel, segs: x.segs, onHost: true, scope: sc}
	if e.opaque && exists {
		// The directory was removed and made again inside: what the
		// host has and the upper does not is gone.
		c.clearOpaque(&child, names)
	}
	c.shape(&child, names, e.opaque)
	return &frame{dir: child, names: names}
}

// clearOpaque removes the host entries of an opaque directory that the
// upper directory does not have (those it has are replaced by the walk).
func (c *commit) clearOpaque(d *dirState, upperNames []string) {
	hfd, err := c.hostDir(d.rel)
	if err != nil {
		c.fail(d.rel, fmt.Errorf("open host dir: %w", err))
		return
	}
	hostNames, err := readDirNames(hfd)
	closeFd(hfd)
	if err != nil {
		c.fail(d.rel, fmt.Errorf("read host dir: %w", err))
		return
	}
	inUpper := make(map[string]bool, len(upperNames))
	for _, n := range upperNames {
		inUpper[n] = true
	}
	for _, n := range hostNames {
		if !inUpper[n] {
			c.removeTree(d, n, d.scope)
		}
	}
}

func (c *commit) applyFile(d *dirState, x *scanEntry) {
	e, h := x.e, &x.h
	if same(e, h) {
		return // already applied
	}
	perm := uint32(e.st.Mode & 0o777)
	uid, gid := c.uid, c.gid
	if h.exists && !h.isDir() {
		uid, gid = int(h.st.Uid), int(h.st.Gid)
	}
	if h.isDir() && !c.clearForReplace(d, e) {
		return
	}
	ufd, err := c.upDir(d.rel)
	if err != nil {
		c.fail(d.rel, fmt.Errorf("open upper dir: %w", err))
		return
	}
	defer closeFd(ufd)
	src, err := unix.Openat(ufd, e.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		c.fail(e.rel, fmt.Errorf("open upper file: %w", err))
		return
	}
	defer closeFd(src)
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		c.fail(e.rel, errors.New("upper entry changed type while committing"))
		return
	}
	// The budget takes the size of what is copied, read from the open
	// file: a file the sandbox grows meanwhile is copied only up to it.
	if !c.spend(e.rel, st.Size) {
		return
	}
	hfd, err := c.hostDir(d.rel)
	if err != nil {
		c.fail(d.rel, fmt.Errorf("open host dir: %w", err))
		return
	}
	defer closeFd(hfd)
	if err := c.copyInto(hfd, e.name, src, &st, perm, uid, gid); err != nil {
		c.fail(e.rel, err)
	}
}

func (c *commit) applySymlink(d *dirState, x *scanEntry) {
	e, h := x.e, &x.h
	if same(e, h) {
		return
	}
	if h.isDir() && !c.clearForReplace(d, e) {
		return
	}
	if !c.spend(e.rel, 0) {
		return
	}
	hfd, err := c.hostDir(d.rel)
	if err != nil {
		c.fail(d.rel, fmt.Errorf("open host dir: %w", err))
		return
	}
	defer closeFd(hfd)
	if err := c.symlinkInto(hfd, e.name, e.target); err != nil {
		c.fail(e.rel, err)
	}
}

// removeTree deletes the host entry name of directory d and what is below
// it, judging each entry as a change: protected paths, .git entries and
// git files outside the allowlist stay (reported), hidden ones are held
// for review (deleted after an approval). It reports whether the entry is
// gone, or whether it waits for the review of what is held below it. The
// walk is iterative, with bounded descriptors and depth.
func (c *commit) removeTree(d *dirState, name string, sc scope) (gone, waiting bool) {
	type rframe struct {
		rel     string
		segs    []string
		sc      scope
		names   []string
		i       int
		kept    bool // something below stays for good
		waiting bool // something below waits for review
	}
	c.host.forget(join(d.rel, name))
	// judge decides one host entry; for a directory to empty it returns
	// its frame.
	judge := func(dirRel string, dirSegs []string, dsc scope, n string) (gone, waiting bool, child *rframe) {
		rel := join(dirRel, n)
		segs := appendSeg(dirSegs, Fold(n))
		hfd, err := c.hostDir(dirRel)
		if err != nil {
			c.fail(dirRel, fmt.Errorf("open host dir: %w", err))
			return false, false, nil
		}
		defer closeFd(hfd)
		h, err := lookupHost(hfd, n)
		if err != nil {
			c.fail(rel, err)
			return false, false, nil
		}
		if !h.exists {
			return true, false, nil
		}
		if rule, ok := c.protected.rule(segs); ok {
			c.violation(rel, detailRemove, rule)
			return false, false, nil
		}
		fname := segs[len(segs)-1]
		if dsc.git == nil && !dsc.private && fname == gitDotGit {
			c.violation(rel, detailRemove, ruleDotGit)
			return false, false, nil
		}
		if g := dsc.git; g != nil {
			inner := g.inner(segs)
			ok := gitFileAllowed(inner)
			if h.isDir() {
				ok = gitDirAllowed(inner)
			}
			if !ok {
				c.violation(rel, detailRemove, "git:"+strings.Join(inner, "/"))
				return false, false, nil
			}
		}
		csc := dsc
		if !csc.reviewed && csc.git == nil && hidden(fname) {
			if _, ok := c.exempt.matchFolded(segs); ok {
				csc.reviewed = true
			} else {
				c.holdRemoval(dirRel, dirSegs, dsc, n, &h)
				return false, true, nil
			}
		}
		if len(segs) > c.maxDepth {
			c.overflowed(overDepth, rel)
			return false, false, nil
		}
		if !h.isDir() {
			if err := unix.Unlinkat(hfd, n, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				c.fail(rel, fmt.Errorf("remove: %w", err))
				return false, false, nil
			}
			return true, false, nil
		}
		dfd, err := openDir(hfd, n)
		if err != nil {
			c.fail(rel, fmt.Errorf("open host dir: %w", err))
			return false, false, nil
		}
		names, err := readDirNames(dfd)
		if csc.git == nil && bareShapedFd(dfd) {
			csc.git = &gitScope{start: len(segs), prefix: []string{}}
		}
		closeFd(dfd)
		if err != nil {
			c.fail(rel, fmt.Errorf("read host dir: %w", err))
			return false, false, nil
		}
		return false, false, &rframe{rel: rel, segs: segs, sc: csc, names: names}
	}
	rmdir := func(rel string) bool {
		c.host.forget(rel)
		parent, n := splitRel(rel)
		hfd, err := c.hostDir(parent)
		if err != nil {
			c.fail(parent, fmt.Errorf("open host dir: %w", err))
			return false
		}
		defer closeFd(hfd)
		if err := unix.Unlinkat(hfd, n, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
			c.fail(rel, fmt.Errorf("rmdir: %w", err))
			return false
		}
		return true
	}

	gone, waiting, top := judge(d.rel, d.segs, sc, name)
	if top == nil {
		return gone, waiting
	}
	stack := []*rframe{top}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		if f.i < len(f.names) && c.ctx.Err() == nil {
			n := f.names[f.i]
			f.i++
			gone, waiting, child := judge(f.rel, f.segs, f.sc, n)
			switch {
			case child != nil:
				stack = append(stack, child)
			case waiting:
				f.waiting = true
			case !gone:
				f.kept = true
			}
			continue
		}
		stack = stack[:len(stack)-1]
		if f.i < len(f.names) {
			f.kept = true // interrupted
		}
		done := false
		switch {
		case f.kept:
		case f.waiting:
			c.pending = append(c.pending, f.rel)
		default:
			done = rmdir(f.rel)
		}
		if len(stack) > 0 {
			p := stack[len(stack)-1]
			p.kept = p.kept || f.kept || (!done && !f.waiting)
			p.waiting = p.waiting || f.waiting
		} else {
			return done, f.waiting && !f.kept
		}
	}
	return false, false
}

// clearForReplace removes the host directory an upper file or symlink
// replaces. When held deletions below it wait for review, the entry is
// tried again after the review; otherwise what stays is reported.
func (c *commit) clearForReplace(d *dirState, e *upperEntry) bool {
	gone, waiting := c.removeTree(d, e.name, d.scope)
	switch {
	case gone:
		return true
	case waiting && !c.settled:
		c.retry = append(c.retry, retry{dir: *d, name: e.name})
	default:
		c.violation(e.rel, detailKept, "")
	}
	return false
}

// retry is an upper entry to apply again once the review is settled.
type retry struct {
	dir  dirState
	name string
}

// finishPending removes the directories whose removal waited for held
// deletions, deepest first (the order they were found in); one that is
// still not empty keeps what a reviewer or a rule kept.
func (c *commit) finishPending() {
	for _, rel := range c.pending {
		c.host.forget(rel)
		parent, n := splitRel(rel)
		hfd, err := c.hostDir(parent)
		if err != nil {
			continue
		}
		err = unix.Unlinkat(hfd, n, unix.AT_REMOVEDIR)
		closeFd(hfd)
		if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
			c.fail(rel, fmt.Errorf("rmdir: %w", err))
		}
	}
}

func splitRel(rel string) (dir, name string) {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i], rel[i+1:]
	}
	return "", rel
}

// bareShapedFd is bareShaped for a directory open at fd.
func bareShapedFd(fd int) bool {
	return gitShape(func(f string) bool {
		r := map[string]string{"head": "HEAD", "objects": "objects", "refs": "refs", "commondir": "commondir"}[f]
		var st unix.Stat_t
		return unix.Fstatat(fd, r, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	})
}

//go:build unix

package workspace

import (
	"crypto/sha256"
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
		c.failUpper("", fmt.Errorf("read upper dir: %w", err))
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

// decision is what the rules say of one entry, for the apply walk and
// for the removal of host trees alike (decide).
type decision struct {
	kind decisionKind
	rule string // the violation rule, for the drops
	// sc is the scope of what is below an applied entry.
	sc scope
}

type decisionKind int

const (
	decApply     decisionKind = iota
	decProtected              // a protected pattern matches
	decDotGit                 // named .git, outside a git directory
	decGit                    // in a git directory, outside the allowlist
	decHold                   // a hidden path: held for review
)

// decide judges the entry with folded segments segs (a directory when
// isDir) in a directory of scope sc: the protected patterns, the name
// .git, the git directory allowlist, and the review of hidden paths, in
// that order. It is the one place these rules are decided.
func (c *commit) decide(sc scope, segs []string, isDir bool) decision {
	if rule, ok := c.protectedRule(segs); ok {
		return decision{kind: decProtected, rule: rule}
	}
	name := segs[len(segs)-1]
	if sc.git == nil && !sc.private && name == gitDotGit {
		return decision{kind: decDotGit, rule: ruleDotGit}
	}
	if g := sc.git; g != nil {
		inner := g.inner(segs)
		ok := gitFileAllowed(inner)
		if isDir {
			ok = gitDirAllowed(inner)
		}
		if !ok {
			return decision{kind: decGit, rule: "git:" + strings.Join(inner, "/")}
		}
		return decision{kind: decApply, sc: sc}
	}
	if !sc.reviewed && hidden(name) {
		if _, ok := c.exempt.matchFolded(segs); !ok {
			return decision{kind: decHold, rule: "review:hidden:" + name}
		}
		sc.reviewed = true
	}
	return decision{kind: decApply, sc: sc}
}

// entry judges and applies one upper entry of the directory d; for a
// directory to descend into it returns its frame.
func (c *commit) entry(d *dirState, name string) *frame {
	rel := join(d.rel, name)
	if len(d.segs)+1 > DefaultMaxDepth {
		c.overflowed(overDepth, rel)
		return nil
	}
	x, err := c.look(d.rel, d.segs, d.onHost, name, false)
	if err != nil {
		c.fail(rel, err)
		return nil
	}
	if x == nil {
		return nil
	}
	e, h := x.e, &x.h
	if a := d.scope.approval; a != nil && !a.check(x) {
		// Below an approved change: new, or changed since it was shown.
		if e.kind == kindDir || !same(e, h) {
			c.violation(rel, detailNotShown, a.rule)
		}
		return nil
	}
	dec := c.decide(d.scope, x.segs, e.kind == kindDir)
	if dec.kind == decProtected {
		c.protectedChange(x, dec.rule)
		return nil
	}
	if e.kind == kindSpecial {
		c.violation(rel, detailSpecial, "")
		return nil
	}
	if d.scope.git != nil && e.kind == kindSymlink {
		if !same(e, h) {
			c.violation(rel, detailFor(h.exists), ruleGitSymlink)
		}
		return nil
	}
	switch dec.kind {
	case decDotGit:
		return c.dotGit(d, x)
	case decGit:
		if e.kind == kindWhiteout {
			// Removing host entries: each is judged as it is removed.
			if h.exists {
				c.removeTree(d, name, d.scope)
			}
			return nil
		}
		if e.kind == kindDir && h.isDir() && !e.opaque {
			// The host has it: look inside, file by file, but create
			// nothing and change no mode.
			return c.descend(d, x, d.scope)
		}
		if e.kind != kindDir && same(e, h) {
			return nil
		}
		c.violation(rel, detailFor(h.exists), dec.rule)
		return nil
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
	if dec.kind == decHold {
		c.hold(d, x)
		return nil
	}
	sc := dec.sc
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
		sc := d.scope
		sc.git = &gitScope{start: len(x.segs), prefix: []string{}}
		return c.descend(d, x, sc)
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
		c.failUpper(x.e.rel, fmt.Errorf("read upper dir: %w", err))
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
		c.failUpper(e.rel, fmt.Errorf("read upper dir: %w", err))
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
		c.failUpper(d.rel, fmt.Errorf("open upper dir: %w", err))
		return
	}
	defer closeFd(ufd)
	if c.opts.hook != nil {
		c.opts.hook("open", e.rel)
	}
	src, err := unix.Openat(ufd, e.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		c.failUpper(e.rel, fmt.Errorf("open upper file: %w", err))
		return
	}
	defer closeFd(src)
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		c.fail(e.rel, errors.New("upper entry changed type while committing"))
		return
	}
	// Below an approved change, the descriptor copied must be the file
	// that was shown, before and after the copy, with the bytes shown.
	var verify func(dst int) bool
	if a := d.scope.approval; a != nil {
		fp := statFP(&st)
		if a.fps[e.rel] != fp {
			c.violation(e.rel, detailNotShown, a.rule)
			return
		}
		verify = func(dst int) bool {
			var now unix.Stat_t
			if unix.Fstat(src, &now) != nil || statFP(&now) != fp {
				return false
			}
			want, ok := a.content[e.rel]
			return !ok || hashFd(dst, now.Size) == want
		}
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
	switch err := c.copyInto(hfd, e.name, src, &st, perm, uid, gid, verify); {
	case errors.Is(err, errNotShown):
		c.violation(e.rel, detailNotShown, d.scope.approval.rule)
	case err != nil:
		c.fail(e.rel, err)
	}
}

// hashFd hashes the first size bytes of the file open at fd (a hole reads
// as zeros); the zero hash when it cannot be read.
func hashFd(fd int, size int64) [sha256.Size]byte {
	h := sha256.New()
	buf := make([]byte, 64<<10)
	for off := int64(0); off < size; {
		n, err := unix.Pread(fd, buf[:min(int64(len(buf)), size-off)], off)
		if err != nil || n == 0 {
			return [sha256.Size]byte{}
		}
		h.Write(buf[:n])
		off += int64(n)
	}
	var sum [sha256.Size]byte
	copy(sum[:], h.Sum(nil))
	return sum
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
		csc := dsc
		switch dec := c.decide(dsc, segs, h.isDir()); dec.kind {
		case decProtected, decDotGit, decGit:
			c.violation(rel, detailRemove, dec.rule)
			return false, false, nil
		case decHold:
			c.holdRemoval(dirRel, dirSegs, dsc, n, &h)
			return false, true, nil
		default:
			csc = dec.sc
		}
		if len(segs) > DefaultMaxDepth {
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

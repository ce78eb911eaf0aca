//go:build unix

package workspace

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	detailCreate   = "creation of a protected path dropped"
	detailChange   = "change to a protected path dropped"
	detailRemove   = "removal of a protected path dropped"
	detailSpecial  = "special file (device, fifo or socket) not copied back"
	detailDenied   = "held for review: denied"
	detailNobody   = "held for review: nobody to review"
	detailTooMany  = "held for review: too many held changes in one commit"
	detailKept     = "not applied: the directory it replaces keeps entries that were not removed"
	detailNotShown = "not applied: changed after it was shown for review (asked about at the next commit)"
)

// Rules of the violations the .git rules report.
const (
	ruleDotGit       = "git:.git"
	ruleGitSymlink   = "git:symlink"
	ruleGitShape     = "git:repository-shape"
	ruleSymlinkInGit = "git:symlink-into-.git"
)

// maxHeld bounds the changes one commit holds for review; the rest are
// dropped and reported.
const maxHeld = 64

// Options say what a commit applies and what it drops.
type Options struct {
	// Protected patterns (Match syntax): changes to matching paths are
	// dropped and reported.
	Protected []string
	// ReviewExempt patterns: hidden paths they match are applied without
	// review.
	ReviewExempt []string
	// Review decides the changes held for review (hidden paths); nil
	// drops each of them with a violation.
	Review sandbox.ReviewFunc
	// DiskBytes bounds the total apparent size of the regular files the
	// upper layer leaves applied on the host; files past it are dropped.
	// 0 is no bound.
	DiskBytes int64
	// Files bounds the entries (files, directories, symlinks) the upper
	// layer leaves applied on the host; entries past it are dropped. 0 is
	// no bound.
	Files int64
	// Private marks a directory that is a sandboxed program's own state
	// (an agent's home, Spec.StateDirs), which no host tool opens as a
	// project: only the bounds apply (DiskBytes, Files, DefaultMaxDepth,
	// the descriptors of the walk, never following a host symlink, no
	// special files); protected patterns, the git rules, the host's git
	// configuration and the review of hidden paths do not (a home is
	// nearly all hidden paths). The directory itself must be one nobody
	// but root and this process's user can swap: no symbolic link, ours,
	// below directories only we can change (privateRoot); else the
	// commit applies nothing.
	Private bool

	// gitEnv replaces the daemon user's git environment (tests).
	gitEnv *gitEnv
	// hook, when set, is called at fixed points of a commit (tests):
	// "approved" with a held change's path when its approval is about to
	// be applied, "open" with an upper file's path before it is opened to
	// be copied.
	hook func(point, rel string)
}

// OptionsFor returns the commit options a sandbox spec asks for.
func OptionsFor(spec sandbox.Spec) Options {
	return Options{
		Protected:    spec.Protected,
		ReviewExempt: spec.ReviewExempt,
		Review:       spec.Review,
		DiskBytes:    spec.Limits.DiskBytes,
		Files:        spec.Limits.Files,
	}
}

// StateOptionsFor returns the commit options of a state directory of a
// sandbox made from spec: its limits, Private.
func StateOptionsFor(spec sandbox.Spec) Options {
	return Options{DiskBytes: spec.Limits.DiskBytes, Files: spec.Limits.Files, Private: true}
}

// compiledRules are the patterns of Options, compiled once (a Committer
// keeps them for all its commits).
type compiledRules struct{ protected, exempt *Matcher }

func compileRules(o Options) *compiledRules {
	if o.Private {
		return &compiledRules{protected: NewMatcher(nil), exempt: NewMatcher(nil)}
	}
	return &compiledRules{protected: NewMatcher(o.Protected), exempt: NewMatcher(o.ReviewExempt)}
}

// Commit applies the overlayfs upper directory upperDir onto the host
// directory workspace: new and changed files, directories and symlinks are
// copied, whiteouts (0/0 character devices) delete, and opaque directories
// replace the host directory's contents. It is the one checkpoint every
// file a sandbox writes passes before it reaches the host, and it applies
// nothing that would make the host run code:
//
//   - Changes to paths matching a protected pattern (Options.Protected,
//     and the paths the host's git configuration runs or loads: its hooks
//     directory, included files, command words; see hostgit.go) are
//     dropped, each with a Violation (Action "dropped").
//   - Inside a git directory only what git writes in normal work is
//     applied (gitrules.go); creating, replacing or removing anything
//     named .git, a symlink into a .git directory, or a directory layout
//     git would take for a repository, is dropped.
//   - Changes to hidden paths (a component starting with ".") not matched
//     by Options.ReviewExempt are held and given to Options.Review, once
//     per commit; what it does not approve is dropped and reported, and
//     an approval applies only what was shown (review.go).
//   - Options.Files and Options.DiskBytes bound what the upper layer
//     leaves applied (entries, apparent size); the directory walk is
//     bounded to DefaultMaxDepth levels and a fixed number of
//     descriptors. What is past a bound is dropped with one "resource"
//     violation per bound.
//   - Devices, fifos and sockets are never copied. Sparse files keep their
//     holes.
//
// Names are compared folded (Fold): case, Unicode forms and invisible code
// points do not get around a rule.
//
// Both trees are walked without following symlinks: every directory is
// opened with O_NOFOLLOW relative to its parent, and every change is made
// relative to it (mkdirat, renameat, unlinkat...), so a symlink on the
// host (say "a" -> /etc) is replaced, never written through. The upper
// side is read the same way: the sandbox may still be running and
// swapping entries under us. Symlinks are copied as symlinks; their
// targets are never resolved.
//
// Modes keep the permission bits only (no setuid, setgid or sticky: the
// copy runs as root and must not mint privileged binaries). New entries get
// the owner of the workspace root; replaced files keep their owner.
//
// Commit is idempotent: applying the same upper directory again changes
// nothing more (unchanged files are skipped by size, mtime and mode). It
// reports dropped changes again each time; Committer remembers what it
// already reported and what a reviewer decided.
//
// A problem with one entry does not stop the others; all of them are
// returned joined. A problem that makes the host's git configuration
// unknowable (a workspace too large to find its repositories in, a
// configuration too large to read) stops the commit before anything is
// applied.
func Commit(ctx context.Context, upperDir, workspace string, opts Options) ([]sandbox.Violation, error) {
	vs, _, err := run(ctx, upperDir, workspace, opts, compileRules(opts), nil)
	return vs, err
}

// Committer commits the same upper directory repeatedly (while the sandbox
// runs, and once more at the end). It returns each dropped change only the
// first time it is seen in a given state, so one write to CLAUDE.md is one
// violation however often it is committed, and it remembers the
// reviewer's answer for a held change, so an unchanged entry is not asked
// about again. Options.Protected and Options.ReviewExempt are compiled at
// the first Commit.
type Committer struct {
	Upper, Workspace string
	Options

	mu      sync.Mutex
	rules   *compiledRules
	seen    map[string]string // target → fingerprint of the dropped upper entry
	answers memory
}

// Commit runs Commit and filters out violations already reported for an
// unchanged upper entry.
func (c *Committer) Commit(ctx context.Context) ([]sandbox.Violation, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen, c.answers = map[string]string{}, memory{}
		c.rules = compileRules(c.Options)
	}
	vs, fps, err := run(ctx, c.Upper, c.Workspace, c.Options, c.rules, c.answers)
	var fresh []sandbox.Violation
	for i, v := range vs {
		fp := v.Detail + "|" + v.Rule + "|" + fps[i]
		if c.seen[v.Target] == fp {
			continue
		}
		c.seen[v.Target] = fp
		fresh = append(fresh, v)
	}
	return fresh, err
}

// memory is a Committer's record of the reviewer's answers, by the key of
// the held change (its path, operation and the fingerprints of what it
// covers).
type memory map[string]*answer

// answer is a reviewer's decision about one held change, with the hashes
// of the file contents it was shown.
type answer struct {
	approved bool
	content  map[string][sha256.Size]byte
}

func statFP(st *unix.Stat_t) string {
	return fmt.Sprintf("%o/%d/%d.%d/%d.%d/%d", st.Mode, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec, st.Ino)
}

// commit is the state of one run.
type commit struct {
	ctx       context.Context
	opts      Options
	memory    memory // nil: remember nothing
	protected *Matcher
	gitRules  *Matcher // the host's git configuration's (hostgit.go)
	exempt    *Matcher
	up, host  *dirCache
	uid, gid  int // owner given to new entries
	rootScope scope

	files, bytes int64 // spent against Options.Files and DiskBytes
	over         [3]overflow
	diffCells    int // spent against maxDiffCells

	held       []*held
	settled    bool     // the review is over: nothing more is held
	retry      []retry  // entries to apply again after the review
	pending    []string // host directories whose removal waits for held deletions
	violations []sandbox.Violation
	reported   map[string]bool
	errs       []error
}

// run is one commit. With each violation it returns a fingerprint of the
// upper entry it is about ("absent" when there is none), read without
// following a symlink.
func run(ctx context.Context, upperDir, workspace string, opts Options, rules *compiledRules, mem memory) ([]sandbox.Violation, []string, error) {
	var root string
	var err error
	openFlags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
	if opts.Private {
		// A state directory must be one nobody else can swap (see
		// privateRoot); its resolved path is opened, never following
		// a link at the end.
		root, err = privateRoot(workspace)
		openFlags |= unix.O_NOFOLLOW
	} else {
		root, err = filepath.EvalSymlinks(workspace)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("workspace: resolve %s: %w", workspace, err)
	}
	hostFd, err := unix.Open(root, openFlags, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("workspace: open %s: %w", root, err)
	}
	defer closeFd(hostFd)
	upFd, err := unix.Open(upperDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("workspace: open upper dir %s: %w", upperDir, err)
	}
	defer closeFd(upFd)
	var rootSt unix.Stat_t
	if err := unix.Fstat(hostFd, &rootSt); err != nil {
		return nil, nil, fmt.Errorf("workspace: stat %s: %w", root, err)
	}
	c := &commit{
		ctx: ctx, opts: opts, memory: mem,
		protected: rules.protected,
		exempt:    rules.exempt,
		gitRules:  NewMatcher(nil),
		up:        &dirCache{root: upFd},
		host:      &dirCache{root: hostFd},
		uid:       int(rootSt.Uid), gid: int(rootSt.Gid),
	}
	defer c.up.close()
	defer c.host.close()
	c.rootScope = rootScope(root)

	if opts.Private {
		c.rootScope = scope{reviewed: true, private: true}
	} else {
		// Every repository the host has in the workspace, before
		// anything is applied: what their configuration runs is
		// protected. One that cannot be found means a configuration
		// that cannot be read: nothing is applied.
		repos, err := findRepos(c.host)
		if err != nil {
			return nil, nil, fmt.Errorf("workspace: %s: %w; nothing was applied", root, err)
		}
		env := defaultGitEnv()
		if opts.gitEnv != nil {
			env = *opts.gitEnv
		}
		alias, _ := filepath.Abs(workspace)
		rules, err := hostGitRules(root, alias, repos, int(rootSt.Uid), env)
		if err != nil {
			return nil, nil, fmt.Errorf("workspace: %s: %w; nothing was applied", root, err)
		}
		for _, r := range rules {
			c.gitRules.Add(r.pattern, r.rule)
		}
	}

	c.prepass()
	c.walkRoot()
	c.settleHeld()
	c.finishPending()
	for _, r := range c.retry {
		c.walk(r.dir, []string{r.name})
	}
	c.reportOverflows()
	if err := ctx.Err(); err != nil {
		c.errs = append(c.errs, fmt.Errorf("workspace: commit interrupted: %w", err))
	}
	fps := make([]string, len(c.violations))
	for i, v := range c.violations {
		fps[i] = c.upperFP(v.Target)
	}
	return c.violations, fps, errors.Join(c.errs...)
}

// upperFP identifies the state of the upper entry at rel, reached through
// the upper cache (no symlink followed on the way or at the end).
func (c *commit) upperFP(rel string) string {
	dir, name := splitRel(rel)
	fd, err := c.up.open(dir)
	if err != nil {
		return "absent"
	}
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return "absent"
	}
	return statFP(&st)
}

// protectedRule returns the rule of the first protected pattern (the
// options', then the host's git configuration's) matching folded segs.
func (c *commit) protectedRule(segs []string) (string, bool) {
	if r, ok := c.protected.rule(segs); ok {
		return r, true
	}
	return c.gitRules.rule(segs)
}

// rootScope is the scope of the workspace root's entries: inside a git
// directory when the workspace is one or lies in one.
func rootScope(root string) scope {
	segs := strings.Split(strings.Trim(root, "/"), "/")
	for i := len(segs) - 1; i >= 0; i-- {
		if Fold(segs[i]) == gitDotGit {
			inner := make([]string, 0, len(segs)-i-1)
			for _, s := range segs[i+1:] {
				inner = append(inner, Fold(s))
			}
			return scope{git: &gitScope{prefix: inner}}
		}
	}
	if bareShaped(root) {
		return scope{git: &gitScope{prefix: []string{}}}
	}
	return scope{}
}

// scope is what a directory's entries are judged by.
type scope struct {
	// git is set inside a git directory: the allowlist applies.
	git *gitScope
	// reviewed: hidden components need no review here (the path is
	// exempt, or a reviewer approved it).
	reviewed bool
	// private: a state directory (Options.Private); no git rules.
	private bool
	// approval is set below a held change a reviewer approved: only the
	// entries it covered, unchanged, are applied (review.go).
	approval *approval
}

// gitScope locates a git directory: the inner path of an entry with folded
// segments segs is prefix + segs[start:].
type gitScope struct {
	prefix []string
	start  int
}

func (g *gitScope) inner(segs []string) []string {
	out := make([]string, 0, len(g.prefix)+len(segs)-g.start)
	out = append(out, g.prefix...)
	return append(out, segs[g.start:]...)
}

// Resource bounds, in the order of commit.over.
const (
	overFiles = iota
	overDisk
	overDepth
)

type overflow struct {
	n     int
	first string
}

func (c *commit) overflowed(kind int, rel string) {
	o := &c.over[kind]
	if o.n == 0 {
		o.first = rel
	}
	o.n++
}

// spend takes one entry of size bytes from the budgets; false (and the
// entry counted as dropped) when it does not fit.
func (c *commit) spend(rel string, size int64) bool {
	if c.opts.Files > 0 && c.files+1 > c.opts.Files {
		c.overflowed(overFiles, rel)
		return false
	}
	if c.opts.DiskBytes > 0 && size > 0 && c.bytes+size > c.opts.DiskBytes {
		c.overflowed(overDisk, rel)
		return false
	}
	c.files++
	c.bytes += size
	return true
}

func (c *commit) reportOverflows() {
	details := [3]string{
		fmt.Sprintf("file-count limit (%d entries) reached", c.opts.Files),
		fmt.Sprintf("disk limit (%d bytes of apparent size) reached", c.opts.DiskBytes),
		fmt.Sprintf("deeper than %d levels", DefaultMaxDepth),
	}
	rules := [3]string{"limit:files", "limit:disk", "limit:depth"}
	for i, o := range c.over {
		if o.n == 0 {
			continue
		}
		c.violations = append(c.violations, sandbox.Violation{
			Kind:   sandbox.ViolationResource,
			Detail: fmt.Sprintf("%s: %d entries not applied, a directory with everything in it (the first is the target)", details[i], o.n),
			Target: o.first,
			Rule:   rules[i],
			Action: "dropped",
		})
	}
}

// violation reports a dropped change, once per commit (a held directory
// is looked at again when it is applied).
func (c *commit) violation(rel, detail, rule string) {
	key := rel + "\x00" + detail + "\x00" + rule
	if c.reported[key] {
		return
	}
	if c.reported == nil {
		c.reported = map[string]bool{}
	}
	c.reported[key] = true
	c.violations = append(c.violations, sandbox.Violation{
		Kind:   sandbox.ViolationFilesystem,
		Detail: detail,
		Target: rel,
		Rule:   rule,
		Action: "dropped",
	})
}

// failUpper is fail for a read of the upper layer at rel, unless what was
// read is gone: a sandbox still running (an agent's home between turns,
// whose CLI writes, renames and removes its lock and temporary files) may
// remove an entry it listed a moment before. An entry gone from the upper
// layer has nothing to apply, and the next commit sees what is there then.
func (c *commit) failUpper(rel string, err error) {
	if gone(rel, err) {
		return
	}
	c.fail(rel, err)
}

// gone reports whether err says the upper entry rel no longer exists; the
// root of the upper layer ("") is never gone.
func gone(rel string, err error) bool {
	return rel != "" && errors.Is(err, fs.ErrNotExist)
}

func (c *commit) fail(rel string, err error) {
	if rel == "" {
		rel = "."
	}
	c.errs = append(c.errs, fmt.Errorf("workspace: %s: %w", rel, err))
}

func detailFor(hostExists bool) string {
	if hostExists {
		return detailChange
	}
	return detailCreate
}

// upDir and hostDir return a descriptor of the directory at rel that the
// caller owns (a duplicate of the cache's), so no later cache operation
// can close it under the caller.
func (c *commit) upDir(rel string) (int, error)   { return dupDir(c.up, rel) }
func (c *commit) hostDir(rel string) (int, error) { return dupDir(c.host, rel) }

func dupDir(d *dirCache, rel string) (int, error) {
	fd, err := d.open(rel)
	if err != nil {
		return -1, err
	}
	return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
}

// closeFd closes a descriptor Commit only reads through (a directory, an
// upper-layer file): closing it loses no data, so its error is dropped.
func closeFd(fd int) {
	if fd >= 0 {
		_ = unix.Close(fd)
	}
}

// readDirNames lists a directory open at fd, sorted, without consuming
// fd. The order makes the budgets deterministic.
func readDirNames(fd int) ([]string, error) {
	dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dfd), ".")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	slices.Sort(names)
	return names, err
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// appendSeg returns segs with s appended, never sharing segs' array.
func appendSeg(segs []string, s string) []string {
	out := make([]string, len(segs), len(segs)+1)
	copy(out, segs)
	return append(out, s)
}

package workspace

import (
	"context"
	"errors"
	"fmt"
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
	detailCreate  = "creation of a protected path dropped"
	detailChange  = "change to a protected path dropped"
	detailRemove  = "removal of a protected path dropped"
	detailSpecial = "special file (device, fifo or socket) not copied back"
	detailDenied  = "held for review: denied"
	detailNobody  = "held for review: nobody to review"
	detailTooMany = "held for review: too many held changes in one commit"
	detailKept    = "not applied: the directory it replaces keeps entries that were not removed"
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
	// MaxDepth is how many levels below the workspace root are applied;
	// 0 means DefaultMaxDepth.
	MaxDepth int
	// Private marks a directory that is a sandboxed program's own state
	// (an agent's home, Spec.StateDirs), which no host tool opens as a
	// project: only the bounds apply (DiskBytes, Files, MaxDepth, the
	// descriptors of the walk, never following a host symlink, no special
	// files); protected patterns, the git rules, the host's git
	// configuration and the review of hidden paths do not (a home is
	// nearly all hidden paths). The directory itself must be one nobody
	// but root and this process's user can swap: no symbolic link, ours,
	// below directories only we can change (privateRoot); else the
	// commit applies nothing.
	Private bool

	// gitEnv replaces the daemon user's git environment (tests).
	gitEnv *gitEnv
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

// Commit applies the overlayfs upper directory upperDir onto the host
// directory workspace: new and changed files, directories and symlinks are
// copied, whiteouts (0/0 character devices) delete, and opaque directories
// replace the host directory's contents. It is the one checkpoint every
// file a sandbox writes passes before it reaches the host, and it applies
// nothing that would make the host run code:
//
//   - Changes to paths matching a protected pattern (Options.Protected,
//     and the paths the host's git configuration runs or loads: its hooks
//     directory, included files, command paths; see hostgit.go) are
//     dropped, each with a Violation (Action "dropped").
//   - Inside a git directory only what git writes in normal work is
//     applied (gitrules.go); creating, replacing or removing anything
//     named .git, a symlink into a .git directory, or a directory layout
//     git would take for a repository, is dropped.
//   - Changes to hidden paths (a component starting with ".") not matched
//     by Options.ReviewExempt are held and given to Options.Review, once
//     per commit; what it does not approve is dropped and reported.
//   - Options.Files and Options.DiskBytes bound what the upper layer
//     leaves applied (entries, apparent size); the directory walk is
//     bounded to MaxDepth levels and a fixed number of descriptors. What
//     is past a bound is dropped with one "resource" violation per bound.
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
// returned joined.
func Commit(ctx context.Context, upperDir, workspace string, opts Options) ([]sandbox.Violation, error) {
	var ask asker
	if opts.Review != nil {
		ask = func(ctx context.Context, changes []sandbox.Change, _ []string) []bool {
			return opts.Review(ctx, changes)
		}
	}
	return run(ctx, upperDir, workspace, opts, ask)
}

// asker is Review with each change's key (its path, operation and the
// fingerprint of what it would apply), so a Committer can remember answers.
type asker func(ctx context.Context, changes []sandbox.Change, keys []string) []bool

// Committer commits the same upper directory repeatedly (while the sandbox
// runs, and once more at the end). It returns each dropped change only the
// first time it is seen in a given state, so one write to CLAUDE.md is one
// violation however often it is committed, and it remembers the
// reviewer's answer for a held change, so an unchanged entry is not asked
// about again.
type Committer struct {
	Upper, Workspace string
	Options

	mu      sync.Mutex
	seen    map[string]string // target → fingerprint of the dropped upper entry
	answers map[string]bool   // held change key → the reviewer's answer
}

// Commit runs Commit and filters out violations already reported for an
// unchanged upper entry.
func (c *Committer) Commit(ctx context.Context) ([]sandbox.Violation, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen, c.answers = map[string]string{}, map[string]bool{}
	}
	var ask asker
	if c.Review != nil {
		ask = c.remembering
	}
	vs, err := run(ctx, c.Upper, c.Workspace, c.Options, ask)
	var fresh []sandbox.Violation
	for _, v := range vs {
		fp := v.Detail + "|" + v.Rule + "|" + fingerprint(filepath.Join(c.Upper, filepath.FromSlash(v.Target)))
		if c.seen[v.Target] == fp {
			continue
		}
		c.seen[v.Target] = fp
		fresh = append(fresh, v)
	}
	return fresh, err
}

// remembering asks Review only about changes it has no answer for.
func (c *Committer) remembering(ctx context.Context, changes []sandbox.Change, keys []string) []bool {
	answers := make([]bool, len(changes))
	var ask []sandbox.Change
	var at []int
	for i, k := range keys {
		if a, ok := c.answers[k]; ok {
			answers[i] = a
			continue
		}
		ask = append(ask, changes[i])
		at = append(at, i)
	}
	if len(ask) == 0 {
		return answers
	}
	got := c.Review(ctx, ask)
	for j, i := range at {
		a := j < len(got) && got[j]
		answers[i] = a
		// A reviewer that did not answer in time (ctx done) is not an
		// answer to remember.
		if ctx.Err() == nil {
			c.answers[keys[i]] = a
		}
	}
	return answers
}

// fingerprint identifies the state of an upper entry without following it.
func fingerprint(p string) string {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return "absent"
	}
	return statFP(&st)
}

func statFP(st *unix.Stat_t) string {
	return fmt.Sprintf("%o/%d/%d.%d/%d.%d/%d", st.Mode, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec, st.Ino)
}

// commit is the state of one run.
type commit struct {
	ctx       context.Context
	opts      Options
	ask       asker
	protected *Matcher
	exempt    *Matcher
	maxDepth  int
	up, host  *dirCache
	uid, gid  int // owner given to new entries
	rootScope scope

	files, bytes int64 // spent against Options.Files and DiskBytes
	over         [3]overflow

	held       []*held
	settled    bool     // the review is over: nothing more is held
	retry      []retry  // entries to apply again after the review
	pending    []string // host directories whose removal waits for held deletions
	violations []sandbox.Violation
	reported   map[string]bool
	errs       []error
}

func run(ctx context.Context, upperDir, workspace string, opts Options, ask asker) ([]sandbox.Violation, error) {
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
		return nil, fmt.Errorf("workspace: resolve %s: %w", workspace, err)
	}
	hostFd, err := unix.Open(root, openFlags, 0)
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
	c := &commit{
		ctx: ctx, opts: opts, ask: ask,
		exempt:   NewMatcher(opts.ReviewExempt),
		maxDepth: opts.MaxDepth,
		up:       &dirCache{root: upFd},
		host:     &dirCache{root: hostFd},
		uid:      int(rootSt.Uid), gid: int(rootSt.Gid),
	}
	if c.maxDepth <= 0 {
		c.maxDepth = DefaultMaxDepth
	}
	defer c.up.close()
	defer c.host.close()
	c.rootScope = rootScope(root)

	repoDirs := c.prepass()
	if opts.Private {
		c.protected = NewMatcher(nil)
		c.rootScope = scope{reviewed: true, private: true}
	} else {
		c.protected = NewMatcher(opts.Protected)
		env := defaultGitEnv()
		if opts.gitEnv != nil {
			env = *opts.gitEnv
		}
		alias, _ := filepath.Abs(workspace)
		for _, r := range hostGitRules(root, alias, repoDirs, env) {
			c.protected.Add(r.pattern, r.rule)
		}
	}

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
	return c.violations, errors.Join(c.errs...)
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
		fmt.Sprintf("deeper than %d levels", c.maxDepth),
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

//go:build unix

package workspace

import (
	"strings"

	"golang.org/x/sys/unix"
)

// The .git rules. Git executes configuration and hooks from wherever a
// repository's git directory says (config, hooks/, core.hooksPath, a
// commondir or gitdir indirection, the exec lines of an interrupted
// rebase), so the commit lets into a git directory only what git itself
// writes while one works in the sandbox, and never lets the sandbox create
// or redirect a git directory.
//
// What git 2.39 writes during normal work (init, add, commit, branch, tag,
// merge, rebase, cherry-pick, revert, stash, reset, gc, notes, fetch) was
// listed by running each of them in a fresh repository; the allowlist is
// the part of it that is data:
//
//   - objects/** (loose objects, packs and their indexes, commit-graph,
//     multi-pack-index, objects/info/packs), but not objects/info/alternates
//     or objects/info/http-alternates, which make git read objects from
//     another directory (anywhere on the host);
//   - refs/**, packed-refs and logs/** (branches, tags, notes, the stash and
//     their reflogs: each names an object id or another ref);
//   - index (and split-index sharedindex.* files): paths, modes and object
//     ids of the staging area;
//   - HEAD and the *_HEAD files (ORIG_HEAD, FETCH_HEAD, MERGE_HEAD,
//     CHERRY_PICK_HEAD, REVERT_HEAD, REBASE_HEAD, BISECT_HEAD...), and
//     AUTO_MERGE: object ids or symbolic refs;
//   - COMMIT_EDITMSG, MERGE_MSG, MERGE_MODE, SQUASH_MSG, TAG_EDITMSG: the
//     text of messages;
//   - shallow: the object ids a shallow fetch stopped at;
//   - info/refs: the list of refs "git gc" writes for dumb transports
//     (update-server-info); the rest of info/ is not allowed.
//
// Everything else is dropped and reported: config and config.worktree
// (core.fsmonitor, core.hooksPath, core.sshCommand, filters, aliases,
// include.path all run or load things), hooks/, commondir and gitdir
// (redirect git to a directory the sandbox filled), the rest of info/
// (attributes that pick filter drivers, sparse-checkout, grafts, exclude),
// worktrees/ (each a
// gitdir with its own commondir), rebase-merge/, rebase-apply/ and
// sequencer/ (their todo lists hold "exec" lines that "git rebase
// --continue" runs), rr-cache/, remotes/ and branches/ (URLs), lock files,
// and every symlink. The nested git directories of submodules,
// .git/modules/<name>/ (a name may hold slashes), follow the same list.
// Because a name may hold slashes, .git/modules/a/refs/config is both a
// ref of submodule "a" and the config of a submodule "a/refs": so no
// directory inside a git directory's data may take a git directory's
// layout (HEAD with objects and refs, or with commondir; git reads the
// config of no other directory), and one the host already has is judged
// as a git directory itself (shape, gitBoundary).
//
// A commit made in the sandbox therefore reaches the host, while
// anything git would execute stays out. Configuration changes (git config,
// git remote add, branch upstreams) do not: they are the sandbox's to
// lose.

// gitDotGit is the folded name of a git directory.
const gitDotGit = ".git"

// gitRootFiles are the allowlisted files directly in a git directory
// (folded). Names ending in "_head" are allowlisted too.
var gitRootFiles = map[string]bool{
	"head": true, "auto_merge": true, "packed-refs": true, "index": true, "shallow": true,
	"commit_editmsg": true, "merge_msg": true, "merge_mode": true, "squash_msg": true, "tag_editmsg": true,
}

// gitFileAllowed reports whether a regular file at the folded path inner,
// relative to a git directory, is one git writes in normal work.
func gitFileAllowed(inner []string) bool {
	if gitRootAllowed(inner) {
		return true
	}
	// .git/modules/<name>/<allowed>, where <name> is one or more segments
	// (nested submodules included: modules/a/modules/b/HEAD ends in an
	// allowed suffix too).
	if len(inner) >= 3 && inner[0] == "modules" {
		for k := 2; k < len(inner); k++ {
			if gitRootAllowed(inner[k:]) {
				return true
			}
		}
	}
	return false
}

func gitRootAllowed(inner []string) bool {
	if len(inner) == 0 {
		return false
	}
	if strings.HasSuffix(inner[len(inner)-1], ".lock") {
		return false
	}
	switch inner[0] {
	case "objects":
		if len(inner) == 3 && inner[1] == "info" && (inner[2] == "alternates" || inner[2] == "http-alternates") {
			return false
		}
		return len(inner) > 1
	case "refs", "logs":
		return len(inner) > 1
	case "info":
		return len(inner) == 2 && inner[1] == "refs"
	}
	if len(inner) != 1 {
		return false
	}
	n := inner[0]
	return gitRootFiles[n] || strings.HasSuffix(n, "_head") || strings.HasPrefix(n, "sharedindex.")
}

// gitDirAllowed reports whether a directory at the folded path inner,
// relative to a git directory, may hold allowlisted files (so it may be
// created, and its content is judged file by file).
func gitDirAllowed(inner []string) bool {
	if len(inner) == 0 {
		return true
	}
	switch inner[0] {
	case "objects":
		return len(inner) != 3 || inner[1] != "info" || (inner[2] != "alternates" && inner[2] != "http-alternates")
	case "refs", "logs", "modules":
		return true
	case "info":
		return len(inner) == 1 // for info/refs only
	}
	return false
}

// gitShapeNames are the names that make a directory a git directory for
// git (is_git_directory in setup.c: HEAD plus objects and refs, or HEAD
// plus commondir), folded, with the spelling git looks for. Git takes such
// a directory, found at or above where it runs, or named by a .git file or
// --git-dir, for a repository and reads its config (core.worktree can then
// give it a working tree, and core.fsmonitor a command to run on "git
// status").
var gitShapeNames = map[string]string{"head": "HEAD", "objects": "objects", "refs": "refs", "commondir": "commondir"}

// gitShape reports whether a directory holding names (folded) looks like a
// git directory.
func gitShape(has func(string) bool) bool {
	return has("head") && (has("commondir") || (has("objects") && has("refs")))
}

// shapeAt returns which of gitShapeNames the directory open at fd has now.
func shapeAt(fd int) func(folded string) bool {
	has := map[string]bool{}
	for f, name := range gitShapeNames {
		var st unix.Stat_t
		has[f] = unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	}
	return func(f string) bool { return has[f] }
}

// bareShapedFd reports whether the directory open at fd has the layout of
// a git directory.
func bareShapedFd(fd int) bool { return gitShape(shapeAt(fd)) }

// bareShaped is bareShapedFd for the directory at path dir.
func bareShaped(dir string) bool {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer closeFd(fd)
	return bareShapedFd(fd)
}

// gitDataDirs are the directories of a git directory the allowlist lets
// hold files (folded).
var gitDataDirs = map[string]bool{"objects": true, "refs": true, "logs": true, "info": true}

// gitBoundary reports whether the directory at the folded path inner,
// relative to a git directory, is a git directory's own top: the git
// directory itself, or a submodule's (modules/<name>, the name one or
// more segments, none of them one of gitDataDirs; nested submodules
// included). Every other directory in a git directory holds data and
// must never take a git directory's layout (see shape).
func gitBoundary(inner []string) bool {
	if len(inner) == 0 {
		return true
	}
	if inner[0] != "modules" || len(inner) < 2 {
		return false
	}
	for _, s := range inner[1:] {
		if gitDataDirs[s] {
			return false
		}
	}
	return true
}

// targetIntoGit reports whether a symlink target names a .git directory
// or something in one.
func targetIntoGit(target string) bool {
	for _, s := range strings.Split(target, "/") {
		if Fold(s) == gitDotGit {
			return true
		}
	}
	return false
}

//go:build unix

package workspace

import (
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultMaxDepth is how many levels below the workspace root a commit
// applies, and reads of the host workspace to find its repositories
// (findRepos: a deeper host tree fails the commit). Deeper upper entries
// are dropped and reported (one resource violation per commit). Real
// trees stay far below it (node_modules, Java packages and generated code
// rarely pass 40 levels); Linux cannot even name a path much deeper than
// 2000 levels (PATH_MAX).
const DefaultMaxDepth = 256

// dirCacheSize bounds the directory descriptors one side of a commit
// holds, whatever the shape of the tree.
const dirCacheSize = 16

// dirCache opens directories of one tree (the upper layer or the host
// workspace) by their relative path, never following a symlink, holding at
// most dirCacheSize descriptors: the chain of the most recently opened
// path's ancestors. A walk that moves through the tree in order finds the
// parent it needs in the chain; one that returns more than dirCacheSize
// levels up reopens from the root, one openat per level. So a commit holds
// a bounded number of descriptors (not one per level) and, with the depth
// bound, a bounded amount of work per entry.
type dirCache struct {
	root  int // owned by the caller
	chain []cachedDir
}

type cachedDir struct {
	rel string
	fd  int
}

// open returns a descriptor of the directory at rel ("" is the root). It
// stays valid until the next open of a path that is not rel or below it,
// or until forget or close.
func (d *dirCache) open(rel string) (int, error) {
	if rel == "" {
		return d.root, nil
	}
	// Keep the part of the chain that is rel or its ancestors.
	keep := 0
	for keep < len(d.chain) && isPrefixDir(d.chain[keep].rel, rel) {
		keep++
	}
	d.truncate(keep)
	fd, at := d.root, ""
	if keep > 0 {
		fd, at = d.chain[keep-1].fd, d.chain[keep-1].rel
	}
	if at == rel {
		return fd, nil
	}
	rest := rel
	if at != "" {
		rest = rel[len(at)+1:]
	}
	for _, name := range strings.Split(rest, "/") {
		nfd, err := openDir(fd, name)
		if err != nil {
			return -1, err
		}
		at = join(at, name)
		if len(d.chain) == dirCacheSize {
			// Drop the shallowest: a walk comes back to it least soon.
			closeFd(d.chain[0].fd)
			d.chain = append(d.chain[:0], d.chain[1:]...)
		}
		d.chain = append(d.chain, cachedDir{rel: at, fd: nfd})
		fd = nfd
	}
	return fd, nil
}

// forget drops rel and everything below it from the cache (the host
// directory is being removed or replaced).
func (d *dirCache) forget(rel string) {
	for i, c := range d.chain {
		if isPrefixDir(rel, c.rel) {
			d.truncate(i)
			return
		}
	}
}

func (d *dirCache) truncate(n int) {
	for _, c := range d.chain[n:] {
		closeFd(c.fd)
	}
	d.chain = d.chain[:n]
}

// close closes every cached descriptor (not the root).
func (d *dirCache) close() { d.truncate(0) }

// isPrefixDir reports whether dir is p or an ancestor of p.
func isPrefixDir(dir, p string) bool {
	if dir == "" {
		return true
	}
	return dir == p || (strings.HasPrefix(p, dir) && p[len(dir)] == '/')
}

func openDir(dirFd int, name string) (int, error) {
	return unix.Openat(dirFd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

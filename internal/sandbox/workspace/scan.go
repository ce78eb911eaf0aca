//go:build unix

package workspace

import (
	"fmt"
)

// scanEntry is one upper entry a read-only scan visits, with what the host
// has at its place.
type scanEntry struct {
	e    *upperEntry
	h    hostInfo
	segs []string // folded
}

// scanFrame is one directory of a scan.
type scanFrame struct {
	rel    string
	segs   []string
	onHost bool
	names  []string
	i      int
	post   func()
}

// scan walks the upper subtree below the directory rel (its folded
// segments segs; onHost when the host has that directory too), in order,
// without changing anything. pre is called for each entry and returns
// whether to descend into it (directories only); post, when not nil, is
// called after a directory's entries. Entries deeper than the depth bound
// are not visited; light is classify's. A scan holds no descriptor between
// entries, so it may nest inside another walk.
func (c *commit) scan(rel string, segs []string, onHost, light bool, pre func(*scanEntry) bool, post func(*scanEntry)) {
	names, err := c.upNames(rel)
	if err != nil {
		c.failUpper(rel, fmt.Errorf("read upper dir: %w", err))
		return
	}
	stack := []*scanFrame{{rel: rel, segs: segs, onHost: onHost, names: names}}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		if f.i >= len(f.names) || c.ctx.Err() != nil {
			stack = stack[:len(stack)-1]
			if f.post != nil {
				f.post()
			}
			continue
		}
		name := f.names[f.i]
		f.i++
		x, err := c.look(f.rel, f.segs, f.onHost, name, light)
		if err != nil {
			c.fail(join(f.rel, name), err)
			continue
		}
		if x == nil || !pre(x) || x.e.kind != kindDir {
			continue
		}
		names, err := c.upNames(x.e.rel)
		if err != nil {
			c.failUpper(x.e.rel, fmt.Errorf("read upper dir: %w", err))
			continue
		}
		child := &scanFrame{rel: x.e.rel, segs: x.segs, onHost: x.h.isDir() && !x.e.opaque, names: names}
		if post != nil {
			child.post = func() { post(x) }
		}
		stack = append(stack, child)
	}
}

// look classifies the upper entry name of the directory rel and looks up
// the host's, when onHost (the host has the directory; light: see
// classify). It returns nil for an entry past the depth bound, and for
// one gone from the upper layer since it was listed (see failUpper). It uses the
// caches' descriptors directly: nothing between opening and using them
// touches a cache.
func (c *commit) look(dirRel string, dirSegs []string, onHost bool, name string, light bool) (*scanEntry, error) {
	if len(dirSegs)+1 > DefaultMaxDepth {
		return nil, nil
	}
	ufd, err := c.up.open(dirRel)
	if err != nil {
		if gone(dirRel, err) {
			return nil, nil
		}
		return nil, fmt.Errorf("open upper dir: %w", err)
	}
	e, err := classify(ufd, name, join(dirRel, name), light)
	if err != nil {
		if gone(name, err) {
			return nil, nil
		}
		return nil, err
	}
	x := &scanEntry{e: e, segs: appendSeg(dirSegs, Fold(name))}
	if onHost {
		hfd, err := c.host.open(dirRel)
		if err != nil {
			return nil, fmt.Errorf("open host dir: %w", err)
		}
		if x.h, err = lookupHost(hfd, name); err != nil {
			return nil, err
		}
	}
	return x, nil
}

func (c *commit) upNames(rel string) ([]string, error) {
	fd, err := c.upDir(rel)
	if err != nil {
		return nil, err
	}
	defer closeFd(fd)
	return readDirNames(fd)
}

// prepass reads the whole upper layer once before anything is applied,
// and counts against the budgets what is already on the host unchanged
// (applied by an earlier commit of the same upper layer, or never
// changed): the budgets bound what the upper layer leaves applied, not
// what one commit writes.
func (c *commit) prepass() {
	c.scan("", nil, true, true, func(x *scanEntry) bool {
		if x.e.kind != kindWhiteout && x.e.kind != kindSpecial && (same(x.e, &x.h) || (x.e.kind == kindDir && x.h.isDir())) {
			c.files++
			if x.e.kind == kindFile {
				c.bytes += x.e.st.Size
			}
		}
		return true
	}, nil)
}

// reportTree reports every change below the protected upper directory at
// rel: each entry that differs from the host, and a directory itself when
// nothing below it was reported but it is new or replaces a non-directory.
// rule is the directory's rule; an entry matching a pattern of its own is
// reported with that one.
func (c *commit) reportTree(x *scanEntry, rule string) {
	type mark struct{ before int }
	marks := map[string]mark{}
	c.scan(x.e.rel, x.segs, x.h.isDir() && !x.e.opaque, false, func(y *scanEntry) bool {
		r, ok := c.protectedRule(y.segs)
		if !ok {
			r = rule
		}
		switch y.e.kind {
		case kindDir:
			marks[y.e.rel] = mark{len(c.violations)}
			return true
		case kindWhiteout:
			if y.h.exists {
				c.violation(y.e.rel, detailRemove, r)
			}
		default:
			if !same(y.e, &y.h) {
				c.violation(y.e.rel, detailFor(y.h.exists), r)
			}
		}
		return false
	}, func(y *scanEntry) {
		r, ok := c.protectedRule(y.segs)
		if !ok {
			r = rule
		}
		if len(c.violations) == marks[y.e.rel].before && !y.h.isDir() {
			c.violation(y.e.rel, detailFor(y.h.exists), r)
		}
	})
}

// shape decides, for a directory about to be walked, whether its entries
// are in a git directory (the host already has one there) and which of
// its upper entries would turn it into one (gitShape): those are dropped.
// Inside a git directory the same holds for every directory but a git
// directory's own top (gitBoundary): a submodule's name may hold slashes,
// so a directory in a repository's data (modules/a/refs) must not become
// a repository git would read a config from.
func (c *commit) shape(d *dirState, names []string, opaque bool) {
	if d.scope.private || (d.scope.git != nil && gitBoundary(d.scope.git.inner(d.segs))) {
		return
	}
	upper := map[string]bool{}    // markers the upper layer has
	whiteout := map[string]bool{} // markers it deletes
	var candidates []string
	for _, n := range names {
		if gitShapeNames[Fold(n)] != "" {
			candidates = append(candidates, n)
		}
	}
	if len(candidates) == 0 {
		return
	}
	ufd, err := c.upDir(d.rel)
	if err != nil {
		return
	}
	defer closeFd(ufd)
	folded := map[string]string{}
	for _, n := range candidates {
		e, err := classify(ufd, n, join(d.rel, n), false)
		if err != nil {
			continue
		}
		f := Fold(n)
		if e.kind == kindWhiteout {
			whiteout[f] = true
		} else {
			upper[f] = true
			folded[n] = f
		}
	}
	host := func(string) bool { return false }
	if d.onHost {
		if hfd, err := c.hostDir(d.rel); err == nil {
			host = shapeAt(hfd)
			closeFd(hfd)
		}
	}
	if gitShape(host) {
		// The host has a git directory here (a bare repository, or one
		// inside another's data): its entries are judged by the
		// allowlist as a git directory's.
		d.scope.git = &gitScope{start: len(d.segs), prefix: []string{}}
		return
	}
	merged := func(f string) bool { return upper[f] || (host(f) && !whiteout[f] && !opaque) }
	if !gitShape(merged) {
		return
	}
	d.shapeDrop = map[string]bool{}
	for n, f := range folded {
		if !host(f) || opaque {
			d.shapeDrop[n] = true
		}
	}
}

package workspace

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/agent/textdiff"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Hidden paths. No list of dangerous names is ever complete: editors,
// shells, package managers, build tools and agents read many more
// dot-files and dot-directories from a project than any list names. So a
// change to a hidden path (a component starting with "."; see hidden) that
// no rule above settles is not applied silently: the commit holds it and
// asks Options.Review, once per commit, about every held change. A new or
// changed hidden file is one change (with a unified diff when it is text),
// a hidden directory is one change covering everything below it (with a
// list of what changed), and so is a removal. What the reviewer approves is
// applied (protected paths and the .git rules still apply inside); the
// rest is dropped and reported with the rule "review:hidden:<name>".
// Options.ReviewExempt names hidden paths applied without review; the
// exemption is decided at the outermost hidden component (".config/x" is
// reviewed with ".config").

// Bounds of what a held change shows.
const (
	maxDiffInput   = 256 << 10 // larger files get a one-line summary
	maxDiff        = 16 << 10  // a longer diff is cut
	maxSummaryRows = 50        // lines listing a held directory's changes
)

// held is one change held for review.
type held struct {
	change sandbox.Change
	key    string // path, operation and fingerprint of what would be applied
	dir    dirState
	name   string
	// removal: the change removes a host entry that has no upper entry
	// (it is below a directory the sandbox removed or replaced).
	removal bool
}

// hold holds the upper entry x of directory d for review, unless applying
// it would change nothing.
func (c *commit) hold(d *dirState, x *scanEntry) {
	if c.settled {
		return
	}
	ch, key, ok := c.describe(x)
	if !ok {
		return
	}
	c.held = append(c.held, &held{change: ch, key: key, dir: *d, name: x.e.name})
}

// holdRemoval holds the removal of the host entry name (stat h) of the
// directory dirRel.
func (c *commit) holdRemoval(dirRel string, dirSegs []string, sc scope, name string, h *hostInfo) {
	if c.settled {
		return
	}
	rel := join(dirRel, name)
	ch := sandbox.Change{Path: rel, Op: "delete", Rule: "hidden:" + name, Diff: "delete " + h.typeName()}
	c.held = append(c.held, &held{
		change: ch, key: rel + "|delete|rm/" + statFP(&h.st),
		dir:  dirState{rel: dirRel, segs: dirSegs, onHost: true, scope: sc},
		name: name, removal: true,
	})
}

// describe builds the Change for an upper entry and its key; ok is false
// when applying it would change nothing.
func (c *commit) describe(x *scanEntry) (ch sandbox.Change, key string, ok bool) {
	e, h := x.e, &x.h
	ch = sandbox.Change{Path: e.rel, Rule: "hidden:" + e.name, Op: "create"}
	if h.exists {
		ch.Op = "modify"
	}
	var fp string
	switch e.kind {
	case kindWhiteout:
		if !h.exists {
			return ch, "", false
		}
		ch.Op, ch.Type, ch.Diff = "delete", "", "delete "+h.typeName()
		fp = "rm/" + statFP(&h.st)
	case kindFile:
		if same(e, h) {
			return ch, "", false
		}
		ch.Type, ch.Size = "file", e.st.Size
		ch.Diff = c.fileDiff(e, h)
		fp = statFP(&e.st)
	case kindSymlink:
		if same(e, h) {
			return ch, "", false
		}
		ch.Type = "symlink"
		ch.Diff = "symlink -> " + e.target
		if h.isLink() {
			ch.Diff = "symlink -> " + h.target + " becomes -> " + e.target
		}
		fp = statFP(&e.st) + "/" + e.target
	case kindDir:
		n, size, summary, sum := c.scanGroup(x)
		if n == 0 {
			return ch, "", false
		}
		ch.Type, ch.Size, ch.Diff = "dir", size, summary
		fp = sum
	default:
		return ch, "", false
	}
	return ch, e.rel + "|" + ch.Op + "|" + fp, true
}

// scanGroup lists what applying the held upper directory x would change:
// the count of changed entries, their total size, a bounded summary and a
// fingerprint of every upper entry in it.
func (c *commit) scanGroup(x *scanEntry) (n int, size int64, summary string, fp string) {
	sum := sha256.New()
	var rows []string
	total, seen := 0, 0
	row := func(r string) {
		total++
		if len(rows) < maxSummaryRows {
			rows = append(rows, r)
		}
	}
	note := func(y *scanEntry) {
		_, _ = fmt.Fprintf(sum, "%s\x00%s\x00%s\x00", y.e.rel, statFP(&y.e.st), y.e.target)
		if y != x {
			seen++
		}
		if same(y.e, &y.h) {
			return
		}
		if rule, ok := c.protected.rule(y.segs); ok && y.e.kind != kindDir {
			// Never applied, whatever the review says: reported now,
			// under its own rule, and not shown for review.
			detail := detailFor(y.h.exists)
			if y.e.kind == kindWhiteout {
				detail = detailRemove
			}
			c.violation(y.e.rel, detail, rule)
			return
		}
		switch y.e.kind {
		case kindWhiteout:
			n++
			row("- " + y.e.rel)
		case kindDir:
			switch {
			case !y.h.exists:
				// A new directory is a change through what is in it.
				row("+ " + y.e.rel + "/")
			case y.e.opaque:
				n++
				row("~ " + y.e.rel + "/ (replaced: what the host has in it is removed)")
			default:
				n++
				row(fmt.Sprintf("~ %s/ (mode %o)", y.e.rel, y.e.st.Mode&0o777))
			}
		case kindSymlink:
			n++
			row("+ " + y.e.rel + " -> " + y.e.target)
		case kindFile:
			n++
			size += y.e.st.Size
			mark := "+"
			if y.h.exists {
				mark = "~"
			}
			row(fmt.Sprintf("%s %s (%d bytes)", mark, y.e.rel, y.e.st.Size))
		default:
			row("? " + y.e.rel + " (special file, never copied)")
		}
	}
	note(x)
	c.scan(x.e.rel, x.segs, x.h.isDir() && !x.e.opaque, false, func(y *scanEntry) bool {
		note(y)
		return true
	}, nil)
	if n == 0 && seen == 0 && !x.h.exists {
		n = 1 // a new, empty directory
	}
	if total > len(rows) {
		rows = append(rows, fmt.Sprintf("… and %d more", total-len(rows)))
	}
	return n, size, strings.Join(rows, "\n"), hex.EncodeToString(sum.Sum(nil))
}

// fileDiff is a unified diff of a held text file, or a one-line summary.
func (c *commit) fileDiff(e *upperEntry, h *hostInfo) string {
	dir, _ := splitRel(e.rel)
	summary := fmt.Sprintf("file of %d bytes", e.st.Size)
	if e.st.Size > maxDiffInput || (h.isReg() && h.st.Size > maxDiffInput) {
		return summary + " (too large to show)"
	}
	ufd, err := c.upDir(dir)
	if err != nil {
		return summary
	}
	defer closeFd(ufd)
	newB, err := readAt(ufd, e.name, maxDiffInput)
	if err != nil {
		return summary
	}
	var oldB []byte
	if h.isReg() {
		hfd, err := c.hostDir(dir)
		if err != nil {
			return summary
		}
		oldB, err = readAt(hfd, e.name, maxDiffInput)
		closeFd(hfd)
		if err != nil {
			return summary
		}
	}
	if !text(newB) || !text(oldB) {
		return fmt.Sprintf("binary file of %d bytes", e.st.Size)
	}
	d := textdiff.Unified(e.rel, string(oldB), string(newB), !h.exists)
	if d == "" {
		return fmt.Sprintf("mode %o", e.st.Mode&0o777)
	}
	if len(d) > maxDiff {
		cut := strings.LastIndexByte(d[:maxDiff], '\n') + 1
		d = d[:cut] + fmt.Sprintf("… diff cut at %d of %d bytes\n", cut, len(d))
	}
	return d
}

func text(b []byte) bool { return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0 }

// settleHeld asks the reviewer about every held change at once, applies
// what it approves (if unchanged since it was shown) and reports the rest.
func (c *commit) settleHeld() {
	c.settled = true
	hs := c.held
	if len(hs) == 0 {
		return
	}
	if len(hs) > maxHeld {
		for _, h := range hs[maxHeld:] {
			c.violation(h.change.Path, detailTooMany, "review:"+h.change.Rule)
		}
		hs = hs[:maxHeld]
	}
	changes := make([]sandbox.Change, len(hs))
	keys := make([]string, len(hs))
	for i, h := range hs {
		changes[i], keys[i] = h.change, h.key
	}
	var answers []bool
	if c.ask != nil && c.ctx.Err() == nil {
		answers = c.ask(c.ctx, changes, keys)
	}
	for i, h := range hs {
		if i >= len(answers) || !answers[i] {
			detail := detailDenied
			if c.ask == nil {
				detail = detailNobody
			}
			c.violation(h.change.Path, detail, "review:"+h.change.Rule)
			continue
		}
		if c.currentKey(h) != h.key {
			// Changed since it was shown: not what was approved. The
			// next commit asks about the new state.
			continue
		}
		d := h.dir
		d.scope.reviewed = true
		if h.removal {
			c.removeTree(&d, h.name, d.scope)
		} else {
			c.walk(d, []string{h.name})
		}
	}
}

// currentKey is the key a held change would have now.
func (c *commit) currentKey(h *held) string {
	if h.removal {
		hfd, err := c.hostDir(h.dir.rel)
		if err != nil {
			return ""
		}
		defer closeFd(hfd)
		hi, err := lookupHost(hfd, h.name)
		if err != nil || !hi.exists {
			return ""
		}
		return h.change.Path + "|delete|rm/" + statFP(&hi.st)
	}
	x, err := c.look(h.dir.rel, h.dir.segs, h.dir.onHost, h.name)
	if err != nil || x == nil {
		return ""
	}
	_, key, ok := c.describe(x)
	if !ok {
		return ""
	}
	return key
}

//go:build unix

package workspace

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/textdiff"
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
// applied, exactly as it was shown (protected paths and the .git rules
// still apply inside); the rest is dropped and reported with the rule
// "review:hidden:<name>".
// Options.ReviewExempt names hidden paths applied without review; the
// exemption is decided at the outermost hidden component (".config/x" is
// reviewed with ".config").

// An approval applies exactly what the reviewer was shown. The sandbox
// may still be running while its held changes are described, reviewed and
// applied, so when a change is held, the fingerprint (type, mode, size,
// times, inode; a symlink's target) of every upper entry it covers is
// recorded, and the hash of the bytes of a file whose content was shown.
// The approved change is then applied entry by entry, each only if it
// still has its recorded fingerprint: files are checked on the descriptor
// that is copied, before and after the copy, and their copied bytes
// against the shown hash. Anything new or changed since is dropped and
// reported (detailNotShown), and the next commit asks about it.
//
// Describing a change costs reads and a diff, so only the changes a
// reviewer is asked about are described (at most maxHeld per commit,
// none the Committer has an answer for, none when nobody reviews), and
// the diffs of one commit share a bound (maxDiffCells).

// Bounds of what a held change shows.
const (
	maxDiffInput   = 256 << 10 // larger files get a one-line summary
	maxDiff        = 16 << 10  // a longer diff is cut
	maxSummaryRows = 50        // lines listing a held directory's changes
	// maxDiffCells bounds the longest-common-subsequence tables of the
	// diffs one commit makes (lines of the changed middle of the old file
	// times those of the new): 4 tables of textdiff's largest, 64 MiB.
	// Past it, files are summarised.
	maxDiffCells = 4 << 22
)

// held is one change held for review.
type held struct {
	change sandbox.Change
	key    string // path, operation and fingerprint of what would be applied
	dir    dirState
	name   string
	// shown is what the change covers, as it was held (nil for a
	// removal, and for a change past maxHeld).
	shown *approval
	// top is the held upper entry (files are described from it).
	top *scanEntry
	// removal: the change removes a host entry that has no upper entry
	// (it is below a directory the sandbox removed or replaced); hostFP
	// is that entry's fingerprint.
	removal bool
	hostFP  string
}

// approval is what a held change covers: the fingerprint (entryFP) of
// every upper entry below it by path, and the hash of each file whose
// bytes were shown. Below an approved change only these are applied.
type approval struct {
	rule    string // the violation rule of what is dropped
	fps     map[string]string
	content map[string][sha256.Size]byte
}

// entryFP fingerprints an upper entry. A directory's is its identity and
// mode, not its times: what changes inside it is fingerprinted entry by
// entry.
func entryFP(e *upperEntry) string {
	switch e.kind {
	case kindDir:
		return fmt.Sprintf("dir/%o/%d/%t", e.st.Mode, e.st.Ino, e.opaque)
	case kindSymlink:
		return statFP(&e.st) + "/" + e.target
	case kindWhiteout:
		return "whiteout/" + statFP(&e.st)
	}
	return statFP(&e.st)
}

// check reports whether the upper entry x is one the approval covers, as
// it was shown.
func (a *approval) check(x *scanEntry) bool {
	fp, ok := a.fps[x.e.rel]
	return ok && fp == entryFP(x.e)
}

// hold holds the upper entry x of directory d for review, unless applying
// it would change nothing. It only looks at fingerprints (and, for a
// directory, scans it): the description is made when the change is shown
// (settleHeld).
func (c *commit) hold(d *dirState, x *scanEntry) {
	if c.settled {
		return
	}
	e, h := x.e, &x.h
	ch := sandbox.Change{Path: e.rel, Rule: "hidden:" + e.name, Op: "create"}
	if h.exists {
		ch.Op = "modify"
	}
	keep := len(c.held) < maxHeld // past it, the change is only reported
	shown := &approval{rule: "review:" + ch.Rule, fps: map[string]string{e.rel: entryFP(e)}}
	fp := entryFP(e)
	switch e.kind {
	case kindWhiteout:
		if !h.exists {
			return
		}
		ch.Op, ch.Diff = "delete", "delete "+h.typeName()
		fp += "/rm/" + statFP(&h.st)
	case kindFile:
		if same(e, h) {
			return
		}
		ch.Type, ch.Size = "file", e.st.Size
	case kindSymlink:
		if same(e, h) {
			return
		}
		ch.Type = "symlink"
		ch.Diff = "symlink -> " + e.target
		if h.isLink() {
			ch.Diff = "symlink -> " + h.target + " becomes -> " + e.target
		}
	case kindDir:
		if !keep {
			shown = nil
		}
		n, size, summary, sum := c.scanGroup(x, shown)
		if n == 0 {
			return
		}
		ch.Type, ch.Size, ch.Diff = "dir", size, summary
		fp = sum
	default:
		return
	}
	if !keep {
		shown = nil
	}
	c.held = append(c.held, &held{
		change: ch, key: e.rel + "|" + ch.Op + "|" + fp, dir: *d, name: e.name, shown: shown, top: x,
	})
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
		name: name, removal: true, hostFP: statFP(&h.st),
	})
}

// scanGroup lists what applying the held upper directory x would change:
// the count of changed entries, their total size, a bounded summary and a
// fingerprint of every upper entry in it; each entry's fingerprint goes
// into shown (when not nil).
func (c *commit) scanGroup(x *scanEntry, shown *approval) (n int, size int64, summary string, fp string) {
	sum := sha256.New()
	var rows []string
	total, seen := 0, 0
	row := func(r string) {
		total++
		if shown != nil && len(rows) < maxSummaryRows {
			rows = append(rows, r)
		}
	}
	note := func(y *scanEntry) {
		efp := entryFP(y.e)
		_, _ = fmt.Fprintf(sum, "%s\x00%s\x00", y.e.rel, efp)
		if shown != nil {
			shown.fps[y.e.rel] = efp
		}
		if y != x {
			seen++
		}
		if same(y.e, &y.h) {
			return
		}
		if rule, ok := c.protectedRule(y.segs); ok && y.e.kind != kindDir {
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

// describeFile makes the diff of a held file, to show it: a unified diff
// of text, or a one-line summary. What it reads becomes what was shown:
// the fingerprint of the descriptor it read and the hash of the bytes.
func (c *commit) describeFile(h *held) {
	e, host := h.top.e, &h.top.h
	summary := fmt.Sprintf("file of %d bytes", e.st.Size)
	h.change.Diff = summary
	if e.st.Size > maxDiffInput || (host.isReg() && host.st.Size > maxDiffInput) {
		h.change.Diff = summary + " (too large to show)"
		return
	}
	dir, _ := splitRel(e.rel)
	ufd, err := c.upDir(dir)
	if err != nil {
		return
	}
	newB, st, err := readFile(ufd, e.name, maxDiffInput, false)
	closeFd(ufd)
	if err != nil {
		return
	}
	// What is shown is what was read: the change's fingerprint is that
	// of the descriptor the bytes came from.
	fp := statFP(st)
	h.shown.fps[e.rel] = fp
	h.key = e.rel + "|" + h.change.Op + "|" + fp
	h.change.Size = st.Size
	h.shown.content = map[string][sha256.Size]byte{e.rel: sha256.Sum256(newB)}
	var oldB []byte
	if host.isReg() {
		hfd, err := c.hostDir(dir)
		if err != nil {
			return
		}
		oldB, _, err = readFile(hfd, e.name, maxDiffInput, false)
		closeFd(hfd)
		if err != nil {
			return
		}
	}
	if !text(newB) || !text(oldB) {
		h.change.Diff = fmt.Sprintf("binary file of %d bytes", st.Size)
		return
	}
	if cells := diffCells(string(oldB), string(newB)); cells > 0 {
		if c.diffCells+cells > maxDiffCells {
			h.change.Diff = summary + " (not shown: this commit's diffs reached their bound)"
			return
		}
		c.diffCells += cells
	}
	d := textdiff.Unified(e.rel, string(oldB), string(newB), !host.exists)
	if d == "" {
		d = fmt.Sprintf("mode %o", e.st.Mode&0o777)
	}
	if len(d) > maxDiff {
		cut := strings.LastIndexByte(d[:maxDiff], '\n') + 1
		d = d[:cut] + fmt.Sprintf("… diff cut at %d of %d bytes\n", cut, len(d))
	}
	h.change.Diff = d
}

// diffCells is the size of the table textdiff fills to diff old and new:
// the lines of their changed middle (common first and last lines left
// out), one more each, multiplied.
func diffCells(old, new string) int {
	a, b := textdiff.Lines(old), textdiff.Lines(new)
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	la, lb := len(a)-pre-suf, len(b)-pre-suf
	if la == 0 || lb == 0 {
		return 0 // only added or only removed lines: no table
	}
	return (la + 1) * (lb + 1)
}

func text(b []byte) bool { return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0 }

// settleHeld asks the reviewer about every held change it has no answer
// for at once, applies what is approved (only as it was shown) and
// reports the rest.
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
	answers := make([]*answer, len(hs))
	var ask []int
	for i, h := range hs {
		if a, ok := c.memory[h.key]; ok {
			answers[i] = a
			continue
		}
		ask = append(ask, i)
	}
	if len(ask) > 0 && c.opts.Review != nil && c.ctx.Err() == nil {
		changes := make([]sandbox.Change, len(ask))
		for j, i := range ask {
			h := hs[i]
			if !h.removal && h.top.e.kind == kindFile {
				c.describeFile(h)
			}
			changes[j] = h.change
		}
		got := c.opts.Review(c.ctx, changes)
		for j, i := range ask {
			a := &answer{approved: j < len(got) && got[j]}
			if sh := hs[i].shown; sh != nil {
				a.content = sh.content
			}
			answers[i] = a
			// A reviewer that did not answer in time (ctx done) is not
			// an answer to remember.
			if c.memory != nil && c.ctx.Err() == nil {
				c.memory[hs[i].key] = a
			}
		}
	}
	for i, h := range hs {
		if a := answers[i]; a == nil || !a.approved {
			detail := detailDenied
			if c.opts.Review == nil {
				detail = detailNobody
			}
			c.violation(h.change.Path, detail, "review:"+h.change.Rule)
			continue
		}
		if c.opts.hook != nil {
			c.opts.hook("approved", h.change.Path)
		}
		d := h.dir
		d.scope.reviewed = true
		if h.removal {
			if !c.hostUnchanged(h) {
				// Not what was shown; the next commit asks again.
				continue
			}
			c.removeTree(&d, h.name, d.scope)
			continue
		}
		d.scope.approval = &approval{rule: h.shown.rule, fps: h.shown.fps, content: answers[i].content}
		c.walk(d, []string{h.name})
	}
}

// hostUnchanged reports whether the host entry a held removal deletes is
// still the one that was shown.
func (c *commit) hostUnchanged(h *held) bool {
	hfd, err := c.hostDir(h.dir.rel)
	if err != nil {
		return false
	}
	defer closeFd(hfd)
	hi, err := lookupHost(hfd, h.name)
	return err == nil && hi.exists && statFP(&hi.st) == h.hostFP
}

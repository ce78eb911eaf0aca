package snapshot

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/textdiff"
)

// Statuses of a changed file.
const (
	Added    = "added"
	Modified = "modified"
	Deleted  = "deleted"
)

// FileChange is one changed file of a Diff.
type FileChange struct {
	// Path is slash-separated, relative to the workspace, as the
	// workspace names it (untrusted).
	Path   string
	Status string
	// Binary: listed, not diffed (binary content, or a file too large
	// to keep).
	Binary bool
}

// Diff is the change between two states.
type Diff struct {
	Files []FileChange
	// Text is the unified diff of the text files, in path order.
	Text string
	// Truncated: a bound cut the list or the text, or a state was cut
	// at its bound, so changes may be missing.
	Truncated bool
}

// Now names the workspace as it is now, as the target of Diff.
const Now = ""

// Diff returns the changes of session id's workspace from state from to
// state to, or to the workspace as it is now (to == Now; the files read
// are kept as blobs, not as a state). ErrNoState when a state was never
// taken.
func (s *Store) Diff(ctx context.Context, id, from, to, workspace string) (Diff, error) {
	dir, err := s.sessionDir(id)
	if err != nil {
		return Diff{}, err
	}
	a, err := s.load(id, from)
	if err != nil {
		return Diff{}, err
	}
	var b *Manifest
	if to == Now {
		prev, _ := s.last(id)
		if b, err = s.scan(ctx, dir, workspace, prev); err != nil {
			return Diff{}, err
		}
	} else if b, err = s.load(id, to); err != nil {
		return Diff{}, err
	}
	return s.compare(ctx, dir, a, b)
}

// compare makes the diff from a to b, whose entries are sorted by path.
func (s *Store) compare(ctx context.Context, dir string, a, b *Manifest) (Diff, error) {
	d := Diff{Truncated: a.Truncated || b.Truncated}
	var text strings.Builder
	add := func(c FileChange, old, new *Entry) error {
		if len(d.Files) >= s.limits.Files {
			d.Truncated = true
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		part, binary := s.fileDiff(dir, c, old, new)
		c.Binary = binary
		d.Files = append(d.Files, c)
		if text.Len()+len(part) > s.limits.DiffBytes {
			d.Truncated = true
			return nil
		}
		text.WriteString(part)
		return nil
	}
	i, j := 0, 0
	for i < len(a.Entries) || j < len(b.Entries) {
		var err error
		switch {
		case j == len(b.Entries) || (i < len(a.Entries) && a.Entries[i].Path < b.Entries[j].Path):
			err = add(FileChange{Path: a.Entries[i].Path, Status: Deleted}, &a.Entries[i], nil)
			i++
		case i == len(a.Entries) || b.Entries[j].Path < a.Entries[i].Path:
			err = add(FileChange{Path: b.Entries[j].Path, Status: Added}, nil, &b.Entries[j])
			j++
		default:
			if !same(a.Entries[i], b.Entries[j]) {
				err = add(FileChange{Path: a.Entries[i].Path, Status: Modified}, &a.Entries[i], &b.Entries[j])
			}
			i++
			j++
		}
		if err != nil {
			return Diff{}, err
		}
	}
	d.Text = text.String()
	return d, nil
}

// same reports whether two entries of one path hold the same thing: the
// same content hash, or, for a file too large to read, the same size and
// times.
func same(x, y Entry) bool {
	if x.Link != y.Link || x.Size != y.Size {
		return false
	}
	if x.Hash != "" && y.Hash != "" {
		return x.Hash == y.Hash
	}
	return x.Stat == y.Stat
}

// fileDiff returns the diff text of one change and whether it is binary
// (not diffed).
func (s *Store) fileDiff(dir string, c FileChange, old, new *Entry) (string, bool) {
	name := diffPath(c.Path)
	var oldText, newText []byte
	for _, side := range []struct {
		e   *Entry
		out *[]byte
	}{{old, &oldText}, {new, &newText}} {
		if side.e == nil {
			continue
		}
		if side.e.Withheld {
			return fmt.Sprintf("Files a/%s and b/%s differ (not diffed: the content looks like it holds a credential, and is not kept)\n", name, name), true
		}
		if side.e.Hash == "" {
			return fmt.Sprintf("Files a/%s and b/%s differ (not diffed: over %d bytes)\n", name, name, s.limits.Blob), true
		}
		b, err := blob(dir, side.e.Hash)
		if err != nil {
			return fmt.Sprintf("Files a/%s and b/%s differ (not diffed: %v)\n", name, name, err), true
		}
		if isBinary(b) {
			return binaryLine(c, name), true
		}
		*side.out = b
	}
	switch c.Status {
	case Added:
		return textdiff.Unified(name, "", string(newText), true), false
	case Deleted:
		out := textdiff.Unified(name, string(oldText), "", false)
		if out == "" { // an empty file: its headers alone
			return "--- a/" + name + "\n+++ /dev/null\n", false
		}
		return strings.Replace(out, "+++ b/"+name+"\n", "+++ /dev/null\n", 1), false
	}
	return textdiff.Unified(name, string(oldText), string(newText), false), false
}

func binaryLine(c FileChange, name string) string {
	switch c.Status {
	case Added:
		return fmt.Sprintf("Binary files /dev/null and b/%s differ\n", name)
	case Deleted:
		return fmt.Sprintf("Binary files a/%s and /dev/null differ\n", name)
	}
	return fmt.Sprintf("Binary files a/%s and b/%s differ\n", name, name)
}

// diffPath is a path as the diff text shows it: one whose bytes could
// break the text's lines or be taken for its syntax (controls, quotes,
// backslashes, bytes that are not UTF-8) is written escaped, as a Go
// string literal's inside, so every file is one header line.
func diffPath(p string) string {
	if utf8.ValidString(p) && !strings.ContainsFunc(p, func(r rune) bool {
		return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '"' || r == '\\' || r == utf8.RuneError
	}) {
		return p
	}
	q := strconv.Quote(p)
	return q[1 : len(q)-1]
}

// Package snapshot keeps the states of a session's workspace on disk (at
// the session's start, and before and after each turn) and makes the
// changes between two of them, or between one and the workspace as it is
// now, into a changed-files list and a unified diff.
//
// A state is a manifest (every regular file and symbolic link of the
// workspace with its type, size and content hash) and the contents of its
// text-sized files in a content-addressed blob directory shared by the
// session's states, so a turn that changes one file stores one file. It
// lives under the daemon's data directory, so the diffs survive a restart.
//
// The workspace is the agent's, hence hostile: it is read through an
// os.Root (no symlink or ".." leads outside it), symbolic links are
// recorded as links (their target is never followed), only regular files
// are read (opened without blocking, checked to be the entry that was
// listed), and every walk and every diff is bounded (entries, depth, bytes
// stored, bytes of diff). Paths are reported as the workspace names them:
// callers that show them must make them safe for where they go.
package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Limits bound what a state holds and what a diff returns. A zero field
// takes its Default value.
type Limits struct {
	// Entries is the most files and links a state records; past it the
	// state is marked truncated.
	Entries int
	// Depth is the deepest directory level walked.
	Depth int
	// Blob is the largest file whose content is kept (and diffed);
	// larger files are recorded by size and times only.
	Blob int64
	// Stored is the most new content one state stores; past it files
	// are recorded by size and times only.
	Stored int64
	// Files is the most changed files one diff lists.
	Files int
	// DiffBytes is the longest diff text one diff returns.
	DiffBytes int
}

// Defaults of Limits.
const (
	DefaultEntries   = 20000
	DefaultDepth     = 64
	DefaultBlob      = 1 << 20
	DefaultStored    = 64 << 20
	DefaultFiles     = 1000
	DefaultDiffBytes = 1 << 20
)

func (l Limits) withDefaults() Limits {
	if l.Entries <= 0 {
		l.Entries = DefaultEntries
	}
	if l.Depth <= 0 {
		l.Depth = DefaultDepth
	}
	if l.Blob <= 0 {
		l.Blob = DefaultBlob
	}
	if l.Stored <= 0 {
		l.Stored = DefaultStored
	}
	if l.Files <= 0 {
		l.Files = DefaultFiles
	}
	if l.DiffBytes <= 0 {
		l.DiffBytes = DefaultDiffBytes
	}
	return l
}

// Errors.
var (
	// ErrNoState: the state asked for was never taken (a session from
	// before states were kept, or a turn id that is not the session's).
	ErrNoState = errors.New("no such workspace state")
)

// Store keeps the states of every session under one directory: DIR/ID/
// holds a session's "blobs" and "states".
type Store struct {
	dir    string
	limits Limits
	// Withhold, when set (before the first Take), says whether content
	// must not be kept: such a file is recorded by its hash only, never
	// copied into the store, and the diff lists it without its text.
	// The daemon sets it to recognise credentials, so a workspace's
	// secrets (a .env file) are never copied into its data directory.
	Withhold func(content []byte) bool
}

// New returns a store under dir (created when missing, mode 0700).
func New(dir string, limits Limits) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return &Store{dir: dir, limits: limits.withDefaults()}, nil
}

// Point names of the states the engine takes.
const PointStart = "start"

// TurnBefore and TurnAfter name the states before and after a turn.
func TurnBefore(turnID string) string { return turnID + ".before" }
func TurnAfter(turnID string) string  { return turnID + ".after" }

// validName allows the names the engine makes (ids with a suffix), so a
// name never leads out of the session's directory: 1 to 100 of
// [A-Za-z0-9_-], then optionally ".before" or ".after". Written out rather
// than as a regexp: that one, with its {1,100}, compiled to 100 KB at
// every start.
func validName(s string) bool {
	base, ok := strings.CutSuffix(s, ".before")
	if !ok {
		base, _ = strings.CutSuffix(s, ".after")
	}
	if len(base) < 1 || len(base) > 100 {
		return false
	}
	for i := 0; i < len(base); i++ {
		switch c := base[i]; {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

func (s *Store) sessionDir(id string) (string, error) {
	if !validName(id) || strings.Contains(id, ".") {
		return "", fmt.Errorf("snapshot: invalid session id %q", id)
	}
	return filepath.Join(s.dir, id), nil
}

// Entry is one file or symbolic link of a state.
type Entry struct {
	Path string `json:"p"`
	// Link: a symbolic link, whose content is its target.
	Link bool  `json:"l,omitempty"`
	Size int64 `json:"s"`
	// Hash is the sha256 of the content when it was read (and kept as a
	// blob unless Withheld); empty when the file was too large, and then
	// Stat tells.
	Hash string `json:"h,omitempty"`
	// Withheld: the content was read but not kept (Store.Withhold).
	Withheld bool `json:"w,omitempty"`
	// Stat identifies the file's version without reading it: size,
	// modification and change times, inode.
	Stat string `json:"t"`
}

// Manifest is one state of a workspace.
type Manifest struct {
	Taken time.Time `json:"taken"`
	// Truncated: the walk stopped at a bound; entries past it are
	// missing.
	Truncated bool    `json:"truncated,omitempty"`
	Entries   []Entry `json:"entries"`
}

// Has reports whether the state point of session id was taken.
func (s *Store) Has(id, point string) bool {
	dir, err := s.sessionDir(id)
	if err != nil || !validName(point) {
		return false
	}
	st, err := os.Stat(filepath.Join(dir, "states", point+".json"))
	return err == nil && st.Mode().IsRegular()
}

// Take records the state of workspace as point of session id. Files whose
// size, times and inode are those of the state taken last are not read
// again.
func (s *Store) Take(ctx context.Context, id, point, workspace string) error {
	dir, err := s.sessionDir(id)
	if err != nil {
		return err
	}
	if !validName(point) {
		return fmt.Errorf("snapshot: invalid state name %q", point)
	}
	prev, _ := s.last(id)
	m, err := s.scan(ctx, dir, workspace, prev)
	if err != nil {
		return err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	// Everything a state refers to is on disk before the state: the
	// blobs (each synced when written) and their names, then the
	// directories' own names in the session's directory.
	if err := syncDir(filepath.Join(dir, "blobs")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "states"), 0o700); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := writeAtomic(filepath.Join(dir, "states"), point+".json", b, true); err != nil {
		return err
	}
	return writeAtomic(dir, "last", []byte(point), true)
}

// fsync makes a file's or a directory's content durable; tests replace it
// to see the order of the syncs.
var fsync = func(f *os.File) error { return f.Sync() }

// syncDir makes the names in directory dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = fsync(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Remove deletes every state of session id.
func (s *Store) Remove(id string) error {
	dir, err := s.sessionDir(id)
	if err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

func (s *Store) load(id, point string) (*Manifest, error) {
	dir, err := s.sessionDir(id)
	if err != nil {
		return nil, err
	}
	if !validName(point) {
		return nil, ErrNoState
	}
	b, err := os.ReadFile(filepath.Join(dir, "states", point+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNoState, point)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("snapshot: state %s of %s: %w", point, id, err)
	}
	return &m, nil
}

// last returns the state taken last, for its hashes.
func (s *Store) last(id string) (*Manifest, error) {
	dir, err := s.sessionDir(id)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "last"))
	if err != nil {
		return nil, err
	}
	return s.load(id, string(b))
}

// writeAtomic writes name in dir by a rename, so a reader never sees half
// a file and a crash leaves the old one or the new one: the content is
// synced before the rename; with durable, dir too after it (a blob's
// directory is synced once, before the state that refers to it).
func writeAtomic(dir, name string, data []byte, durable bool) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	_, werr := f.Write(data)
	if werr == nil {
		werr = fsync(f)
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(f.Name(), filepath.Join(dir, name))
	}
	if werr == nil && durable {
		werr = syncDir(dir)
	}
	if werr != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("snapshot: %w", werr)
	}
	return nil
}

// scan walks workspace and returns its state, storing the content of the
// files it reads in dir's blobs.
func (s *Store) scan(ctx context.Context, dir, workspace string, prev *Manifest) (*Manifest, error) {
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return nil, fmt.Errorf("snapshot: open workspace: %w", err)
	}
	defer root.Close()
	known := map[string]Entry{}
	if prev != nil {
		for _, e := range prev.Entries {
			if e.Hash != "" {
				known[e.Path] = e
			}
		}
	}
	w := &walker{ctx: ctx, root: root, blobs: filepath.Join(dir, "blobs"), limits: s.limits, known: known, m: &Manifest{Taken: time.Now().UTC()}, withhold: s.Withhold}
	if err := w.walk(".", 0); err != nil {
		return nil, err
	}
	// sort.Slice (the same pdqsort) rather than slices.SortFunc: one sort shared
	// by every element type instead of a copy for this one (12-17 KB of the binary).
	es := w.m.Entries
	sort.Slice(es, func(i, j int) bool { return es[i].Path < es[j].Path })
	return w.m, nil
}

type walker struct {
	ctx    context.Context
	root   *os.Root
	blobs  string
	limits Limits
	known  map[string]Entry
	stored int64
	m      *Manifest
	// withhold is the store's Withhold.
	withhold func([]byte) bool
}

// skipDir reports directories whose contents are not the work: git's
// own data.
func skipDir(name string) bool { return strings.EqualFold(name, ".git") }

func (w *walker) walk(rel string, depth int) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if depth > w.limits.Depth {
		w.m.Truncated = true
		return nil
	}
	d, err := w.root.Open(rel)
	if err != nil {
		if rel == "." {
			return fmt.Errorf("snapshot: %w", err)
		}
		return nil // gone, or swapped for something else since it was listed
	}
	ents, err := d.ReadDir(-1)
	_ = d.Close()
	if err != nil && rel == "." {
		return fmt.Errorf("snapshot: read workspace: %w", err)
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, de := range ents {
		p := de.Name()
		if rel != "." {
			p = rel + "/" + p
		}
		switch t := de.Type(); {
		case t.IsDir():
			if skipDir(de.Name()) {
				continue
			}
			if err := w.walk(p, depth+1); err != nil {
				return err
			}
		case t.IsRegular(), t&fs.ModeSymlink != 0:
			if len(w.m.Entries) >= w.limits.Entries {
				w.m.Truncated = true
				return nil
			}
			if e, ok := w.entry(p, de); ok {
				w.m.Entries = append(w.m.Entries, e)
			}
		}
		// Devices, fifos and sockets are not workspace content.
	}
	return nil
}

func statKey(fi fs.FileInfo) string {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d/%d.%d/%d.%d/%d", st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec, st.Ino)
	}
	return fmt.Sprintf("%d/%d", fi.Size(), fi.ModTime().UnixNano())
}

// entry records one file or link; false when it vanished or changed kind
// while it was read.
func (w *walker) entry(p string, de fs.DirEntry) (Entry, bool) {
	fi, err := de.Info()
	if err != nil {
		return Entry{}, false
	}
	e := Entry{Path: p, Size: fi.Size(), Stat: statKey(fi)}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := w.root.Readlink(p)
		if err != nil {
			return Entry{}, false
		}
		e.Link, e.Size = true, int64(len(target))
		e.Hash, e.Withheld = w.store([]byte(target))
		return e, true
	}
	if k, ok := w.known[p]; ok && !k.Link && k.Stat == e.Stat {
		e.Hash, e.Withheld = k.Hash, k.Withheld
		return e, true
	}
	if fi.Size() > w.limits.Blob || w.stored+fi.Size() > w.limits.Stored {
		return e, true // by size and times only
	}
	// Never blocks (a fifo swapped in), never follows a link at the end.
	f, err := w.root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return Entry{}, false
	}
	defer f.Close()
	ofi, err := f.Stat()
	if err != nil || !ofi.Mode().IsRegular() || !os.SameFile(fi, ofi) {
		return Entry{}, false
	}
	data, err := io.ReadAll(io.LimitReader(f, w.limits.Blob+1))
	if err != nil || int64(len(data)) > w.limits.Blob {
		return e, true
	}
	e.Size, e.Stat = int64(len(data)), statKey(ofi)
	e.Hash, e.Withheld = w.store(data)
	if !e.Withheld {
		w.stored += int64(len(data))
	}
	return e, true
}

// store keeps data as a blob and returns its hash; "" when it could not
// be written (the entry is then recorded by size and times only). Data
// the store withholds is not written: its hash alone, and withheld.
func (w *walker) store(data []byte) (hash string, withheld bool) {
	sum := sha256.Sum256(data)
	h := hex.EncodeToString(sum[:])
	if w.withhold != nil && w.withhold(data) {
		return h, true
	}
	if _, err := os.Stat(filepath.Join(w.blobs, h)); err == nil {
		return h, false
	}
	if err := writeAtomic(w.blobs, h, data, false); err != nil {
		return "", false
	}
	return h, false
}

// blob reads the content of hash h of session dir.
func blob(dir, h string) ([]byte, error) {
	if len(h) != 2*sha256.Size {
		return nil, ErrNoState
	}
	if _, err := hex.DecodeString(h); err != nil {
		return nil, ErrNoState
	}
	b, err := os.ReadFile(filepath.Join(dir, "blobs", h))
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != h {
		return nil, fmt.Errorf("snapshot: blob %s is damaged", h)
	}
	return b, nil
}

// isBinary says whether content is not text: a NUL byte in its first 8000
// bytes, as git decides.
func isBinary(b []byte) bool {
	head := b[:min(len(b), 8000)]
	return bytes.IndexByte(head, 0) >= 0
}

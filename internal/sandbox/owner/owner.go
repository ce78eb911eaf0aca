// Package owner ties what sandboxes leave on the host outside the process
// that made them (cgroups, gVisor containers with their mounts, task
// directories) to that process, host-wide, so that the next agentbox
// process to start removes those of a process that died without cleaning
// up (SIGKILL, the OOM killer) and never those of a process still alive.
// On the same kind of lock it hands out host-wide numbered slots (the
// process runtime's uid ranges), which a process that dies frees.
//
// Liveness is a lock the kernel keeps: every process that records an
// artefact holds an exclusive flock on a file of its own for as long as it
// lives, and the kernel drops the lock when the process ends, however it
// ends. Pids and start times are never consulted.
//
// Layout under the host directory (Default: /run/agentbox for root):
//
//	owners/ID.lock     flocked by owner ID for its whole life
//	owners/ID/N.json   one record per artefact, written before the
//	                   artefact exists and removed once it is gone
//	owners/.new-*      a lock being set up (renamed to ID.lock once held)
//	owners/.reap       flocked by the process reaping (one at a time)
//	slots/POOL/N       slot N of POOL, flocked by whoever holds it
package owner

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox/mountinfo"
)

// Record is one artefact as its owner wrote it down.
type Record struct {
	// Kind says which Reaper removes it, e.g. "cgroup", "gvisor", "dir".
	Kind string `json:"kind"`
	// Name and Path identify it, as the kind needs (a cgroup's name, a
	// directory).
	Name string `json:"name,omitempty"`
	Path string `json:"path,omitempty"`
}

func (r Record) String() string {
	s := r.Kind
	if r.Name != "" {
		s += " " + r.Name
	}
	if r.Path != "" {
		s += " " + r.Path
	}
	return s
}

// KindDir is the kind of a directory tree (a task's workspace) that goes
// with its owner; ReapDir removes it.
const KindDir = "dir"

// Host is the directory where the agentbox processes of one host keep
// their locks. Use Default; other directories are for tests.
type Host struct {
	dir string

	mu    sync.Mutex
	self  *Owner
	slots map[string]map[int]*os.File // pool → slot → its locked file

	ensured sync.Map // directories ensureDir checked
	// reaped is set once this process has started a ReapDead: Self's
	// tidying is then left undone (one scan per process).
	reaped atomic.Bool

	guardMu sync.Mutex
	guards  []*func() error // see Guard
}

// Guard makes every Record of this process first call wait, and fail with
// its error: a daemon's deathwatch, which removes what the records name
// should the daemon die, is running before anything is recorded, however
// the daemon's start is ordered. Call remove when the guard no longer
// applies.
func (h *Host) Guard(wait func() error) (remove func()) {
	g := &wait
	h.guardMu.Lock()
	h.guards = append(h.guards, g)
	h.guardMu.Unlock()
	return func() {
		h.guardMu.Lock()
		defer h.guardMu.Unlock()
		h.guards = slices.DeleteFunc(h.guards, func(x *func() error) bool { return x == g })
	}
}

// guarded runs the guards (Guard).
func (h *Host) guarded() error {
	h.guardMu.Lock()
	guards := slices.Clone(h.guards)
	h.guardMu.Unlock()
	for _, g := range guards {
		if err := (*g)(); err != nil {
			return err
		}
	}
	return nil
}

// NewHost returns the host directory dir (created on first use).
func NewHost(dir string) *Host {
	return &Host{dir: dir, slots: map[string]map[int]*os.File{}}
}

var defaultHost = sync.OnceValue(func() *Host { return NewHost(DefaultDir()) })

// Default is the host directory every agentbox process on this host
// shares: DefaultDir.
func Default() *Host { return defaultHost() }

// DefaultDir is /run/agentbox for root, else $XDG_RUNTIME_DIR/agentbox,
// else agentbox-UID in the temporary directory. It is not configurable:
// processes that looked in different places could not see each other.
func DefaultDir() string {
	if os.Geteuid() == 0 {
		return "/run/agentbox"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "agentbox")
	}
	return filepath.Join(os.TempDir(), "agentbox-"+strconv.Itoa(os.Geteuid()))
}

// ensureDir creates dir (and the host directory) mode 0700 and checks
// that it is a real directory of ours that nobody else can write: anyone
// who could create files there could hold every slot, or plant records.
func (h *Host) ensureDir(sub string) (string, error) {
	full := filepath.Join(h.dir, sub)
	if _, ok := h.ensured.Load(full); ok {
		return full, nil
	}
	for _, d := range []string{h.dir, full} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			if errors.Is(err, os.ErrNotExist) && d == h.dir {
				if err := os.MkdirAll(d, 0o700); err != nil {
					return "", fmt.Errorf("owner: %w", err)
				}
			} else {
				return "", fmt.Errorf("owner: %w", err)
			}
		}
		var st unix.Stat_t
		if err := unix.Lstat(d, &st); err != nil {
			return "", fmt.Errorf("owner: %w", err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
			return "", fmt.Errorf("owner: %s must be a directory owned by uid %d that only it can write", d, os.Geteuid())
		}
	}
	h.ensured.Store(full, true)
	return full, nil
}

// Owner is this process's identity in a host directory.
type Owner struct {
	id   string
	lock *os.File // flocked for the process's life; never closed
	dir  string   // its records
	seq  atomic.Uint64
}

// ID returns the owner's id.
func (o *Owner) ID() string { return o.id }

// Self returns this process's owner in h, creating its lock on first use.
func (h *Host) Self() (*Owner, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.self != nil {
		return h.self, nil
	}
	owners, err := h.ensureDir("owners")
	if err != nil {
		return nil, err
	}
	var errs []error
	for range 3 { // a reaper may remove a lock being set up; try again
		o, err := newOwner(owners)
		if err == nil {
			h.self = o
			// In a process that reaps nothing itself (a test binary),
			// dead owners that left nothing (every process that ever
			// made a sandbox has one) go now rather than pile up until
			// the next daemon start; those with records are kept for a
			// reaper that knows their kinds. A daemon reaps at start
			// (ReapDead), so this is skipped there; and skipped when
			// another process is reaping (it removes those too).
			go h.tidy()
			return o, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("owner: %w", errors.Join(errs...))
}

// newOwner takes a fresh lock under a temporary name, then publishes it:
// a reaper never sees the final name without the lock held.
func newOwner(owners string) (*Owner, error) {
	id := strconv.Itoa(os.Getpid()) + "-" + rand.Text()
	tmp := filepath.Join(owners, ".new-"+id)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", tmp, err)
	}
	// For whoever looks: which process this is (the lock is what counts;
	// a failed write loses only this note).
	exe, _ := os.Executable()
	_, _ = fmt.Fprintf(f, "pid %d\nexe %s\nsince %s\n", os.Getpid(), exe, time.Now().UTC().Format(time.RFC3339))
	lock := filepath.Join(owners, id+".lock")
	if err := os.Rename(tmp, lock); err != nil {
		f.Close()
		return nil, err
	}
	dir := filepath.Join(owners, id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		// The lock stays: a later reaper removes the empty owner.
		return nil, err
	}
	return &Owner{id: id, lock: f, dir: dir}, nil
}

// Entry is a recorded artefact of this process.
type Entry struct {
	path string
	once sync.Once
}

// Record writes r down as this process's (Self) before the artefact
// exists: if this process dies from now on, the next ReapDead removes it.
// Release the entry once the artefact is gone.
func (h *Host) Record(r Record) (*Entry, error) {
	if err := h.guarded(); err != nil {
		return nil, fmt.Errorf("owner: record %s: %w", r, err)
	}
	o, err := h.Self()
	if err != nil {
		return nil, err
	}
	return o.Record(r)
}

// Record writes r down before the artefact exists (see Host.Record).
func (o *Owner) Record(r Record) (*Entry, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	// A record cut short by a crash is one whose artefact was never
	// made (it comes after the write): ReapDead drops it.
	p := filepath.Join(o.dir, strconv.FormatUint(o.seq.Add(1), 10)+".json")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		return nil, fmt.Errorf("owner: record %s: %w", r, err)
	}
	return &Entry{path: p}, nil
}

// Release forgets the artefact (it is gone). Safe on nil and twice.
func (e *Entry) Release() {
	if e == nil {
		return
	}
	e.once.Do(func() { _ = os.Remove(e.path) }) // absent: forgotten already
}

// Reaper removes one kind of artefact of a dead owner. Reap must be
// idempotent: the artefact may be half gone, or gone.
type Reaper struct {
	Kind string
	Reap func(Record) error
}

// Report is what ReapDead did.
type Report struct {
	// Owners counts the dead owners found.
	Owners int
	// Removed are the artefacts removed; Kept those left for a later run
	// (their reaper failed, or none was given for their kind).
	Removed, Kept []Record
}

// staleSetup is how old a lock being set up must be before a reaper takes
// it for the leftover of a process that died during set-up.
const staleSetup = time.Minute

// ReapDead removes every artefact of every owner in h that is no longer
// alive, kind by kind in the order of reapers, then forgets the owner. An
// owner whose artefacts could not all be removed keeps the rest for a
// later call. Owners that are alive (their lock is held), this process
// among them, are never touched. Reapers take turns (a host-wide lock,
// which ReapDead waits for), so an owner lock found held is always a live
// process's, never another reaper's. Nothing needs to wait for it: a dead
// process's slots are free already (flocks), and every artefact has a
// name of its own; a daemon runs it in the background.
func (h *Host) ReapDead(reapers ...Reaper) (Report, error) {
	h.reaped.Store(true)
	return h.reapDead(true, reapers)
}

// tidy forgets the dead owners that left nothing, unless this process
// has reaped already or another process is reaping now.
func (h *Host) tidy() {
	if !h.reaped.Load() {
		_, _ = h.reapDead(false, nil) // best effort: tidying only
	}
}

// errBusy: another process holds the reaping turn.
var errBusy = errors.New("owner: another process is reaping")

// ReapOwner is ReapDead for owner id alone: it reports whether id is dead
// (its lock free, or its records reaped already) and removes what it
// left. A process's deathwatch calls it the moment that process is gone.
func (h *Host) ReapOwner(id string, reapers ...Reaper) (bool, Report, error) {
	var rep Report
	owners, release, err := h.reapTurn(true)
	if err != nil {
		return false, rep, err
	}
	defer release()
	if _, err := os.Stat(filepath.Join(owners, id+".lock")); errors.Is(err, os.ErrNotExist) {
		return true, rep, nil // reaped already, or never was
	}
	dead, err := reapOwner(owners, id, reapers, &rep)
	return dead, rep, err
}

// reapTurn takes the host-wide reaping turn and returns the owners
// directory and the turn's release; without wait, it returns errBusy at
// once when another process holds the turn.
func (h *Host) reapTurn(wait bool) (string, func(), error) {
	owners, err := h.ensureDir("owners")
	if err != nil {
		return "", nil, err
	}
	turn, err := os.OpenFile(filepath.Join(owners, ".reap"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return "", nil, fmt.Errorf("owner: %w", err)
	}
	how := unix.LOCK_EX
	if !wait {
		how |= unix.LOCK_NB
	}
	if err := flockRetry(turn, how); errors.Is(err, unix.EWOULDBLOCK) {
		turn.Close()
		return "", nil, errBusy
	} else if err != nil {
		turn.Close()
		return "", nil, fmt.Errorf("owner: wait for the reaping turn: %w", err)
	}
	return owners, func() { turn.Close() }, nil // closing ends the turn
}

// reapDead is ReapDead; without wait, it returns errBusy at once when
// another process holds the reaping turn.
func (h *Host) reapDead(wait bool, reapers []Reaper) (Report, error) {
	var rep Report
	owners, release, err := h.reapTurn(wait)
	if err != nil {
		return rep, err
	}
	defer release()
	entries, err := os.ReadDir(owners)
	if err != nil {
		return rep, fmt.Errorf("owner: %w", err)
	}
	self := ""
	h.mu.Lock()
	if h.self != nil {
		self = h.self.id
	}
	h.mu.Unlock()
	var errs []error
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, ".new-"):
			removeStaleSetup(filepath.Join(owners, name))
		case strings.HasSuffix(name, ".lock"):
			id := strings.TrimSuffix(name, ".lock")
			if id == self {
				continue
			}
			dead, err := reapOwner(owners, id, reapers, &rep)
			if err != nil {
				errs = append(errs, err)
			}
			if dead {
				rep.Owners++
			}
		}
	}
	return rep, errors.Join(errs...)
}

// reapOwner reaps owner id if its lock is free. It reports whether the
// owner was dead.
func reapOwner(owners, id string, reapers []Reaper, rep *Report) (bool, error) {
	lockPath := filepath.Join(owners, id+".lock")
	f, err := os.OpenFile(lockPath, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil // reaped meanwhile by another process
	}
	if err != nil {
		return false, fmt.Errorf("owner: %w", err)
	}
	defer f.Close() // unlocks
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil // alive
		}
		return false, fmt.Errorf("owner: lock %s: %w", lockPath, err)
	}
	// Another reaper may have finished with it between our open and our
	// lock: then the name is gone or names another file.
	var held, now unix.Stat_t
	if unix.Fstat(int(f.Fd()), &held) != nil || unix.Stat(lockPath, &now) != nil || held.Ino != now.Ino || held.Dev != now.Dev {
		return false, nil
	}
	dir := filepath.Join(owners, id)
	records, err := readRecords(dir)
	if err != nil {
		return true, err
	}
	var errs []error
	for _, r := range reapers {
		for _, rec := range records {
			if rec.Kind != r.Kind || rec.tried {
				continue
			}
			rec.tried = true
			if err := r.Reap(rec.Record); err != nil {
				errs = append(errs, fmt.Errorf("owner %s: %s: %w", id, rec.Record, err))
				rec.failed = true
				continue
			}
			_ = os.Remove(rec.path) // gone: forget it (a failure here only repeats an idempotent reap)
			rep.Removed = append(rep.Removed, rec.Record)
		}
	}
	kept := false
	for _, rec := range records {
		if !rec.tried || rec.failed {
			// Left for a later run (with a reaper for its kind).
			rep.Kept = append(rep.Kept, rec.Record)
			kept = true
		}
	}
	if !kept {
		// Records first, the lock last: a records directory is never
		// left without its lock.
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("owner: %w", err))
		} else if err := os.Remove(lockPath); err != nil {
			errs = append(errs, fmt.Errorf("owner: %w", err))
		}
	}
	return true, errors.Join(errs...)
}

type record struct {
	Record
	path          string
	tried, failed bool
}

// readRecords reads an owner's records; a record its owner did not finish
// writing stands for an artefact never made and is dropped.
func readRecords(dir string) ([]*record, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("owner: %w", err)
	}
	var out []*record
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var r Record
		if json.Unmarshal(data, &r) != nil || r.Kind == "" {
			_ = os.Remove(p) // cut short by a crash before its artefact existed
			continue
		}
		out = append(out, &record{Record: r, path: p})
	}
	// In the order they were written.
	slices.SortFunc(out, func(a, b *record) int { return seqOf(a.path) - seqOf(b.path) })
	return out, nil
}

func seqOf(p string) int {
	n, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(p), ".json"))
	return n
}

// flockRetry is flock(2) retried on EINTR.
func flockRetry(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// removeStaleSetup removes a lock whose process died while setting it up.
func removeStaleSetup(p string) {
	st, err := os.Stat(p)
	if err != nil || time.Since(st.ModTime()) < staleSetup {
		return
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
		_ = os.Remove(p) // best effort: a leftover of a dead process
	}
}

// ReapDir is the Reaper of KindDir: it removes the tree at r.Path (see
// RemoveTree).
func ReapDir(r Record) error { return RemoveTree(r.Path) }

// RemoveTree removes the directory tree at dir, after detaching every
// mount at or below it; it refuses (and removes nothing) when a mount is
// still there, so it never deletes through a mount into a host directory.
// A missing dir is not an error.
func RemoveTree(dir string) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) == "/" {
		return fmt.Errorf("owner: refusing to remove %q", dir)
	}
	dir = filepath.Clean(dir)
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := unmountUnder(dir); err != nil {
		return err
	}
	left, err := mountinfo.Under(dir)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("owner: %s still has mounts below it: %s", dir, strings.Join(left, ", "))
	}
	return os.RemoveAll(dir)
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	mounts, err := mountinfo.Under(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

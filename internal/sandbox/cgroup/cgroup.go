// Package cgroup puts a sandbox's process tree into its own control group,
// limits its memory, tasks and CPU, reports what it used and why it died
// (OOM kills, pids-limit hits), and kills the whole tree.
//
// It speaks cgroup v1 (legacy and hybrid hosts, like the CI machines, where
// the controllers live on v1) and cgroup v2 (unified hosts). The mode comes
// from github.com/containerd/cgroups/v3's Mode(); the control files are
// written directly, because the library's cgroup1/cgroup2 packages drag in
// systemd, D-Bus and eBPF dependencies, freeze without a bound, and do not
// read pids.events. Groups live under one parent, "agentbox", in every
// hierarchy, so stale ones are easy to find.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	cgroups "github.com/containerd/cgroups/v3"

	"github.com/agentbox/agentbox/internal/sandbox/mountinfo"
)

// Parent is the directory under each hierarchy's root that holds every
// sandbox's group.
const Parent = "agentbox"

// Limits of one group. A zero field means no limit of that kind.
type Limits struct {
	MemoryBytes int64   // memory (and memory+swap: no swapping) of the tree
	CPUs        float64 // CFS quota in cores, e.g. 0.5
	Pids        int64   // tasks (threads count) in the tree
}

// Stats is what a group's tree used and hit.
type Stats struct {
	MemoryMaxBytes int64  // peak memory charge (v1 max_usage; v2 memory.peak)
	CPUMillis      int64  // CPU time of every task, user + system
	OOMKills       uint64 // tasks the kernel OOM-killed for this group's limit
	PidsMaxHits    uint64 // fork/clone calls refused by the pids limit
	CPUThrottled   uint64 // CFS periods in which the quota throttled the tree
	Tasks          int    // processes in the group now
	PidsCurrent    int64  // tasks (threads included) counted by the pids controller
}

// Group is one sandbox's control group.
type Group struct {
	name string
	v2   bool
	// dirs maps a controller to the group's directory in its hierarchy;
	// on v2 every controller maps to the same directory.
	dirs map[string]string
}

// validName reports whether name matches ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$
// (by hand: a package-level regexp costs every start of the binary,
// sandbox inits included, half a millisecond).
func validName(name string) bool {
	if name == "" || len(name) > 128 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// controllers the package uses. On v1 each is its own hierarchy (or a
// co-mounted one such as cpu,cpuacct).
var v1Controllers = []string{"memory", "pids", "cpu", "cpuacct", "freezer"}
var v2Controllers = []string{"memory", "pids", "cpu"}

// New creates the group Parent/name with limits l. It fails, naming the
// controller, when a limit that is set has no controller here. The caller
// Adds processes (before they run the workload: v1 has no way to start a
// process inside a group) and must Delete the group.
func New(name string, l Limits) (*Group, error) {
	if !validName(name) {
		return nil, fmt.Errorf("cgroup: invalid group name %q", name)
	}
	h, err := hierarchies()
	if err != nil {
		return nil, err
	}
	g := &Group{name: name, v2: h.v2, dirs: map[string]string{}}
	need := map[string]bool{"memory": l.MemoryBytes > 0, "pids": l.Pids > 0, "cpu": l.CPUs > 0}
	for c, needed := range need {
		if needed && h.roots[c] == "" {
			return nil, fmt.Errorf("cgroup: the %s controller is not available (cgroup %s); it is needed for the %s limit", c, h.version(), c)
		}
	}
	if h.v2 {
		if err := enableV2(h.roots); err != nil {
			return nil, err
		}
	}
	created := map[string]bool{}
	for c, root := range h.roots {
		dir := filepath.Join(root, Parent, name)
		g.dirs[c] = dir
		if created[dir] {
			continue // co-mounted controllers, or v2
		}
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return nil, g.deleteAfter(fmt.Errorf("cgroup: %w", err))
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, g.deleteAfter(fmt.Errorf("cgroup: create group: %w", err))
		}
		created[dir] = true
	}
	if err := g.setLimits(l); err != nil {
		return nil, g.deleteAfter(err)
	}
	return g, nil
}

// deleteAfter removes a group New failed to finish and returns err, joined
// with the removal's error: a group left behind is leaked, so say so.
func (g *Group) deleteAfter(err error) error {
	if derr := g.Delete(); derr != nil {
		return errors.Join(err, derr)
	}
	return err
}

// Name returns the group's name under Parent.
func (g *Group) Name() string { return g.name }

// Version returns "v1" or "v2".
func (g *Group) Version() string {
	if g.v2 {
		return "v2"
	}
	return "v1"
}

// Dir returns the group's directory in the hierarchy of controller c
// ("" if absent). On v2 any controller gives the one directory, which can
// be opened for SysProcAttr.UseCgroupFD.
func (g *Group) Dir(c string) string { return g.dirs[c] }

// SetLimits writes limits l into the group: New with no limits and then
// SetLimits(l) is New with l, for a caller that makes the group, and puts
// a process in it, before it knows the limits. It fails, naming the
// controller, when a limit that is set has no controller here.
func (g *Group) SetLimits(l Limits) error {
	need := map[string]bool{"memory": l.MemoryBytes > 0, "pids": l.Pids > 0, "cpu": l.CPUs > 0}
	for c, needed := range need {
		if needed && g.dirs[c] == "" {
			return fmt.Errorf("cgroup: the %s controller is not available (cgroup %s); it is needed for the %s limit", c, g.Version(), c)
		}
	}
	return g.setLimits(l)
}

func (g *Group) setLimits(l Limits) error {
	var writes [][2]string // file path, value; in order
	if l.MemoryBytes > 0 {
		m := strconv.FormatInt(l.MemoryBytes, 10)
		d := g.dirs["memory"]
		if g.v2 {
			writes = append(writes, [2]string{filepath.Join(d, "memory.max"), m})
			if exists(filepath.Join(d, "memory.swap.max")) {
				writes = append(writes, [2]string{filepath.Join(d, "memory.swap.max"), "0"})
			}
		} else {
			// memsw must not be below the memory limit, so it comes
			// second; equal values mean the tree cannot swap.
			writes = append(writes, [2]string{filepath.Join(d, "memory.limit_in_bytes"), m})
			if exists(filepath.Join(d, "memory.memsw.limit_in_bytes")) {
				writes = append(writes, [2]string{filepath.Join(d, "memory.memsw.limit_in_bytes"), m})
			}
		}
	}
	if l.Pids > 0 {
		writes = append(writes, [2]string{filepath.Join(g.dirs["pids"], "pids.max"), strconv.FormatInt(l.Pids, 10)})
	}
	if l.CPUs > 0 {
		const period = 100000 // µs
		quota := max(int64(l.CPUs*period), 1000)
		d := g.dirs["cpu"]
		if g.v2 {
			writes = append(writes, [2]string{filepath.Join(d, "cpu.max"), fmt.Sprintf("%d %d", quota, period)})
		} else {
			writes = append(writes,
				[2]string{filepath.Join(d, "cpu.cfs_period_us"), strconv.Itoa(period)},
				[2]string{filepath.Join(d, "cpu.cfs_quota_us"), strconv.FormatInt(quota, 10)})
		}
	}
	for _, w := range writes {
		if err := os.WriteFile(w[0], []byte(w[1]), 0); err != nil {
			return fmt.Errorf("cgroup: set limit: %w", err)
		}
	}
	return nil
}

// SetPids changes the pids limit (0: no limit), e.g. once a runtime knows
// how many tasks of its own the group holds.
func (g *Group) SetPids(n int64) error {
	d := g.dirs["pids"]
	if d == "" {
		return errors.New("cgroup: the pids controller is not available")
	}
	v := "max"
	if n > 0 {
		v = strconv.FormatInt(n, 10)
	}
	if err := os.WriteFile(filepath.Join(d, "pids.max"), []byte(v), 0); err != nil {
		return fmt.Errorf("cgroup: set pids limit: %w", err)
	}
	return nil
}

// Add moves process pid (all its threads) into the group, in every
// hierarchy.
func (g *Group) Add(pid int) error {
	for _, dir := range g.uniqueDirs() {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("cgroup: add pid %d: %w", pid, err)
		}
	}
	return nil
}

// uniqueDirs returns the group's directories, each once, freezer first so
// a kill sees the freezer's view.
func (g *Group) uniqueDirs() []string {
	var out []string
	for _, c := range append([]string{"freezer"}, v1Controllers...) {
		if d := g.dirs[c]; d != "" && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// procsDir is the directory whose cgroup.procs is authoritative.
func (g *Group) procsDir() string {
	if d := g.uniqueDirs(); len(d) > 0 {
		return d[0]
	}
	return ""
}

// Pids returns the processes in the group.
func (g *Group) Pids() ([]int, error) {
	return readPids(filepath.Join(g.procsDir(), "cgroup.procs"))
}

// killWait bounds how long Kill waits for the group to empty; a task in
// uninterruptible sleep can take a while to die.
const killWait = 10 * time.Second

// Kill kills every process in the group and waits (bounded) until the
// group is empty. The tree is frozen first so nothing can fork while the
// kills are sent; SIGKILL is delivered when it thaws.
func (g *Group) Kill() error {
	if g.v2 && exists(filepath.Join(g.procsDir(), "cgroup.kill")) {
		if err := os.WriteFile(filepath.Join(g.procsDir(), "cgroup.kill"), []byte("1"), 0); err != nil {
			return fmt.Errorf("cgroup: kill: %w", err)
		}
		return g.waitEmpty()
	}
	frozen := g.freeze(true) == nil
	pids, err := g.Pids()
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		_ = g.freeze(false) // best effort; the listing error is the one to report
		return fmt.Errorf("cgroup: kill: %w", err)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL) // ESRCH: it died already
	}
	if frozen {
		if err := g.freeze(false); err != nil {
			return fmt.Errorf("cgroup: thaw after kill: %w", err)
		}
	}
	return g.waitEmpty()
}

func (g *Group) waitEmpty() error {
	deadline := time.Now().Add(killWait)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		pids, err := g.Pids()
		if errors.Is(err, os.ErrNotExist) || (err == nil && len(pids) == 0) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cgroup: kill: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup: kill: %d processes still in %s after %v: %v", len(pids), g.name, killWait, pids)
		}
		// Without a freezer a process may have forked between the listing
		// and the kill; kill what is there now.
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL) // ESRCH: it died already
		}
		time.Sleep(delay)
	}
}

// freeze freezes (or thaws) the tree and waits, up to a second, for the
// state to settle. It fails when there is no freezer.
func (g *Group) freeze(on bool) error {
	var file, want, got string
	if g.v2 {
		file = filepath.Join(g.procsDir(), "cgroup.freeze")
		want = map[bool]string{true: "1", false: "0"}[on]
	} else {
		if g.dirs["freezer"] == "" {
			return errors.New("cgroup: no freezer controller")
		}
		file = filepath.Join(g.dirs["freezer"], "freezer.state")
		want = map[bool]string{true: "FROZEN", false: "THAWED"}[on]
	}
	deadline := time.Now().Add(time.Second)
	for {
		if err := os.WriteFile(file, []byte(want), 0); err != nil {
			return err
		}
		if g.v2 {
			// cgroup.freeze reads back what was asked; the settled state
			// is "frozen N" in cgroup.events.
			ev, err := readKV(filepath.Join(g.procsDir(), "cgroup.events"))
			if err != nil {
				return err
			}
			got = strconv.FormatUint(ev["frozen"], 10)
		} else {
			b, err := os.ReadFile(file)
			if err != nil {
				return err
			}
			got = strings.TrimSpace(string(b))
		}
		if got == want || time.Now().After(deadline) {
			return nil // a stuck FREEZING still stops most forks
		}
		time.Sleep(time.Millisecond)
	}
}

// Stats reads what the group used so far.
func (g *Group) Stats() (Stats, error) {
	var s Stats
	var errs []error
	read := func(f func() error) {
		if err := f(); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if d := g.dirs["memory"]; d != "" {
		if g.v2 {
			read(func() (err error) {
				if s.MemoryMaxBytes, err = readInt(filepath.Join(d, "memory.peak")); errors.Is(err, os.ErrNotExist) {
					s.MemoryMaxBytes, err = readInt(filepath.Join(d, "memory.current")) // kernels before 5.19
				}
				return err
			})
			read(func() error {
				ev, err := readKV(filepath.Join(d, "memory.events"))
				s.OOMKills = ev["oom_kill"]
				return err
			})
		} else {
			read(func() (err error) {
				s.MemoryMaxBytes, err = readInt(filepath.Join(d, "memory.max_usage_in_bytes"))
				return err
			})
			read(func() error {
				ev, err := readKV(filepath.Join(d, "memory.oom_control"))
				s.OOMKills = ev["oom_kill"]
				return err
			})
		}
	}
	if d := g.dirs["pids"]; d != "" {
		read(func() error {
			ev, err := readKV(filepath.Join(d, "pids.events"))
			s.PidsMaxHits = ev["max"]
			return err
		})
		read(func() (err error) {
			s.PidsCurrent, err = readInt(filepath.Join(d, "pids.current"))
			return err
		})
	}
	if g.v2 {
		read(func() error {
			st, err := readKV(filepath.Join(g.dirs["cpu"], "cpu.stat"))
			s.CPUMillis = int64(st["usage_usec"] / 1000)
			s.CPUThrottled = st["nr_throttled"]
			return err
		})
	} else {
		if d := g.dirs["cpuacct"]; d != "" {
			read(func() error {
				ns, err := readInt(filepath.Join(d, "cpuacct.usage"))
				s.CPUMillis = ns / 1e6
				return err
			})
		}
		if d := g.dirs["cpu"]; d != "" {
			read(func() error {
				st, err := readKV(filepath.Join(d, "cpu.stat"))
				s.CPUThrottled = st["nr_throttled"]
				return err
			})
		}
	}
	read(func() error {
		pids, err := g.Pids()
		s.Tasks = len(pids)
		return err
	})
	if len(errs) > 0 {
		return s, fmt.Errorf("cgroup: stats of %s: %w", g.name, errors.Join(errs...))
	}
	return s, nil
}

// Delete removes the group from every hierarchy. The group must be empty
// (Kill first). It is safe to call twice.
func (g *Group) Delete() error {
	var errs []error
	for _, dir := range g.uniqueDirs() {
		if err := rmdir(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("cgroup: delete %s: %w", g.name, errors.Join(errs...))
	}
	return nil
}

// rmdir removes a cgroup directory; right after its last task died the
// kernel can still answer EBUSY for a moment.
func rmdir(dir string) error {
	var err error
	for delay := time.Millisecond; delay < 500*time.Millisecond; delay *= 2 {
		err = syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(delay)
	}
	return fmt.Errorf("remove %s: %w", dir, err)
}

// KindCgroup is the kind of the owner record (package owner) of a group:
// its Name is the group's name under Parent, and Remove is its reaper.
const KindCgroup = "cgroup"

// Remove kills every process in the group Parent/name and removes the
// group from every cgroup hierarchy mounted, those this package does not
// manage included (runsc adds its containers' groups there). A group that
// does not exist is not an error. It is how the group of a sandbox whose
// daemon died is removed: the processes in it are that sandbox's.
func Remove(name string) error {
	if !validName(name) {
		return fmt.Errorf("cgroup: invalid group name %q", name)
	}
	// One read of the mount table for both: the hierarchies this
	// package manages and every cgroup mount.
	ms, err := mountinfo.Read()
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	h, err := hierarchiesIn(ms)
	if err != nil {
		return err
	}
	g := &Group{name: name, v2: h.v2, dirs: map[string]string{}}
	for c, root := range h.roots {
		if dir := filepath.Join(root, Parent, name); exists(dir) {
			g.dirs[c] = dir
		}
	}
	if len(g.dirs) > 0 {
		if err := g.Kill(); err != nil {
			return err
		}
		if err := g.Delete(); err != nil {
			return err
		}
	}
	var errs []error
	for _, mp := range allCgroupMounts(ms) {
		if err := rmdir(filepath.Join(mp, Parent, name)); err != nil {
			errs = append(errs, fmt.Errorf("cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}

// allCgroupMounts lists the mount point of every cgroup and cgroup2 file
// system in ms, each once.
func allCgroupMounts(ms []mountinfo.Mount) []string {
	var out []string
	for _, m := range ms {
		if (m.FSType == "cgroup" || m.FSType == "cgroup2") && !slices.Contains(out, m.Point) {
			out = append(out, m.Point)
		}
	}
	return out
}

// RemoveStale deletes groups under Parent that are empty and were created
// more than olderThan ago: leftovers of a daemon that crashed. Groups with
// processes are left alone (their owner may still be running). It returns
// the names removed.
func RemoveStale(olderThan time.Duration) ([]string, error) {
	h, err := hierarchies()
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	seen := map[string]bool{}
	for _, root := range h.roots {
		parent := filepath.Join(root, Parent)
		if seen[parent] {
			continue
		}
		seen[parent] = true
		entries, err := os.ReadDir(parent)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			dir := filepath.Join(parent, e.Name())
			info, err := e.Info()
			if err != nil || time.Since(info.ModTime()) < olderThan {
				continue
			}
			if pids, err := readPids(filepath.Join(dir, "cgroup.procs")); err != nil || len(pids) > 0 {
				continue
			}
			if err := rmdir(dir); err != nil {
				errs = append(errs, err)
				continue
			}
			if !slices.Contains(removed, e.Name()) {
				removed = append(removed, e.Name())
			}
		}
	}
	slices.Sort(removed)
	return removed, errors.Join(errs...)
}

// hier is where this host's controllers are.
type hier struct {
	v2   bool
	mode cgroups.CGMode
	// roots maps each usable controller to its hierarchy's mount point.
	roots map[string]string
}

func (h hier) version() string {
	if h.v2 {
		return "v2"
	}
	return "v1"
}

// hierarchies finds the mount points of the controllers this package uses.
func hierarchies() (hier, error) {
	ms, err := mountinfo.Read()
	if err != nil {
		return hier{}, fmt.Errorf("cgroup: %w", err)
	}
	return hierarchiesIn(ms)
}

// hierarchiesIn is hierarchies in the mount table ms.
func hierarchiesIn(ms []mountinfo.Mount) (hier, error) {
	h := hier{mode: cgroups.Mode(), roots: map[string]string{}}
	mounts := mountTable{v1: map[string]string{}}
	mounts.add(ms)
	switch h.mode {
	case cgroups.Unavailable:
		return h, errors.New("cgroup: no cgroup file system is mounted at /sys/fs/cgroup")
	case cgroups.Unified:
		h.v2 = true
		root := mounts.v2
		if root == "" {
			return h, errors.New("cgroup: unified mode but no cgroup2 mount found")
		}
		b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
		if err != nil {
			return h, fmt.Errorf("cgroup: %w", err)
		}
		avail := strings.Fields(string(b))
		for _, c := range v2Controllers {
			if slices.Contains(avail, c) {
				h.roots[c] = root
			}
		}
	default: // legacy or hybrid: the controllers we use are on v1
		for _, c := range v1Controllers {
			if m := mounts.v1[c]; m != "" {
				h.roots[c] = m
			}
		}
	}
	return h, nil
}

// enableV2 turns the controllers on for the children of the root and of
// Parent ("+memory +pids +cpu" in cgroup.subtree_control).
func enableV2(roots map[string]string) error {
	var root string
	var ctrls []string
	for _, c := range v2Controllers {
		if r := roots[c]; r != "" {
			root = r
			ctrls = append(ctrls, "+"+c)
		}
	}
	if root == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(root, Parent), 0o755); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	for _, d := range []string{root, filepath.Join(root, Parent)} {
		if err := os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte(strings.Join(ctrls, " ")), 0); err != nil {
			return fmt.Errorf("cgroup: enable %s in %s: %w", strings.Join(ctrls, " "), d, err)
		}
	}
	return nil
}

type mountTable struct {
	v1 map[string]string // controller → mount point
	v2 string
}

// add fills t from the cgroup mounts among ms: the first cgroup2 mount,
// and the first mount of each v1 controller.
func (t *mountTable) add(ms []mountinfo.Mount) {
	for _, m := range ms {
		switch m.FSType {
		case "cgroup2":
			if t.v2 == "" {
				t.v2 = m.Point
			}
		case "cgroup":
			for _, o := range m.SuperOptions {
				if slices.Contains(v1Controllers, o) && t.v1[o] == "" {
					t.v1[o] = m.Point
				}
			}
		}
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func readInt(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	return n, nil
}

// readKV reads "key value" lines (memory.oom_control, pids.events,
// cpu.stat, memory.events).
func readKV(p string) (map[string]uint64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}

func readPids(p string) ([]int, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, n)
	}
	return out, nil
}

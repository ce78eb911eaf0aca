package workspace

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

func resourceViolations(vs []sandbox.Violation) map[string]sandbox.Violation {
	out := map[string]sandbox.Violation{}
	for _, v := range vs {
		if v.Kind == sandbox.ViolationResource {
			out[v.Rule] = v
		}
	}
	return out
}

func TestCommitDiskBudgetAndHoles(t *testing.T) {
	ws, upper := t.TempDir(), t.TempDir()
	// 1 GiB of apparent size, no data: copied dense it would be 1 GiB of
	// blocks on the host.
	big, err := os.Create(filepath.Join(upper, "big.img"))
	must(t, err)
	must(t, big.Truncate(1<<30))
	must(t, big.Close())
	// 8 MiB apparent, 4 KiB of data in the middle: within the budget,
	// copied with its holes.
	sp, err := os.Create(filepath.Join(upper, "sparse.img"))
	must(t, err)
	must(t, sp.Truncate(8<<20))
	_, err = sp.WriteAt([]byte(strings.Repeat("x", 4096)), 4<<20)
	must(t, err)
	must(t, sp.Close())
	write(t, upper, "small.txt", "small\n", 0o644)

	opts := testOptions(nil)
	opts.DiskBytes = 16 << 20
	vs, err := Commit(t.Context(), upper, ws, opts)
	must(t, err)
	rv := resourceViolations(vs)
	if v, ok := rv["limit:disk"]; !ok || v.Target != "big.img" || len(vs) != 1 {
		t.Errorf("violations %+v, want one limit:disk for big.img", vs)
	}
	if _, err := os.Lstat(filepath.Join(ws, "big.img")); err == nil {
		t.Error("a file past the disk budget reached the host")
	}
	var st unix.Stat_t
	must(t, unix.Stat(filepath.Join(ws, "sparse.img"), &st))
	if st.Size != 8<<20 {
		t.Errorf("sparse.img has %d bytes, want %d", st.Size, 8<<20)
	}
	if st.Blocks*512 > 256<<10 {
		t.Errorf("sparse.img takes %d bytes of blocks on the host: its holes were filled", st.Blocks*512)
	}
	b, err := os.ReadFile(filepath.Join(ws, "sparse.img"))
	must(t, err)
	if strings.Count(string(b), "x") != 4096 || b[4<<20] != 'x' || b[0] != 0 {
		t.Error("sparse.img content differs from the upper layer's")
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "small.txt")); string(got) != "small\n" {
		t.Errorf("small.txt = %q", got)
	}
}

func TestCommitFilesBudget(t *testing.T) {
	ws, upper := t.TempDir(), t.TempDir()
	for i := range 300 {
		write(t, upper, fmt.Sprintf("d%d/f%03d", i%3, i), "x", 0o644)
	}
	opts := testOptions(nil)
	opts.Files = 100
	c := &Committer{Upper: upper, Workspace: ws, Options: opts}
	for round := range 3 {
		vs, err := c.Commit(t.Context())
		must(t, err)
		n := 0
		must(t, filepath.WalkDir(ws, func(p string, d os.DirEntry, err error) error {
			if p != ws {
				n++
			}
			return err
		}))
		if n != 100 {
			t.Errorf("round %d: %d entries on the host, want the limit, 100", round, n)
		}
		if round == 0 {
			// d0 and 99 of its files fit; its last file, d1 and d2
			// (with what is in them) do not.
			if v, ok := resourceViolations(vs)["limit:files"]; !ok || len(vs) != 1 || !strings.Contains(v.Detail, ": 3 entries") {
				t.Errorf("violations %+v, want one limit:files for 3 entries", vs)
			}
		}
	}
}

// fdLimit makes every descriptor above the ones open now plus extra fail
// with EMFILE until the returned function is called.
func fdLimit(t *testing.T, extra int) func() {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	must(t, err)
	highest := 0
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > highest {
			highest = n
		}
	}
	var old unix.Rlimit
	must(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &old))
	lim := old
	lim.Cur = uint64(highest + 1 + extra)
	must(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &lim))
	return func() { must(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &old)) }
}

// chain makes n nested directories "d" below dir, without ever holding
// more than two descriptors, and a file at the bottom.
func chain(t *testing.T, dir string, n int) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	for range n {
		must(t, unix.Mkdirat(fd, "d", 0o755))
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		must(t, err)
		unix.Close(fd)
		fd = next
	}
	f, err := unix.Openat(fd, "bottom", unix.O_CREAT|unix.O_WRONLY, 0o644)
	must(t, err)
	unix.Close(f)
	unix.Close(fd)
}

func depthOf(t *testing.T, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	n := 0
	for {
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			return n
		}
		fd = next
		n++
	}
}

func TestCommitDeepTreeBoundedDescriptors(t *testing.T) {
	ws, upper := t.TempDir(), t.TempDir()
	// (The escape suite commits 12 000 levels from a real sandbox; here
	// 2 000 keep the test's own cleanup quick.)
	chain(t, upper, 2000)
	write(t, upper, "ok.txt", "ok\n", 0o644)
	// The commit gets 64 descriptors beyond what the test holds; one per
	// level and side would need 4 000.
	restore := fdLimit(t, 64)
	vs, err := Commit(t.Context(), upper, ws, testOptions(nil))
	restore()
	must(t, err)
	if got := depthOf(t, ws); got != DefaultMaxDepth {
		t.Errorf("host tree is %d levels deep, want the limit %d", got, DefaultMaxDepth)
	}
	v, ok := resourceViolations(vs)["limit:depth"]
	if !ok || len(vs) != 1 || !strings.HasPrefix(v.Target, strings.Repeat("d/", DefaultMaxDepth)) {
		t.Errorf("violations %+v, want one limit:depth", vs)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "ok.txt")); string(b) != "ok\n" {
		t.Error("a file beside the deep tree was not applied")
	}

	// A host workspace deeper than the limit may hold a repository the
	// commit cannot find: a project commit fails closed, applying nothing.
	ws2, upper2 := t.TempDir(), t.TempDir()
	chain(t, ws2, DefaultMaxDepth+40)
	must(t, unix.Mknod(filepath.Join(upper2, "d"), unix.S_IFCHR, 0)) // whiteout
	if _, err := Commit(t.Context(), upper2, ws2, testOptions(nil)); err == nil || !strings.Contains(err.Error(), "deeper than") {
		t.Errorf("commit over a host tree deeper than the limit: %v, want it refused", err)
	}
	if got := depthOf(t, ws2); got != DefaultMaxDepth+40 {
		t.Errorf("a refused commit changed the host tree (%d levels left)", got)
	}
	// In a state directory (no repositories to find), removing a host
	// tree deeper than the limit keeps what is below the limit, and so
	// the directories above it.
	restore = fdLimit(t, 64)
	private := testOptions(nil)
	private.Private = true
	vs, err = Commit(t.Context(), upper2, ws2, private)
	restore()
	must(t, err)
	if got := depthOf(t, ws2); got != DefaultMaxDepth+40 {
		t.Errorf("after removing a deep host tree, %d levels are left, want %d (what is past the limit stays)", got, DefaultMaxDepth+40)
	}
	if _, ok := resourceViolations(vs)["limit:depth"]; !ok {
		t.Errorf("violations %+v, want a limit:depth", vs)
	}
}

func TestDirCacheBounded(t *testing.T) {
	root := t.TempDir()
	chain(t, root, 100)
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	defer unix.Close(fd)
	d := &dirCache{root: fd}
	defer d.close()
	rel := ""
	for range 100 {
		rel = join(rel, "d")
		if _, err := d.open(rel); err != nil {
			t.Fatal(err)
		}
		if len(d.chain) > dirCacheSize {
			t.Fatalf("cache holds %d descriptors", len(d.chain))
		}
	}
	// Back near the root and down again: reopened from the root.
	for _, depth := range []int{3, 99, 1, 50} {
		p := strings.TrimSuffix(strings.Repeat("d/", depth), "/")
		dfd, err := d.open(p)
		if err != nil {
			t.Fatalf("open depth %d: %v", depth, err)
		}
		var st, want unix.Stat_t
		must(t, unix.Fstat(dfd, &st))
		must(t, unix.Stat(filepath.Join(root, p), &want))
		if st.Ino != want.Ino {
			t.Fatalf("depth %d: the cache returned another directory", depth)
		}
	}
	// A symlink on the way is never followed.
	must(t, os.Rename(filepath.Join(root, "d/d"), filepath.Join(root, "moved")))
	must(t, os.Symlink(filepath.Join(root, "moved"), filepath.Join(root, "d/d")))
	d.close()
	if _, err := d.open("d/d/d"); err == nil {
		t.Fatal("open followed a symlink")
	}
}

//go:build linux && (amd64 || arm64)

package prefault

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestFirstArg(t *testing.T) {
	for _, tc := range []struct {
		cmdline, want string
	}{
		{"agentbox\x00serve\x00--listen\x00127.0.0.1:0\x00", "serve"},
		{"/usr/local/bin/agentbox\x00serve\x00", "serve"},
		{"agentbox\x00--url\x00x\x00serve\x00", "--url"},
		{"agentbox\x00sessions\x00", "sessions"},
		{"agentbox-sandbox-init\x00", ""},
		{"agentbox\x00", ""},
		{"", ""},
		{"agentbox\x00ser", ""},           // cut short: not "ser"
		{"agentbox\x00serve", ""},         // cut short: not known to be whole
		{"agentbox\x00\x00serve\x00", ""}, // an empty first argument
	} {
		if got := firstArg([]byte(tc.cmdline)); got != tc.want {
			t.Errorf("firstArg(%q) = %q, want %q", tc.cmdline, got, tc.want)
		}
	}
}

// TestNotServing: the test binary is not `serve`, so its init did nothing.
func TestNotServing(t *testing.T) {
	if serving() {
		t.Fatal("serving() in a test binary")
	}
	if r := Start(); r != (Result{}) {
		t.Fatalf("Start() = %+v in a process that is not serve", r)
	}
}

// exeMapping is one of the process's mappings of its executable.
type exeMapping struct {
	lo, hi uintptr
	perms  string
	rss    int64 // bytes
}

// exeMappings reads the process's mappings of its executable from
// /proc/self/smaps.
func exeMappings(t *testing.T) []exeMapping {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []exeMapping
	var cur *exeMapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 6 && strings.Contains(fs[0], "-") && !strings.HasSuffix(fs[0], ":") {
			cur = nil
			if fs[5] == exe {
				lo, hi, _ := strings.Cut(fs[0], "-")
				l, _ := strconv.ParseUint(lo, 16, 64)
				h, _ := strconv.ParseUint(hi, 16, 64)
				out = append(out, exeMapping{lo: uintptr(l), hi: uintptr(h), perms: fs[1]})
				cur = &out[len(out)-1]
			}
			continue
		}
		if cur != nil && len(fs) >= 2 && fs[0] == "Rss:" {
			kb, _ := strconv.ParseInt(fs[1], 10, 64)
			cur.rss = kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// readOnly are the mappings of ms that are neither writable nor empty.
func readOnly(ms []exeMapping) []exeMapping {
	var out []exeMapping
	for _, m := range ms {
		if m.perms[1] != 'w' {
			out = append(out, m)
		}
	}
	return out
}

// TestPopulateImage drops the test binary's read-only pages (as
// internal/residency does), so that only what runs touches them again, and
// checks that populateImage maps them all.
func TestPopulateImage(t *testing.T) {
	ro := readOnly(exeMappings(t))
	if len(ro) == 0 {
		t.Fatal("no read-only mapping of the executable in /proc/self/smaps")
	}
	var size uintptr
	for _, m := range ro {
		size += m.hi - m.lo
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.lo, m.hi-m.lo, unix.MADV_DONTNEED); errno != 0 {
			t.Fatalf("madvise DONTNEED %#x-%#x: %v", m.lo, m.hi, errno)
		}
	}
	before := readOnly(exeMappings(t))
	r := populateImage()
	after := readOnly(exeMappings(t))
	if r.Errno == uintptr(unix.EINVAL) {
		t.Skipf("this kernel has no MADV_POPULATE_READ (Linux 5.14): %v", unix.Errno(r.Errno))
	}
	if r.Errno != 0 {
		t.Fatalf("populateImage: %v", unix.Errno(r.Errno))
	}
	if r.Image != size {
		t.Errorf("populateImage mapped %d bytes, want the read-only mappings' %d", r.Image, size)
	}
	for i, m := range after {
		t.Logf("%#x-%#x %s: resident %d KiB before, %d KiB after, of %d KiB", m.lo, m.hi, m.perms, before[i].rss>>10, m.rss>>10, (m.hi-m.lo)>>10)
		if m.rss != int64(m.hi-m.lo) {
			t.Errorf("%#x-%#x %s: %d of %d KiB resident after populateImage", m.lo, m.hi, m.perms, m.rss>>10, (m.hi-m.lo)>>10)
		}
	}
}

// TestPopulateSegments: which ranges populateSegments gives madvise, for
// the program headers of a static executable and of a position-independent
// one (loaded at a bias, which its PT_PHDR tells), and what it reports when
// madvise fails.
func TestPopulateSegments(t *testing.T) {
	type call struct{ addr, n uintptr }
	static := []*phdr{
		{typ: ptPHDR, flags: 4, vaddr: 0x400040},
		{typ: ptLOAD, flags: 5, vaddr: 0x400000, filesz: 0x89e031, memsz: 0x89e031},  // text
		{typ: ptLOAD, flags: 4, vaddr: 0xc9f000, filesz: 0x868298, memsz: 0x868298},  // rodata
		{typ: ptLOAD, flags: 6, vaddr: 0x1508000, filesz: 0x94780, memsz: 0x20dfb80}, // data, bss
		{typ: 0x6474e551, flags: 6},                                                  // GNU_STACK
	}
	pie := []*phdr{
		{typ: ptPHDR, flags: 4, vaddr: 0x40},
		{typ: ptLOAD, flags: 4, vaddr: 0, filesz: 0x1234},
		{typ: ptLOAD, flags: 5, vaddr: 0x2000, filesz: 0x10},
		{typ: ptLOAD, flags: 6, vaddr: 0x4000, filesz: 0x100},
		{typ: ptLOAD, flags: 4, vaddr: 0x8000, filesz: 0}, // nothing from the file
	}
	for _, tc := range []struct {
		name  string
		hdrs  []*phdr
		at    uintptr
		page  uintptr
		errno uintptr
		want  []call
		res   Result
	}{
		{name: "static", hdrs: static, at: 0x400040, page: 4096,
			want: []call{{0x400000, 0x89f000}, {0xc9f000, 0x869000}},
			res:  Result{Image: 0x89f000 + 0x869000}},
		{name: "pie", hdrs: pie, at: 0x5555_0000_0040, page: 4096,
			want: []call{{0x5555_0000_0000, 0x2000}, {0x5555_0000_2000, 0x1000}},
			res:  Result{Image: 0x3000}},
		{name: "pie 64 KiB pages", hdrs: pie, at: 0x5555_0000_0040, page: 64 << 10,
			want: []call{{0x5555_0000_0000, 0x10000}, {0x5555_0000_0000, 0x10000}},
			res:  Result{Image: 0x20000}},
		{name: "old kernel", hdrs: static, at: 0x400040, page: 4096, errno: uintptr(unix.EINVAL),
			want: []call{{0x400000, 0x89f000}, {0xc9f000, 0x869000}},
			res:  Result{Errno: uintptr(unix.EINVAL)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []call
			r := populateSegments(tc.hdrs, tc.at, tc.page, func(addr, n, advice uintptr) uintptr {
				if advice != madvPopulateRead {
					t.Errorf("advice %d, want MADV_POPULATE_READ", advice)
				}
				got = append(got, call{addr, n})
				return tc.errno
			})
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("madvise calls %#x, want %#x", got, tc.want)
			}
			if r != tc.res {
				t.Errorf("result %+v, want %+v", r, tc.res)
			}
		})
	}
}

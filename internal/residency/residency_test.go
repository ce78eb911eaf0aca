package residency

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// smapsSample has the executable (fd:01, inode 4242) mapped four times, and
// other files and anonymous memory around it.
const smapsSample = `00400000-00ce7000 r-xp 00000000 fd:01 4242                       /usr/bin/agentbox
Size:               9116 kB
Rss:                8532 kB
Private_Dirty:      8532 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me dw sd
00ce7000-015a1000 r--p 008e7000 fd:01 4242                       /usr/bin/agentbox (deleted)
Size:               8936 kB
Rss:                7336 kB
Anonymous:             0 kB
VmFlags: rd mr mw me dw sd
015a1000-01653000 rw-p 011a1000 fd:01 4242                       /usr/bin/agentbox
Size:                712 kB
Rss:                 520 kB
Anonymous:           300 kB
01700000-01710000 r--p 01200000 fd:01 4242                       /usr/bin/agentbox
Size:                 64 kB
Rss:                  64 kB
Private_Dirty:         4 kB
Anonymous:             0 kB
Swap:                  4 kB
01710000-01720000 r--s 01210000 fd:01 4242                       /usr/bin/agentbox
Size:                 64 kB
Rss:                  64 kB
Anonymous:             0 kB
7f1717d90000-7f1718100000 rw-p 00000000 00:00 0 
Size:               3520 kB
Rss:                1340 kB
Anonymous:          1340 kB
7f175ea1e000-7f175ead0000 r--p 00000000 fd:02 4242                       /other/device/same/inode
Size:                712 kB
Rss:                 488 kB
Anonymous:             0 kB
7ffd1000-7ffd3000 r-xp 00000000 00:00 0                          [vdso]
Rss:                   8 kB
`

func TestDroppable(t *testing.T) {
	got, err := droppable(strings.NewReader(smapsSample), 0xfd, 0x01, 4242)
	if err != nil {
		t.Fatal(err)
	}
	// The code and the read-only data; not the writable data, not the
	// read-only mapping holding a private copy, not the shared one, not
	// another device's file with the same inode.
	want := []Mapping{
		{Start: 0x400000, End: 0xce7000, Resident: 8532 << 10},
		{Start: 0xce7000, End: 0x15a1000, Resident: 7336 << 10},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("droppable (-want +got):\n%s", d)
	}
}

func TestDroppableRejectsGarbage(t *testing.T) {
	for _, in := range []string{
		"00400000-00ce7000 r-xp 00000000\n",
		"00400000-00ce7000 r-xp 00000000 fd01 4242 /x\n",
		"00400000-00ce7000 r-xp 00000000 fd:01 x /x\n",
		"00ce7000-00400000 r-xp 00000000 fd:01 4242 /x\n",
	} {
		if _, err := droppable(strings.NewReader(in), 0xfd, 0x01, 4242); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

// imageResident is what the test binary's read-only mappings have
// resident now.
func imageResident(t *testing.T) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &st); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ms, err := droppable(f, unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	if err != nil {
		t.Fatal(err)
	}
	return Resident(ms)
}

// TestReleaseImage drops this test binary's start-up pages for real: the
// resident part of its read-only mappings falls, and the code in them
// still runs (the next calls fault it back in).
func TestReleaseImage(t *testing.T) {
	before := imageResident(t)
	ms, err := ReleaseImage()
	if err != nil {
		t.Fatal(err)
	}
	after := imageResident(t)
	t.Logf("image resident: %d KiB before, %d KiB released, %d KiB after", before>>10, Resident(ms)>>10, after>>10)
	if len(ms) == 0 {
		t.Fatal("no mapping of the executable released")
	}
	if after >= before*3/4 {
		t.Errorf("image resident %d KiB after the release, %d KiB before: not released", after>>10, before>>10)
	}
	// Code and read-only data dropped above still work.
	if d := cmp.Diff([]int{1, 2}, []int{1, 2}); d != "" || strings.ToUpper("ok") != "OK" {
		t.Fatal("code after the release misbehaves")
	}
}

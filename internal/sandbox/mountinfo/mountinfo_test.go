package mountinfo

import (
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	in := `22 1 0:21 / /sys rw,nosuid shared:7 - sysfs sysfs rw
35 24 0:30 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
36 24 0:31 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate
90 1 0:50 / /tmp/with\040space rw - tmpfs my\040src rw,size=64k
not a mountinfo line
91 1 0:51 / /short rw -
`
	got := Parse([]byte(in))
	want := []Mount{
		{Point: "/sys", FSType: "sysfs", SuperOptions: []string{"rw"}},
		{Point: "/sys/fs/cgroup/memory", FSType: "cgroup", SuperOptions: []string{"rw", "memory"}},
		{Point: "/sys/fs/cgroup/unified", FSType: "cgroup2", SuperOptions: []string{"rw", "nsdelegate"}},
		{Point: "/tmp/with space", FSType: "tmpfs", SuperOptions: []string{"rw", "size=64k"}},
	}
	if len(got) != len(want) {
		t.Fatalf("Parse: %d mounts, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Point != w.Point || g.FSType != w.FSType || !slices.Equal(g.SuperOptions, w.SuperOptions) {
			t.Errorf("mount %d: %+v, want %+v", i, g, w)
		}
	}
}

func TestUnderThisProcess(t *testing.T) {
	ms, err := Under("/")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[len(ms)-1] != "/" {
		t.Fatalf("Under(/) = %v, want every mount, / last", ms)
	}
	for i := 1; i < len(ms); i++ {
		if len(ms[i]) > len(ms[i-1]) {
			t.Fatalf("Under(/) not deepest first at %d: %v", i, ms)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("35 24 0:30 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n"))
	f.Add([]byte(`1 1 0:1 / /a\0 rw - x y z` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range Parse(b) {
			if m.FSType == "" {
				t.Fatalf("mount without a type: %+v", m)
			}
		}
	})
}

package process

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestPrivilegeReason(t *testing.T) {
	t.Parallel()
	const host = "         0          0 4294967295\n"
	all := uint64(1)<<unix.CAP_SYS_ADMIN | 1<<unix.CAP_SETUID | 1<<unix.CAP_SETGID
	for _, tc := range []struct {
		name      string
		euid      int
		caps      uint64
		uidMap    string
		want      []string // "" when it may
		forbidden []string
	}{
		{name: "root", euid: 0, caps: all, uidMap: host},
		{name: "nobody", euid: 65534, caps: 0, uidMap: host,
			want: []string{"needs root", "uid 65534", "without CAP_SYS_ADMIN, CAP_SETUID, CAP_SETGID", "newuidmap"}},
		{name: "root without CAP_SETUID", euid: 0, caps: all &^ (1 << unix.CAP_SETUID), uidMap: host,
			want: []string{"needs root", "without CAP_SETUID"}, forbidden: []string{"without CAP_SYS_ADMIN"}},
		{name: "root in a nested user namespace", euid: 0, caps: all, uidMap: "0 1000 1\n",
			want: []string{"nested user namespace", "0 1000 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := privilegeReason(tc.euid, tc.caps, tc.uidMap)
			if len(tc.want) == 0 {
				if got != "" {
					t.Fatalf("refused: %s", got)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
			for _, f := range tc.forbidden {
				if strings.Contains(got, f) {
					t.Errorf("%q has %q", got, f)
				}
			}
		})
	}
}

// TestPrivilegeHere: the real check agrees with the test's own uid (the
// suite runs as root; a non-root run must see the refusal).
func TestPrivilegeHere(t *testing.T) {
	t.Parallel()
	got := privilege()
	if (os.Geteuid() == 0) != (got == "") {
		t.Fatalf("euid %d, privilege %q", os.Geteuid(), got)
	}
	p := New(Options{}).Probe(t.Context())
	if p.Available != (got == "") || (got != "" && p.Reason != got) {
		t.Fatalf("probe %+v, privilege %q", p, got)
	}
}

package egress

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestHostsLookup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(path, []byte(`# comment
127.0.0.1 localhost
10.0.0.5  db.internal.test  DB  # an internal host
::ffff:10.0.0.6 mapped.test
fe80::1%eth0 zoned.test
bad line
10.0.0.7 db.internal.test.
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"db.internal.test", []string{"10.0.0.5", "10.0.0.7"}},
		{"DB.Internal.Test", []string{"10.0.0.5", "10.0.0.7"}},
		{"db", []string{"10.0.0.5"}},
		{"mapped.test", []string{"10.0.0.6"}},
		{"zoned.test", nil},
		{"absent.test", nil},
	} {
		var got []string
		for _, a := range hostsLookup(path, tc.name) {
			got = append(got, a.String())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("hostsLookup(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
	r := systemResolver{hostsPath: path}
	addrs, err := r.LookupNetIP(t.Context(), "ip", "db.internal.test.")
	if err != nil || len(addrs) != 2 || addrs[0] != netip.MustParseAddr("10.0.0.5") {
		t.Errorf("LookupNetIP from the hosts file: %v, %v", addrs, err)
	}
	if hostsLookup(filepath.Join(t.TempDir(), "missing"), "x") != nil {
		t.Error("a missing hosts file gave addresses")
	}
}

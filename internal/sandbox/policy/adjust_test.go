package policy

import (
	"slices"
	"testing"
)

func TestAdjustments(t *testing.T) {
	t.Parallel()
	parse := func(src string) *Policy {
		t.Helper()
		p, err := Parse("p.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, global, req string
		want              []Adjustment
	}{
		{"nothing asked", "version: 1\nresources:\n  memory: 1Gi\n", "version: 1\n", nil},
		{"asked less", "version: 1\nresources:\n  memory: 1Gi\n", "version: 1\nresources:\n  memory: 512Mi\n", nil},
		{"asked more", "version: 1\nresources:\n  memory: 8Gi\n  cpus: 2\n  pids: 100\n  timeout: 1m\n  disk: 1Gi\n  output: 1Mi\n  files: 1000\nnetwork:\n  max_connections: 10\n  max_connection_rate: 5\n",
			"version: 1\nresources:\n  memory: 64Gi\n  cpus: 3.5\n  pids: 1000\n  timeout: 2h\n  disk: 10Gi\n  output: 2Mi\n  files: 2000\nnetwork:\n  max_connections: 20\n  max_connection_rate: 6\n",
			[]Adjustment{
				{"resources.memory", "64Gi", "8Gi", "global policy"},
				{"resources.cpus", "3.5", "2", "global policy"},
				{"resources.pids", "1000", "100", "global policy"},
				{"resources.timeout", "2h", "1m", "global policy"},
				{"resources.disk", "10Gi", "1Gi", "global policy"},
				{"resources.output", "2Mi", "1Mi", "global policy"},
				{"resources.files", "2000", "1000", "global policy"},
				{"network.max_connections", "20", "10", "global policy"},
				{"network.max_connection_rate", "6", "5", "global policy"},
			}},
		{"no global limit", "version: 1\n", "version: 1\nresources:\n  memory: 64Gi\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := parse(tc.req)
			eff, err := Effective(parse(tc.global), req)
			if err != nil {
				t.Fatal(err)
			}
			if got := Adjustments(req, eff); !slices.Equal(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

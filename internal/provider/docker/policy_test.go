package docker

import (
	"errors"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
)

// TestMap: each field of a policy lands where the mapping says, and a
// field nothing enforces in a container is refused naming it.
func TestMap(t *testing.T) {
	for _, tc := range []struct {
		name, policy string
		refused      string // the field named by the refusal; "" when accepted
		check        func(t *testing.T, pl *plan)
	}{
		{name: "exec-default's limits", policy: `{"version":1,"resources":{"memory":"512Mi","cpus":1,"pids":256,"timeout":"30s","disk":"256Mi","output":"10Mi","files":50000},"network":{"mode":"proxy","allow":["example.com:443"]}}`,
			check: func(t *testing.T, pl *plan) {
				if pl.memory != 512<<20+InnerMemoryAllowance || pl.cpus != 1 || pl.pids != 256+InnerPidsAllowance || pl.disk != 256<<20 || pl.files != 50000 || pl.runtime != "" {
					t.Errorf("plan = %+v", pl)
				}
				in := pl.inner
				if in.Resources.Timeout.String() != "30s" || int64(in.Resources.Output) != 10<<20 || in.Resources.Memory != 0 || in.Resources.Pids != 0 || in.Resources.CPUs != 0 {
					t.Errorf("inner resources = %+v; want the timeout and output only", in.Resources)
				}
				if in.Network.Mode != "none" || len(in.Network.Allow) != 0 {
					t.Errorf("inner network = %+v; want none (the host's gate decides)", in.Network)
				}
				if in.Env.Set["HTTPS_PROXY"] != "http://127.0.0.1:3128" {
					t.Errorf("inner env.set = %v; want the proxy's variables", in.Env.Set)
				}
			}},
		{name: "no limits", policy: `{"version":1,"network":{"mode":"none"}}`,
			check: func(t *testing.T, pl *plan) {
				if pl.memory != 0 || pl.pids != 0 || pl.disk != 0 || pl.files != policy.DefaultFiles {
					t.Errorf("plan = %+v; want no limits but the default files", pl)
				}
				if len(pl.inner.Env.Set) != 0 {
					t.Errorf("inner env.set = %v; want nothing with network none", pl.inner.Env.Set)
				}
			}},
		{name: "gvisor", policy: `{"version":1,"isolation":"gvisor"}`,
			check: func(t *testing.T, pl *plan) {
				if pl.runtime != "runsc" || pl.inner.Isolation() != policy.IsolationProcess {
					t.Errorf("plan runtime %q, inner isolation %q; want runsc and process", pl.runtime, pl.inner.Isolation())
				}
			}},
		{name: "secrets and env", policy: `{"version":1,"env":{"pass":["TERM"],"set":{"A":"b"},"secrets":{"GITHUB_TOKEN":"github"}}}`,
			check: func(t *testing.T, pl *plan) {
				e := pl.inner.Env
				if e.Set["A"] != "b" || e.Set["GITHUB_TOKEN"] != "agentbox-placeholder-github" || len(e.Secrets) != 0 || len(e.Pass) != 0 {
					t.Errorf("inner env = %+v; want set A, the secret's placeholder, no secrets or pass", e)
				}
			}},
		{name: "workspace ro, protected, read outside", policy: `{"version":1,"filesystem":{"workspace":"ro","protected":["x/**"],"read_outside_workspace":true,"review_exempt":[]}}`},
		{name: "microvm", policy: `{"version":1,"isolation":"microvm"}`, refused: "isolation microvm"},
		{name: "strict seccomp", policy: `{"version":1,"syscalls":{"profile":"strict"}}`, refused: "syscalls.profile strict"},
		{name: "syscalls deny", policy: `{"version":1,"syscalls":{"deny":["ptrace"]}}`, refused: "syscalls.deny"},
		{name: "host network", policy: `{"version":1,"network":{"mode":"host"}}`, refused: "network.mode host"},
		{name: "read paths", policy: `{"version":1,"filesystem":{"read":["/opt/tools"]}}`, refused: "filesystem.read"},
		{name: "write paths", policy: `{"version":1,"filesystem":{"write":["/var/cache/x"]}}`, refused: "filesystem.write"},
		{name: "not a policy", policy: `{"version":1,"isolation":"vm"}`, refused: "isolation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl, err := Map([]byte(tc.policy))
			if tc.refused != "" {
				if !errors.Is(err, provider.ErrUnsupported) || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), Name) {
					t.Fatalf("Map = %+v, %v; want ErrUnsupported naming %q and the provider", pl, err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := pl.inner.Validate(); err != nil {
				t.Fatalf("inner policy invalid: %v", err)
			}
			if tc.check != nil {
				tc.check(t, pl)
			}
		})
	}
}

// TestFieldsComplete: every field of the policy model has its row in
// Fields, and nothing else does: a new field must be mapped.
func TestFieldsComplete(t *testing.T) {
	var want []string
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "version" {
				continue
			}
			if f.Type.Kind() == reflect.Struct {
				walk(prefix+name+".", f.Type)
				continue
			}
			want = append(want, prefix+name)
		}
	}
	walk("", reflect.TypeFor[policy.Policy]())
	var got []string
	for _, f := range Fields {
		got = append(got, f.Name)
		if !slices.Contains([]string{ByDocker, ByHost, ByInner, ByNobody, ByDocker + ", " + ByHost, ByHost + ", " + ByInner}, f.By) {
			t.Errorf("%s: enforced by %q", f.Name, f.By)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("Fields = %v\nthe policy's fields = %v", got, want)
	}
}

// TestFieldsDocumented: docs/sandbox.md's table of the mapping is Fields.
func TestFieldsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/sandbox.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_.]+)` \\| ([^|]+) \\| ([^|]+) \\|$")
	var rows [][]string
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		if strings.Contains(m[1], ".") || m[1] == "isolation" || m[1] == "allow_degraded" {
			rows = append(rows, []string{m[1], strings.TrimSpace(m[2]), strings.TrimSpace(m[3])})
		}
	}
	var want [][]string
	var text strings.Builder
	for _, f := range Fields {
		want = append(want, []string{f.Name, f.By, f.How})
		text.WriteString("| `" + f.Name + "` | " + f.By + " | " + f.How + " |\n")
	}
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("docs/sandbox.md's table of what enforces each policy field in a Docker sandbox differs from docker.Fields; it should read:\n%s", text.String())
	}
}

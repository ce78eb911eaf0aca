package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/sandbox"
)

func mustParse(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse(%q): %v", src, err)
	}
	return p
}

func TestEffectiveTable(t *testing.T) {
	const permissive = `version: 1
allow_degraded: true
resources: {memory: 2Gi, pids: 500, timeout: 1h}
filesystem:
  read: [/opt]
  write: [/data]
  read_outside_workspace: true
network:
  mode: host
  allow: ['api.example.com:443']
env:
  pass: [TERM, LANG]
`
	tests := []struct {
		name, global, req string
		wantErr           string // substring; "" = success
		check             func(t *testing.T, e *Policy)
	}{
		{
			name:   "limits take the minimum, unset means the other side's",
			global: "version: 1\nresources: {memory: 1Gi, cpus: 2, timeout: 10m}\n",
			req:    "version: 1\nresources: {memory: 4Gi, cpus: 0.5, pids: 50}\n",
			check: func(t *testing.T, e *Policy) {
				want := Resources{Memory: 1 << 30, CPUs: 0.5, Pids: 50, Timeout: Duration(10 * time.Minute), Files: DefaultFiles}
				if diff := cmp.Diff(want, e.Resources); diff != "" {
					t.Errorf("resources (-want +got):\n%s", diff)
				}
			},
		},
		{
			name:   "files: the smaller of two numbers",
			global: "version: 1\nresources: {files: 2000}\n",
			req:    "version: 1\nresources: {files: 500000}\n",
			check: func(t *testing.T, e *Policy) {
				if e.Resources.Files != 2000 {
					t.Errorf("files = %d, want the global's 2000", e.Resources.Files)
				}
			},
		},
		{
			name:   "files: one side's number applies, even above the default",
			global: "version: 1\nresources: {files: 1000000}\n",
			req:    "version: 1\n",
			check: func(t *testing.T, e *Policy) {
				if e.Resources.Files != 1000000 {
					t.Errorf("files = %d, want the global's 1000000", e.Resources.Files)
				}
			},
		},
		{
			name:   "files: a request's number applies under a global without one",
			global: "version: 1\n",
			req:    "version: 1\nresources: {files: 300000}\n",
			check: func(t *testing.T, e *Policy) {
				if e.Resources.Files != 300000 {
					t.Errorf("files = %d, want the request's 300000", e.Resources.Files)
				}
			},
		},
		{
			name:   "files: never unlimited when neither side says",
			global: "version: 1\n",
			req:    "version: 1\nresources: {files: 0}\n",
			check: func(t *testing.T, e *Policy) {
				if e.Resources.Files != DefaultFiles {
					t.Errorf("files = %d, want DefaultFiles %d", e.Resources.Files, DefaultFiles)
				}
			},
		},
		{
			name:    "workspace roots are the operator's alone",
			global:  "version: 1\nfilesystem: {workspace_roots: [/srv/ws]}\n",
			req:     "version: 1\nfilesystem: {workspace_roots: [/srv/ws/mine]}\n",
			wantErr: "filesystem.workspace_roots: only the operator's global policy",
		},
		{
			name:   "the global policy's workspace roots stay out of the result",
			global: "version: 1\nfilesystem: {workspace_roots: [/srv/ws]}\n",
			req:    "version: 1\n",
			check: func(t *testing.T, e *Policy) {
				if len(e.Filesystem.WorkspaceRoots) != 0 {
					t.Errorf("workspace_roots = %v", e.Filesystem.WorkspaceRoots)
				}
			},
		},
		{
			name:   "isolation: the stronger wins either way",
			global: "version: 1\nisolation: gvisor\n",
			req:    "version: 1\nisolation: process\n",
			check: func(t *testing.T, e *Policy) {
				if e.Isolation() != IsolationGVisor {
					t.Errorf("isolation = %s", e.Isolation())
				}
			},
		},
		{
			name:   "isolation: a request may ask for more",
			global: "version: 1\n",
			req:    "version: 1\nisolation: microvm\n",
			check: func(t *testing.T, e *Policy) {
				if e.Isolation() != IsolationMicroVM {
					t.Errorf("isolation = %s", e.Isolation())
				}
			},
		},
		{
			name:    "host network needs the global's permission",
			global:  "version: 1\n",
			req:     "version: 1\nnetwork: {mode: host}\n",
			wantErr: "network.mode: host is not permitted by the global policy (global network.mode: proxy)",
		},
		{
			name:   "host network when permitted",
			global: permissive,
			req:    "version: 1\nnetwork: {mode: host}\n",
			check: func(t *testing.T, e *Policy) {
				if e.Network.Mode != "host" {
					t.Errorf("mode = %s", e.Network.Mode)
				}
			},
		},
		{
			name:   "a global permission is not a default",
			global: permissive,
			req:    "version: 1\n",
			check: func(t *testing.T, e *Policy) {
				if e.Network.Mode != "proxy" || e.Network.Default != "deny" || e.Filesystem.ReadOutsideWorkspace || len(e.Env.Pass) > 0 || e.AllowDegraded || len(e.Filesystem.Write) > 0 {
					t.Errorf("permissions granted without being asked for: %+v", e)
				}
				if e.Resources.Memory != 2<<30 {
					t.Errorf("global limit not applied: %v", e.Resources.Memory)
				}
			},
		},
		{
			name:    "read outside the workspace",
			global:  "version: 1\n",
			req:     "version: 1\nfilesystem: {read_outside_workspace: true}\n",
			wantErr: "filesystem.read_outside_workspace: not permitted by the global policy (global filesystem.read_outside_workspace: false)",
		},
		{
			name:    "write paths must be within the global's",
			global:  permissive,
			req:     "version: 1\nfilesystem: {write: [/data/x, /database]}\n",
			wantErr: `filesystem.write[1]: "/database" is not within a path the global policy makes writable (global filesystem.write: [/data])`,
		},
		{
			name:   "write paths within the global's",
			global: permissive,
			req:    "version: 1\nfilesystem: {write: [/data/x, /data]}\n",
			check: func(t *testing.T, e *Policy) {
				if !slices.Equal(e.Filesystem.Write, []string{"/data/x", "/data"}) {
					t.Errorf("write = %v", e.Filesystem.Write)
				}
			},
		},
		{
			name:    "read paths need a global read, write or read_outside_workspace",
			global:  "version: 1\nfilesystem: {read: [/opt], write: [/data]}\n",
			req:     "version: 1\nfilesystem: {read: [/opt/x, /data/y, /etc]}\n",
			wantErr: `filesystem.read[2]: "/etc" is not within a path the global policy makes readable`,
		},
		{
			name:   "read paths allowed by read_outside_workspace",
			global: permissive,
			req:    "version: 1\nfilesystem: {read: [/etc]}\n",
		},
		{
			name:    "env names must be listed by the global",
			global:  permissive,
			req:     "version: 1\nenv: {pass: [TERM, AWS_SECRET_ACCESS_KEY]}\n",
			wantErr: "env.pass[1]: AWS_SECRET_ACCESS_KEY may not be passed: the global policy does not list it (global env.pass: [TERM, LANG])",
		},
		{
			name:   "env.set: global values win",
			global: "version: 1\nenv: {set: {HTTP_PROXY: 'http://proxy', A: g}}\n",
			req:    "version: 1\nenv: {set: {A: r, B: r}}\n",
			check: func(t *testing.T, e *Policy) {
				want := map[string]string{"HTTP_PROXY": "http://proxy", "A": "g", "B": "r"}
				if diff := cmp.Diff(want, e.Env.Set); diff != "" {
					t.Errorf("env.set (-want +got):\n%s", diff)
				}
			},
		},
		{
			name:    "allow_degraded",
			global:  "version: 1\n",
			req:     "version: 1\nallow_degraded: true\n",
			wantErr: "allow_degraded: not permitted by the global policy (global allow_degraded: false)",
		},
		{
			name:    "network allow rules must be the global's",
			global:  permissive,
			req:     "version: 1\nnetwork: {allow: ['api.example.com:443', evil.example]}\n",
			wantErr: `network.allow[1]: "evil.example" is not covered by the global policy's allow rules (global network.allow: [api.example.com:443])`,
		},
		{
			name:   "unions: protected, denials; stronger profile; ro workspace",
			global: "version: 1\nfilesystem: {workspace: ro, protected: [g/**]}\nnetwork: {deny: [10.0.0.0/8]}\nsyscalls: {profile: strict, deny: [bpf]}\n",
			req:    "version: 1\nfilesystem: {workspace: rw, protected: [r/**]}\nnetwork: {deny: [r.example]}\nsyscalls: {profile: default, deny: [ptrace]}\n",
			check: func(t *testing.T, e *Policy) {
				if e.Filesystem.Workspace != WorkspaceRO || e.Syscalls.Profile != ProfileStrict {
					t.Errorf("workspace %s profile %s", e.Filesystem.Workspace, e.Syscalls.Profile)
				}
				for _, p := range append(BuiltinProtected(), "g/**", "r/**") {
					if !slices.Contains(e.Filesystem.Protected, p) {
						t.Errorf("protected lacks %s", p)
					}
				}
				if !slices.Equal(e.Network.Deny, []string{"10.0.0.0/8", "r.example"}) || !slices.Equal(e.Syscalls.Deny, []string{"bpf", "ptrace"}) {
					t.Errorf("deny lists %v %v", e.Network.Deny, e.Syscalls.Deny)
				}
			},
		},
		{
			name:    "several refusals are all named",
			global:  "version: 1\n",
			req:     "version: 1\nallow_degraded: true\nnetwork: {mode: host}\nenv: {pass: [X]}\n",
			wantErr: "allow_degraded: not permitted",
			check:   nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Effective(mustParse(t, tt.global), mustParse(t, tt.req))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Effective error = %v, want one containing %q", err, tt.wantErr)
				}
				if tt.name == "several refusals are all named" {
					for _, f := range []string{"allow_degraded", "network.mode", "env.pass[0]"} {
						if !strings.Contains(err.Error(), f) {
							t.Errorf("error does not name %s: %v", f, err)
						}
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Effective: %v", err)
			}
			if err := e.Validate(); err != nil {
				t.Fatalf("effective policy invalid: %v", err)
			}
			if tt.check != nil {
				tt.check(t, e)
			}
		})
	}
}

func TestEffectiveDefaultsAndNil(t *testing.T) {
	e, err := Effective(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.Isolation() != IsolationProcess || e.Filesystem.Workspace != WorkspaceRW || e.Network.Mode != "proxy" ||
		e.Network.Default != NetworkDeny || e.Syscalls.Profile != ProfileDefault || !slices.Equal(e.Filesystem.Protected, BuiltinProtected()) {
		t.Errorf("defaults: %+v", e)
	}
	// No global: the request's permissions stand.
	e, err = Effective(nil, mustParse(t, "version: 1\nnetwork: {mode: host}\n"))
	if err != nil || e.Network.Mode != "host" {
		t.Errorf("Effective(nil, host) = %+v, %v", e, err)
	}
	// Invalid input is refused, not intersected.
	bad := &Policy{Version: 1, IsolationLevel: "docker"}
	if _, err := Effective(nil, bad); err == nil {
		t.Error("invalid request accepted")
	}
	if _, err := Effective(bad, nil); err == nil || !strings.Contains(err.Error(), "global policy") {
		t.Errorf("invalid global: %v", err)
	}
	// Effective does not modify its inputs.
	g, r := mustParse(t, "version: 1\nenv: {set: {A: g}}\n"), mustParse(t, "version: 1\nenv: {set: {A: r}}\n")
	if _, err := Effective(g, r); err != nil || r.Env.Set["A"] != "r" || len(r.Filesystem.Protected) != 0 {
		t.Errorf("Effective changed its request: %+v, %v", r, err)
	}
}

// randomPolicy draws a valid policy from small pools, so that global and
// request often overlap, nest and conflict.
func randomPolicy(r *rand.Rand) *Policy {
	pick := func(s ...string) string { return s[r.IntN(len(s))] }
	subset := func(s ...string) []string {
		var out []string
		for _, v := range s {
			if r.IntN(3) == 0 {
				out = append(out, v)
			}
		}
		return out
	}
	sizes := []ByteSize{0, 4 << 20, 64 << 20, 1 << 30}
	p := &Policy{
		Version:        1,
		IsolationLevel: pick("", "process", "gvisor", "microvm"),
		AllowDegraded:  r.IntN(2) == 0,
		Resources: Resources{
			Memory:  sizes[r.IntN(4)],
			CPUs:    []float64{0, 0.5, 1, 2}[r.IntN(4)],
			Pids:    []int64{0, 10, 100}[r.IntN(3)],
			Timeout: []Duration{0, Duration(time.Second), Duration(time.Minute)}[r.IntN(3)],
			Disk:    sizes[r.IntN(4)],
			Output:  sizes[r.IntN(4)],
		},
		Filesystem: Filesystem{
			Workspace:            pick("", "rw", "ro"),
			Read:                 subset("/opt", "/opt/a", "/usr/share", "/data"),
			Write:                subset("/data", "/data/x", "/var/cache", "/opt/a"),
			ReadOutsideWorkspace: r.IntN(2) == 0,
			Protected:            subset("x/**", "*.pem", "secret"),
		},
		Network: Network{
			Default: pick("", "deny", "ask"),
			Mode:    pick("", "none", "proxy", "host"),
			Allow:   subset("a.example", "b.example:443", "10.0.0.0/8", "*.example", "10.1.0.0/16"),
			Deny:    subset("169.254.169.254", "c.example"),
		},
		Env:      Env{Pass: subset("TERM", "LANG", "TOKEN")},
		Syscalls: Syscalls{Profile: pick("", "default", "strict"), Deny: subset("ptrace", "mount", "bpf")},
	}
	for _, k := range subset("A", "B", "C") {
		if p.Env.Set == nil {
			p.Env.Set = map[string]string{}
		}
		p.Env.Set[k] = pick("1", "2")
	}
	return p
}

// looserThan is an independent statement of "e grants something g does
// not", written without Effective's helpers. It returns the reasons.
func looserThan(e, g *Policy) []string {
	var why []string
	rank := map[string]int{"": 0, "process": 0, "gvisor": 1, "microvm": 2}
	if rank[e.IsolationLevel] < rank[g.IsolationLevel] {
		why = append(why, "weaker isolation")
	}
	if e.AllowDegraded && !g.AllowDegraded {
		why = append(why, "allow_degraded")
	}
	limit := func(name string, ev, gv float64) {
		if gv > 0 && (ev == 0 || ev > gv) {
			why = append(why, "higher "+name)
		}
	}
	limit("memory", float64(e.Resources.Memory), float64(g.Resources.Memory))
	limit("cpus", e.Resources.CPUs, g.Resources.CPUs)
	limit("pids", float64(e.Resources.Pids), float64(g.Resources.Pids))
	limit("timeout", float64(e.Resources.Timeout), float64(g.Resources.Timeout))
	limit("disk", float64(e.Resources.Disk), float64(g.Resources.Disk))
	limit("output", float64(e.Resources.Output), float64(g.Resources.Output))
	if g.Filesystem.Workspace == "ro" && e.Filesystem.Workspace != "ro" {
		why = append(why, "writable workspace")
	}
	if e.Filesystem.ReadOutsideWorkspace && !g.Filesystem.ReadOutsideWorkspace {
		why = append(why, "read outside")
	}
	within := func(p string, roots []string) bool {
		for _, root := range roots {
			if p == root || strings.HasPrefix(p, root+"/") {
				return true
			}
		}
		return false
	}
	for _, p := range e.Filesystem.Write {
		if !within(p, g.Filesystem.Write) {
			why = append(why, "write "+p)
		}
	}
	for _, p := range e.Filesystem.Read {
		if !g.Filesystem.ReadOutsideWorkspace && !within(p, append(slices.Clone(g.Filesystem.Read), g.Filesystem.Write...)) {
			why = append(why, "read "+p)
		}
	}
	for _, p := range append(BuiltinProtected(), g.Filesystem.Protected...) {
		if !slices.Contains(e.Filesystem.Protected, p) {
			why = append(why, "unprotected "+p)
		}
	}
	modeRank := map[string]int{"none": 0, "": 1, "proxy": 1, "host": 2}
	if modeRank[e.Network.Mode] > modeRank[g.Network.Mode] {
		why = append(why, "network mode "+e.Network.Mode)
	}
	if e.Network.Default == "ask" && g.Network.Default != "ask" {
		why = append(why, "default ask")
	}
	for _, a := range e.Network.Allow {
		if !slices.ContainsFunc(g.Network.Allow, func(ga string) bool { return coversByHand(ga, a) }) {
			why = append(why, "allow "+a)
		}
	}
	for _, d := range g.Network.Deny {
		if !slices.Contains(e.Network.Deny, d) {
			why = append(why, "undenied "+d)
		}
	}
	for _, n := range e.Env.Pass {
		if !slices.Contains(g.Env.Pass, n) {
			why = append(why, "pass "+n)
		}
	}
	for k, v := range g.Env.Set {
		if e.Env.Set[k] != v {
			why = append(why, "env.set "+k)
		}
	}
	if g.Syscalls.Profile == "strict" && e.Syscalls.Profile != "strict" {
		why = append(why, "weaker syscall profile")
	}
	for _, s := range g.Syscalls.Deny {
		if !slices.Contains(e.Syscalls.Deny, s) {
			why = append(why, "allowed syscall "+s)
		}
	}
	return why
}

// coversByHand says, for the rules randomPolicy uses, whether global rule
// g covers request rule r (an independent statement of egress.Rule.Covers
// for them).
func coversByHand(g, r string) bool {
	switch g {
	case r:
		return true
	case "*.example":
		return strings.HasSuffix(r, ".example") || strings.HasSuffix(r, ".example:443")
	case "10.0.0.0/8":
		return r == "10.1.0.0/16"
	}
	return false
}

// asksBeyond lists the permissions r asks for that g does not grant: the
// cases where Effective must fail.
func asksBeyond(g, r *Policy) []string {
	var why []string
	for _, w := range looserThan(r, g) {
		// Limits, isolation, profile, protection, denials, env.set and a
		// writable workspace are tightened, not refused.
		for _, refused := range []string{"allow_degraded", "read outside", "write ", "read ", "network mode", "default ask", "allow ", "pass "} {
			// A request that names no mode gets the global's.
			if strings.HasPrefix(w, refused) && (refused != "network mode" || r.Network.Mode != "") {
				why = append(why, w)
			}
		}
	}
	return why
}

func checkEffective(t *testing.T, g, r *Policy) {
	t.Helper()
	e, err := Effective(g, r)
	beyond := asksBeyond(g, r)
	if err != nil {
		if len(beyond) == 0 {
			t.Fatalf("Effective refused a request within the global policy: %v\nglobal %+v\nrequest %+v", err, g, r)
		}
		return
	}
	if len(beyond) > 0 {
		t.Fatalf("Effective accepted a request beyond the global policy (%v)\nglobal %+v\nrequest %+v", beyond, g, r)
	}
	if why := looserThan(e, g); len(why) > 0 {
		t.Fatalf("effective policy is looser than the global one: %v\nglobal %+v\nrequest %+v\neffective %+v", why, g, r, e)
	}
	// Nor looser than the request, except for the global's env.set.
	for _, w := range looserThan(e, r) {
		if !strings.HasPrefix(w, "env.set") {
			t.Fatalf("effective policy is looser than the request: %s\nrequest %+v\neffective %+v", w, r, e)
		}
	}
	if err := e.Validate(); err != nil {
		t.Fatalf("effective policy invalid: %v", err)
	}
	// Intersecting again with the same global changes nothing.
	again, err := Effective(g, e)
	if err != nil {
		t.Fatalf("Effective(g, Effective(g, r)): %v", err)
	}
	if again.Hash() != e.Hash() {
		t.Fatalf("Effective is not idempotent:\n%+v\n%+v", e, again)
	}
}

func TestEffectiveNeverLooserThanGlobal(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for i := 0; i < 5000; i++ {
		checkEffective(t, randomPolicy(r), randomPolicy(r))
	}
}

func FuzzEffective(f *testing.F) {
	for i := uint64(0); i < 8; i++ {
		f.Add(i, i*31+1)
	}
	f.Fuzz(func(t *testing.T, a, b uint64) {
		r := rand.New(rand.NewPCG(a, b))
		checkEffective(t, randomPolicy(r), randomPolicy(r))
	})
}

func ExampleEffective() {
	global, _ := Parse("global.yaml", []byte("version: 1\nresources: {memory: 1Gi, timeout: 5m}\n"))
	req, _ := Parse("request.yaml", []byte("version: 1\nresources: {memory: 8Gi, cpus: 1}\nnetwork: {mode: host}\n"))
	_, err := Effective(global, req)
	fmt.Println(err)
	req.Network.Mode = ""
	e, _ := Effective(global, req)
	fmt.Println(e.Resources.Memory, e.Resources.CPUs, e.Resources.Timeout)
	// Output:
	// policy exceeds the global policy: network.mode: host is not permitted by the global policy (global network.mode: proxy)
	// 1Gi 1 5m
}

// TestEffectiveNetwork covers the network intersection: modes are ranked
// none < proxy < host, ask is a permission, allow rules must lie within
// the global's, and a request that says nothing gets the safe default.
func TestEffectiveNetwork(t *testing.T) {
	for _, tc := range []struct {
		name, global, req string
		wantMode, wantDef string
		wantErr           string
	}{
		{name: "unsaid mode is proxy", global: "version: 1\nnetwork: {mode: host}\n", req: "version: 1\n", wantMode: "proxy", wantDef: "deny"},
		{name: "unsaid mode under a closed global is none", global: "version: 1\nnetwork: {mode: none}\n", req: "version: 1\n", wantMode: "none", wantDef: "deny"},
		{name: "proxy beyond a closed global", global: "version: 1\nnetwork: {mode: none}\n", req: "version: 1\nnetwork: {mode: proxy}\n",
			wantErr: "network.mode: proxy is not permitted by the global policy (global network.mode: none)"},
		{name: "none is always allowed", global: "version: 1\n", req: "version: 1\nnetwork: {mode: none}\n", wantMode: "none", wantDef: "deny"},
		{name: "ask needs the global's leave", global: "version: 1\n", req: "version: 1\nnetwork: {default: ask}\n",
			wantErr: "network.default: ask is not permitted by the global policy (global network.default: deny)"},
		{name: "ask when permitted", global: "version: 1\nnetwork: {default: ask}\n", req: "version: 1\nnetwork: {default: ask}\n", wantMode: "proxy", wantDef: "ask"},
		{name: "a global ask is not a default", global: "version: 1\nnetwork: {default: ask}\n", req: "version: 1\n", wantMode: "proxy", wantDef: "deny"},
		{name: "allow within a global wildcard", global: "version: 1\nnetwork: {allow: ['*.github.com', '10.0.0.0/8']}\n",
			req: "version: 1\nnetwork: {allow: ['api.github.com:443', '*.x.github.com', '10.2.0.0/16:80']}\n", wantMode: "proxy", wantDef: "deny"},
		{name: "a wildcard does not cover its apex", global: "version: 1\nnetwork: {allow: ['*.github.com']}\n", req: "version: 1\nnetwork: {allow: [github.com]}\n",
			wantErr: `network.allow[0]: "github.com" is not covered`},
		{name: "any host covers names, not addresses", global: "version: 1\nnetwork: {allow: ['*']}\n", req: "version: 1\nnetwork: {allow: [example.org, '127.0.0.1:80']}\n",
			wantErr: `network.allow[1]: "127.0.0.1:80" is not covered`},
		{name: "a port-bound global rule", global: "version: 1\nnetwork: {allow: ['*.example.com:443']}\n", req: "version: 1\nnetwork: {allow: ['a.example.com']}\n",
			wantErr: `network.allow[0]: "a.example.com" is not covered`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Effective(mustParse(t, tc.global), mustParse(t, tc.req))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Effective error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.Network.Mode != tc.wantMode || e.Network.Default != tc.wantDef {
				t.Errorf("network %+v, want mode %s default %s", e.Network, tc.wantMode, tc.wantDef)
			}
		})
	}
}

// TestEffectiveConnectionBounds: the proxy's connection bounds are the
// smaller of the two after defaults, so neither side can lift them and
// neither can make them unlimited.
func TestEffectiveConnectionBounds(t *testing.T) {
	for _, tc := range []struct {
		name, global, req string
		wantMax, wantRate int
	}{
		{name: "neither says: the defaults", global: "version: 1\n", req: "version: 1\n",
			wantMax: sandbox.DefaultMaxConnections, wantRate: sandbox.DefaultMaxConnectionRate},
		{name: "a request cannot go past the default the global leaves", global: "version: 1\n", req: "version: 1\nnetwork: {max_connections: 5000, max_connection_rate: 5000}\n",
			wantMax: sandbox.DefaultMaxConnections, wantRate: sandbox.DefaultMaxConnectionRate},
		{name: "a request may go up to the global's", global: "version: 1\nnetwork: {max_connections: 1000, max_connection_rate: 400}\n", req: "version: 1\nnetwork: {max_connections: 5000, max_connection_rate: 300}\n",
			wantMax: 1000, wantRate: 300},
		{name: "a request may ask for less", global: "version: 1\nnetwork: {max_connections: 1000}\n", req: "version: 1\nnetwork: {max_connections: 8, max_connection_rate: 2}\n",
			wantMax: 8, wantRate: 2},
		{name: "a request that says nothing gets the default under a looser global", global: "version: 1\nnetwork: {max_connections: 1000, max_connection_rate: 1000}\n", req: "version: 1\n",
			wantMax: sandbox.DefaultMaxConnections, wantRate: sandbox.DefaultMaxConnectionRate},
		{name: "a stricter global binds", global: "version: 1\nnetwork: {max_connections: 16, max_connection_rate: 4}\n", req: "version: 1\n",
			wantMax: 16, wantRate: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Effective(mustParse(t, tc.global), mustParse(t, tc.req))
			if err != nil {
				t.Fatal(err)
			}
			if e.Network.MaxConnections != tc.wantMax || e.Network.MaxConnectionRate != tc.wantRate {
				t.Errorf("max_connections %d, max_connection_rate %d; want %d, %d", e.Network.MaxConnections, e.Network.MaxConnectionRate, tc.wantMax, tc.wantRate)
			}
			spec, err := e.Compile("/w", nil)
			if err != nil {
				t.Fatal(err)
			}
			if spec.Network.MaxConnections != tc.wantMax || spec.Network.MaxConnectionRate != tc.wantRate {
				t.Errorf("compiled %+v, want %d, %d", spec.Network, tc.wantMax, tc.wantRate)
			}
		})
	}
	for _, bad := range []string{
		"version: 1\nnetwork: {max_connections: 0}\n",
		"version: 1\nnetwork: {max_connections: -1}\n",
		"version: 1\nnetwork: {max_connections: 100000}\n",
		"version: 1\nnetwork: {max_connection_rate: 0}\n",
		"version: 1\nnetwork: {max_connection_rate: 1000000}\n",
		"version: 1\nnetwork: {max_connection_rate: many}\n",
	} {
		if _, err := Parse("p.yaml", []byte(bad)); err == nil {
			t.Errorf("Parse(%q) accepted it", bad)
		}
	}
	for _, p := range []*Policy{
		{Version: 1, Network: Network{MaxConnections: -1}},
		{Version: 1, Network: Network{MaxConnectionRate: MaxConnectionRateLimit + 1}},
	} {
		if err := p.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted it", p.Network)
		}
	}
}

func TestCheckAllow(t *testing.T) {
	g := mustParse(t, "version: 1\nnetwork: {allow: ['*', '127.0.0.1:8080']}\n")
	if err := CheckAllow(g, []string{"api.github.com:443", "127.0.0.1:8080", "*.npmjs.org"}); err != nil {
		t.Errorf("rules within the global: %v", err)
	}
	err := CheckAllow(g, []string{"10.0.0.0/8", "bad host", "127.0.0.1:9090"})
	for _, want := range []string{`network.allow[0]: "10.0.0.0/8" is not covered`, "network.allow[1]: \"bad host\" is not a network rule", `network.allow[2]: "127.0.0.1:9090" is not covered`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckAllow error %v, want it to say %s", err, want)
		}
	}
}

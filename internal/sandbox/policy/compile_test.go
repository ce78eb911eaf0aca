package policy

import (
	"errors"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/agentbox/agentbox/internal/sandbox"
)

func TestCompile(t *testing.T) {
	p := mustParse(t, `version: 1
isolation: gvisor
allow_degraded: true
resources: {memory: 256Mi, cpus: 0.5, pids: 64, timeout: 10s, disk: 64Mi, output: 1Mi, files: 5000}
filesystem:
  read: [/opt/tools/, /opt/tools]
  write: [/var/cache//build]
  read_outside_workspace: true
  protected: [secrets/**]
env:
  pass: [TERM, ABSENT, PATH]
  set: {CI: "true", LANG: en_US.UTF-8}
network: {mode: none}
syscalls: {profile: strict, deny: [ptrace]}
`)
	host := map[string]string{"TERM": "xterm", "PATH": "/host/bin", "AGENTBOX_SECRET_MARKER": "s3cr3t", "AWS_SECRET_ACCESS_KEY": "x"}
	lookup := func(k string) (string, bool) { v, ok := host[k]; return v, ok }

	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.Mkdir("ws", 0o755); err != nil {
		t.Fatal(err)
	}
	spec, err := p.Compile("ws/./", lookup)
	if err != nil {
		t.Fatal(err)
	}
	want := sandbox.Spec{
		Workspace:            filepath.Join(dir, "ws"),
		WorkspaceDir:         filepath.Join(dir, "ws"),
		ReadPaths:            []string{"/opt/tools"},
		WritePaths:           []string{"/var/cache/build"},
		ReadOutsideWorkspace: true,
		Protected:            append(BuiltinProtected(), "secrets/**"),
		ReviewExempt:         DefaultReviewExempt(),
		Env: map[string]string{
			"PATH": "/host/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "en_US.UTF-8",
			"TERM": "xterm", "CI": "true",
		},
		Limits: sandbox.Limits{
			MemoryBytes: 256 << 20, CPUs: 0.5, Pids: 64, Timeout: 10 * time.Second,
			DiskBytes: 64 << 20, OutputBytes: 1 << 20, Files: 5000,
		},
		Syscalls:      sandbox.Syscalls{Profile: "strict", Deny: []string{"ptrace"}},
		Network:       sandbox.Network{Mode: "none"},
		Hostname:      "sandbox",
		AllowDegraded: true,
	}
	if diff := cmp.Diff(want, spec); diff != "" {
		t.Errorf("Compile (-want +got):\n%s", diff)
	}
	if p.Isolation() != "gvisor" {
		t.Errorf("Isolation() = %s", p.Isolation())
	}
	for k, v := range spec.Env {
		if strings.Contains(v, "s3cr3t") || k == "AWS_SECRET_ACCESS_KEY" {
			t.Errorf("host secret reached the sandbox env: %s", k)
		}
	}
}

func TestCompileDefaults(t *testing.T) {
	spec, err := mustParse(t, "version: 1\n").Compile("/w", func(k string) (string, bool) { return "leak", true })
	if err != nil {
		t.Fatal(err)
	}
	wantEnv := maps.Clone(BaseEnv)
	maps.Copy(wantEnv, ProxyEnv(3128))
	if diff := cmp.Diff(wantEnv, spec.Env); diff != "" {
		t.Errorf("env of a policy that passes nothing (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(sandbox.Network{Mode: "proxy", ProxyPort: 3128, Default: "deny", Allow: []string{}, Deny: []string{},
		MaxConnections: sandbox.DefaultMaxConnections, MaxConnectionRate: sandbox.DefaultMaxConnectionRate}, spec.Network, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("default network (-want +got):\n%s", diff)
	}
	// Every limit but the file count is off by default; that one is
	// never unlimited.
	if spec.Syscalls.Profile != "default" || spec.Limits != (sandbox.Limits{Files: DefaultFiles}) || spec.ReadOutsideWorkspace {
		t.Errorf("defaults: %+v", spec)
	}
	if !slices.Equal(spec.Protected, BuiltinProtected()) {
		t.Errorf("protected = %v", spec.Protected)
	}
	if _, err := mustParse(t, "version: 1\n").Compile("", nil); err == nil {
		t.Error("compiled without a workspace")
	}
}

func TestCompileReadOnlyWorkspace(t *testing.T) {
	spec, err := mustParse(t, "version: 1\nfilesystem: {workspace: ro}\n").Compile("/w", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(spec.Protected, "**") {
		t.Fatalf("ro workspace does not protect everything: %v", spec.Protected)
	}
}

func TestCompileRefusesWhatItCannotEnforce(t *testing.T) {
	for _, src := range []string{
		"version: 1\nnetwork: {mode: none, allow: [example.com]}\n",
		"version: 1\nnetwork: {mode: host, allow: [example.com]}\n",
		"version: 1\nnetwork: {mode: host, deny: [10.0.0.0/8]}\n",
		"version: 1\nnetwork: {mode: none, default: ask}\n",
		"version: 1\nnetwork: {mode: none}\nenv: {secrets: {TOKEN: github}}\n",
	} {
		_, err := mustParse(t, src).Compile("/w", nil)
		if !errors.Is(err, ErrNeedsEgressProxy) {
			t.Errorf("Compile(%q) = %v, want ErrNeedsEgressProxy", src, err)
		}
	}
	// Deny rules with no network at all are trivially enforced.
	if _, err := mustParse(t, "version: 1\nnetwork: {mode: none, deny: [10.0.0.0/8]}\n").Compile("/w", nil); err != nil {
		t.Errorf("deny with mode none: %v", err)
	}
	// A policy built in code is validated too.
	if _, err := (&Policy{Version: 1, Filesystem: Filesystem{Write: []string{"/"}}}).Compile("/w", nil); err == nil {
		t.Error("compiled a writable host root")
	}
}

func TestHash(t *testing.T) {
	a := mustParse(t, `version: 1
filesystem: {protected: [b, a, a], read: [/x/, /y]}
env: {set: {A: "1", B: "2"}, pass: [Y, X]}
`)
	b := mustParse(t, `version: 1
isolation: process
filesystem: {workspace: rw, protected: [a, b], read: [/y, /x]}
network: {default: deny, mode: proxy}
env: {set: {B: "2", A: "1"}, pass: [X, Y]}
syscalls: {profile: default}
`)
	if a.Hash() != b.Hash() {
		t.Error("equivalent policies hash differently")
	}
	if len(a.Hash()) != 64 {
		t.Errorf("Hash() = %q", a.Hash())
	}
	seen := map[string]string{a.Hash(): "a"}
	for _, src := range []string{
		"version: 1\nresources: {memory: 1Gi}\n",
		"version: 1\nresources: {memory: 2Gi}\n",
		"version: 1\nenv: {set: {A: '1'}}\n",
		"version: 1\nenv: {set: {A: '2'}}\n",
		"version: 1\nisolation: gvisor\n",
		"version: 1\nfilesystem: {workspace: ro}\n",
	} {
		h := mustParse(t, src).Hash()
		if prev, dup := seen[h]; dup {
			t.Errorf("%q hashes like %q", src, prev)
		}
		seen[h] = src
	}
	for i := 0; i < 50; i++ {
		if a.Hash() != b.Hash() {
			t.Fatal("Hash is not stable")
		}
	}
}

func TestParseRule(t *testing.T) {
	good := map[string]Rule{
		"example.com":       {Host: "example.com"},
		"Example.COM.":      {Host: "example.com"},
		"*.example.com:443": {Host: "*.example.com", Port: 443},
		"10.0.0.0/8":        {Prefix: mustPrefix("10.0.0.0/8")},
		"1.2.3.4":           {Prefix: mustPrefix("1.2.3.4/32")},
		"1.2.3.4:80":        {Prefix: mustPrefix("1.2.3.4/32"), Port: 80},
		"[::1]:443":         {Prefix: mustPrefix("::1/128"), Port: 443},
		"fd00::/8":          {Prefix: mustPrefix("fd00::/8")},
	}
	for s, want := range good {
		got, err := ParseRule(s)
		if err != nil || got != want {
			t.Errorf("ParseRule(%q) = %+v, %v; want %+v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "bad host", "a..b", "-a.com", "x:0", "x:70000", "10.0.0.1/8", "*.1.2.3.4", "*.", "a.com:https", "1.2.3"} {
		if _, err := ParseRule(s); err == nil {
			t.Errorf("ParseRule(%q) succeeded", s)
		}
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// TestCompileProxy checks what a sandbox with the egress proxy gets: the
// rules in its spec, the proxy variables, and placeholders (never values)
// for the secrets it names.
func TestCompileProxy(t *testing.T) {
	p := mustParse(t, `version: 1
network:
  default: ask
  allow: ["*.github.com:443", "10.1.0.0/16:8080"]
  deny: [evil.github.com]
env:
  set: {HTTP_PROXY: "http://override", CI: "1"}
  secrets: {GITHUB_TOKEN: github, NPM_TOKEN: npm}
`)
	spec, err := p.Compile("/w", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := sandbox.Network{
		Mode: "proxy", ProxyPort: 3128, Default: "ask",
		Allow:   []string{"*.github.com:443", "10.1.0.0/16:8080"},
		Deny:    []string{"evil.github.com"},
		Secrets: map[string]string{"GITHUB_TOKEN": "github", "NPM_TOKEN": "npm"},
		// Not said: the defaults.
		MaxConnections: sandbox.DefaultMaxConnections, MaxConnectionRate: sandbox.DefaultMaxConnectionRate,
	}
	if diff := cmp.Diff(want, spec.Network); diff != "" {
		t.Errorf("network (-want +got):\n%s", diff)
	}
	for k, v := range map[string]string{
		"HTTP_PROXY": "http://override", "https_proxy": "http://127.0.0.1:3128", "ALL_PROXY": "socks5h://127.0.0.1:3128",
		"NO_PROXY": "localhost,127.0.0.1,::1", "GITHUB_TOKEN": "agentbox-placeholder-github", "NPM_TOKEN": "agentbox-placeholder-npm", "CI": "1",
	} {
		if spec.Env[k] != v {
			t.Errorf("env %s = %q, want %q", k, spec.Env[k], v)
		}
	}
	// A variable cannot hold both a value and a placeholder.
	if _, err := Parse("p.yaml", []byte("version: 1\nenv: {set: {T: x}, secrets: {T: t}}\n")); err == nil || !strings.Contains(err.Error(), "env.secrets.T") {
		t.Errorf("set and secrets on one variable: %v", err)
	}
	for _, bad := range []string{"version: 1\nenv: {secrets: {'1X': t}}\n", "version: 1\nenv: {secrets: {X: 'a b'}}\n"} {
		if _, err := Parse("p.yaml", []byte(bad)); err == nil {
			t.Errorf("Parse(%q) accepted a bad secret entry", bad)
		}
	}
}

func TestValidateFiles(t *testing.T) {
	for _, tt := range []struct {
		files   int64
		wantErr string
	}{
		{0, ""},
		{1, ""},
		{MaxFiles, ""},
		{-1, "resources.files: must not be negative"},
		{MaxFiles + 1, "resources.files: must be at most"},
	} {
		err := (&Policy{Version: 1, Resources: Resources{Files: tt.files}}).Validate()
		if (err == nil) != (tt.wantErr == "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("Validate(files: %d) = %v, want %q", tt.files, err, tt.wantErr)
		}
	}
}

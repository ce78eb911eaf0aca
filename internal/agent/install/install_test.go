package install

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/install/installtest"
)

// testSpecs are agents that the fake npm can install.
func testSpecs() []Spec {
	return []Spec{
		{
			Name: "fake", Package: "@test/fake", Version: "1.0.0",
			Binaries:    []string{"node_modules/native/bin/fake", "node_modules/.bin/fake"},
			VersionArgs: []string{"--version"}, PrintsVersion: true,
			Env: []string{"FAKE_EXTRA=yes"},
		},
		{
			Name: "quiet", Package: "quiet-agent", Version: "2.0.0",
			Binaries:    []string{"node_modules/.bin/fake"},
			VersionArgs: []string{"--help"},
		},
	}
}

type fixture struct {
	in    *installer
	cache string // AGENTBOX_CACHE_DIR
	log   string // the fake npm's invocation log
	path  string // PATH with the fake npm first
}

// newFixture returns an installer whose environment puts the fake npm
// first on PATH and the cache in a temp dir; extra are more KEY=VALUEs.
func newFixture(t *testing.T, extra ...string) *fixture {
	t.Helper()
	f := &fixture{
		cache: t.TempDir(),
		log:   filepath.Join(t.TempDir(), "npm.log"),
		path:  installtest.FakeNPM(t) + string(filepath.ListSeparator) + "/usr/local/bin:/usr/bin:/bin",
	}
	env := []string{
		"PATH=" + f.path,
		"HOME=" + t.TempDir(),
		EnvCacheDir + "=" + f.cache,
		installtest.EnvLog + "=" + f.log,
	}
	f.in = &installer{
		environ:       append(env, extra...),
		specs:         testSpecs(),
		now:           time.Now,
		verifyTimeout: 10 * time.Second,
		lockPoll:      10 * time.Millisecond,
	}
	return f
}

func (f *fixture) npmCalls(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(f.log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// entries lists the agents dir.
func (f *fixture) entries(t *testing.T) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(f.cache, "agents"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range des {
		names = append(names, d.Name())
	}
	return names
}

func TestAgentsDir(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"AGENTBOX_CACHE_DIR=/c", "XDG_CACHE_HOME=/x", "HOME=/h"}, "/c/agents"},
		{[]string{"XDG_CACHE_HOME=/x", "HOME=/h"}, "/x/agentbox/agents"},
		{[]string{"XDG_CACHE_HOME=relative", "HOME=/h"}, "/h/.cache/agentbox/agents"},
		{[]string{"HOME=/h"}, "/h/.cache/agentbox/agents"},
		{[]string{"HOME=/h", "AGENTBOX_CACHE_DIR=/one", "AGENTBOX_CACHE_DIR=/two"}, "/two/agents"},
	} {
		in := &installer{environ: tc.env}
		got, err := in.agentsDir()
		if err != nil || got != tc.want {
			t.Errorf("%v: %q, %v; want %q", tc.env, got, err, tc.want)
		}
	}
}

func TestKnownPins(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		"claude":          "@anthropic-ai/claude-code@2.1.332",
		"codex":           "@openai/codex@0.171.0",
		"opencode":        "opencode-ai@1.18.33",
		"gemini":          "@google/gemini-cli@0.61.0",
		"pi":              "@mariozechner/pi-coding-agent@0.73.1",
		"claude-code-acp": "@zed-industries/claude-code-acp@0.16.2",
		"codex-acp":       "@zed-industries/codex-acp@0.16.0",
	}
	specs := Known()
	if len(specs) != len(want) {
		t.Fatalf("%d known agents, want %d", len(specs), len(want))
	}
	for _, s := range specs {
		if got := s.Package + "@" + s.Version; got != want[s.Name] {
			t.Errorf("%s: %s, want %s", s.Name, got, want[s.Name])
		}
		if len(s.Binaries) == 0 || len(s.VersionArgs) == 0 {
			t.Errorf("%s: no binaries or version args", s.Name)
		}
		for _, b := range s.Binaries {
			if !filepath.IsLocal(b) || !strings.HasPrefix(b, "node_modules/") {
				t.Errorf("%s: binary %q is not inside node_modules", s.Name, b)
			}
		}
	}
	if got := Names(); got[0] != "claude" || len(got) != len(want) {
		t.Errorf("Names() = %v", got)
	}
	// Known returns a copy.
	specs[0].Version = "changed"
	if Known()[0].Version == "changed" {
		t.Error("Known shares its table")
	}
}

func TestEnsureInstallsIntoCache(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var progress bytes.Buffer
	got, err := f.in.ensure(t.Context(), "fake", &progress, false)
	if err != nil {
		t.Fatalf("ensure: %v\nprogress:\n%s", err, progress.String())
	}
	dir := filepath.Join(f.cache, "agents", "fake@1.0.0")
	want := Installed{
		Name: "fake", Package: "@test/fake", Version: "1.0.0", Dir: dir,
		Binary: filepath.Join(dir, "node_modules/.bin/fake"), VerifiedOutput: "fake 1.0.0",
		InstalledAt: got.InstalledAt,
	}
	if got != want {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if time.Since(got.InstalledAt) > time.Minute {
		t.Errorf("installed_at %v", got.InstalledAt)
	}

	// The manifest.
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"name": "fake", "package": "@test/fake", "version": "1.0.0", "binary": "node_modules/.bin/fake", "verified_output": "fake 1.0.0"} {
		if m[k] != v {
			t.Errorf("manifest %s = %v, want %q", k, m[k], v)
		}
	}
	if _, err := time.Parse(time.RFC3339, fmt.Sprint(m["installed_at"])); err != nil {
		t.Errorf("manifest installed_at: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
		t.Errorf("package.json: %v", err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("install dir: %v %v", fi.Mode(), err)
	}

	// npm was called once, into a staging dir next to the target.
	calls := f.npmCalls(t)
	if len(calls) != 1 {
		t.Fatalf("npm calls %q", calls)
	}
	args := strings.Fields(calls[0])
	for _, a := range []string{"install", "--no-audit", "--no-fund", "--no-save", "--loglevel=error", "--global=false", "@test/fake@1.0.0"} {
		if !slices.Contains(args, a) {
			t.Errorf("npm args %q lack %s", calls[0], a)
		}
	}
	if i := slices.Index(args, "--prefix"); i < 0 || !strings.HasPrefix(args[i+1], filepath.Join(f.cache, "agents", ".staging-fake@1.0.0-")) {
		t.Errorf("npm args %q: --prefix is not a staging dir", calls[0])
	}
	// Nothing is left but the install and its lock.
	if e := f.entries(t); !slices.Equal(e, []string{".fake@1.0.0.lock", "fake@1.0.0"}) {
		t.Errorf("agents dir holds %q", e)
	}

	p := progress.String()
	for _, s := range []string{
		"agentbox: installing fake (@test/fake@1.0.0) into " + dir + "\n",
		npmProgressPrefix + "fake npm: installing @test/fake@1.0.0\n",
		npmProgressPrefix + "added 1 package in 0s\n",
		"agentbox: installed fake 1.0.0 in ",
		"on disk): " + want.Binary + "\n",
	} {
		if !strings.Contains(p, s) {
			t.Errorf("progress lacks %q:\n%s", s, p)
		}
	}

	// Lookup and Status see it.
	l, ok, err := f.in.lookup("fake")
	if err != nil || !ok || l != got {
		t.Errorf("lookup: %+v %v %v", l, ok, err)
	}
}

func TestFastPathRunsNoNpm(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	first, err := f.in.ensure(t.Context(), "fake", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	// Without npm on PATH, a cached agent is still found, silently.
	f.in.environ = append(f.in.environ, "PATH=/nonexistent")
	var progress bytes.Buffer
	start := time.Now()
	again, err := f.in.ensure(t.Context(), "fake", &progress, false)
	if err != nil || again != first {
		t.Fatalf("second ensure: %+v, %v", again, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the fast path took %v", d)
	}
	if progress.Len() != 0 {
		t.Errorf("the fast path printed %q", progress.String())
	}
	if n := len(f.npmCalls(t)); n != 1 {
		t.Errorf("npm ran %d times", n)
	}
}

func TestPrefersFirstBinary(t *testing.T) {
	t.Parallel()
	f := newFixture(t, installtest.EnvBin+"=node_modules/native/bin/fake")
	got, err := f.in.ensure(t.Context(), "fake", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(got.Dir, "node_modules/native/bin/fake"); got.Binary != want {
		t.Errorf("binary %s, want %s", got.Binary, want)
	}
}

func TestVerifyEnvironment(t *testing.T) {
	t.Parallel()
	f := newFixture(t,
		installtest.EnvPrints+"=home=$HOME path=$PATH extra=$FAKE_EXTRA log=${FAKE_NPM_LOG:-unset} cwd=$(pwd)",
		"SECRET_TOKEN=s3cret")
	f.in.specs[0].PrintsVersion = false
	got, err := f.in.ensure(t.Context(), "fake", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, kv := range strings.Fields(got.VerifiedOutput) {
		k, v, _ := strings.Cut(kv, "=")
		fields[k] = v
	}
	agents := filepath.Join(f.cache, "agents")
	if h := fields["home"]; !strings.HasPrefix(h, filepath.Join(agents, ".home-fake@1.0.0-")) || fields["cwd"] != h {
		t.Errorf("HOME %q, cwd %q: want a scratch dir", h, fields["cwd"])
	}
	if _, err := os.Stat(fields["home"]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the scratch HOME was not removed: %v", err)
	}
	wantFirst := f.path[:strings.IndexByte(f.path, filepath.ListSeparator)] // npm's dir, unless node is found
	if node, err := lookPath("node", f.path); err == nil {
		wantFirst = filepath.Dir(node)
	}
	if p := fields["path"]; !strings.HasPrefix(p, wantFirst+":") || !strings.HasSuffix(p, ":/bin") {
		t.Errorf("PATH %q, want node's dir %s first, then the system's", p, wantFirst)
	}
	if fields["extra"] != "yes" || fields["log"] != "unset" {
		t.Errorf("env: extra=%q log=%q (the spec's env only, not the process's)", fields["extra"], fields["log"])
	}
	if strings.Contains(got.VerifiedOutput, "s3cret") {
		t.Error("the process environment leaked into the check")
	}
}

func TestBrokenCacheIsReinstalled(t *testing.T) {
	t.Parallel()
	for name, breakIt := range map[string]func(dir string) error{
		"no manifest":    func(dir string) error { return os.Remove(filepath.Join(dir, ManifestName)) },
		"corrupt":        func(dir string) error { return os.WriteFile(filepath.Join(dir, ManifestName), []byte("{"), 0o644) },
		"binary gone":    func(dir string) error { return os.Remove(filepath.Join(dir, "node_modules/.bin/fake")) },
		"not executable": func(dir string) error { return os.Chmod(filepath.Join(dir, "node_modules/.bin/fake"), 0o644) },
		"other package":  func(dir string) error { return rewriteManifest(dir, func(m *manifest) { m.Package = "other" }) },
		"binary outside": func(dir string) error {
			return rewriteManifest(dir, func(m *manifest) { m.Binary = "../../../../bin/sh" })
		},
		"absolute binary": func(dir string) error { return rewriteManifest(dir, func(m *manifest) { m.Binary = "/bin/sh" }) },
		"a file instead": func(dir string) error {
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
			return os.WriteFile(dir, []byte("x"), 0o644)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			got, err := f.in.ensure(t.Context(), "fake", nil, false)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(got.Dir, "junk"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := breakIt(got.Dir); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := f.in.lookup("fake"); ok || err != nil {
				t.Fatalf("lookup of a broken install: %v, %v", ok, err)
			}
			if ok, _, _ := statusOf(f.in, "fake"); ok {
				t.Fatal("status says installed")
			}
			again, err := f.in.ensure(t.Context(), "fake", nil, false)
			if err != nil {
				t.Fatal(err)
			}
			if again.Binary != got.Binary || len(f.npmCalls(t)) != 2 {
				t.Errorf("reinstall: %+v, npm calls %d", again, len(f.npmCalls(t)))
			}
			if _, err := os.Stat(filepath.Join(got.Dir, "junk")); !errors.Is(err, os.ErrNotExist) {
				t.Error("the broken directory was not replaced")
			}
			if e := f.entries(t); len(e) != 2 {
				t.Errorf("agents dir holds %q", e)
			}
		})
	}
}

func statusOf(in *installer, name string) (bool, string, string) {
	got, ok, err := in.lookup(name)
	if err != nil || !ok {
		return false, "", ""
	}
	return true, got.Version, got.Binary
}

func rewriteManifest(dir string, change func(*manifest)) error {
	p := filepath.Join(dir, ManifestName)
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	change(&m)
	b, _ = json.Marshal(m)
	return os.WriteFile(p, b, 0o644)
}

func TestReinstallReplaces(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	first, err := f.in.ensure(t.Context(), "fake", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	f.in.now = func() time.Time { return first.InstalledAt.Add(time.Hour) }
	var progress bytes.Buffer
	second, err := f.in.ensure(t.Context(), "fake", &progress, true)
	if err != nil {
		t.Fatal(err)
	}
	if !second.InstalledAt.After(first.InstalledAt) || len(f.npmCalls(t)) != 2 || !strings.Contains(progress.String(), "installing fake") {
		t.Errorf("force did not reinstall: %+v, %d npm calls", second, len(f.npmCalls(t)))
	}
	if e := f.entries(t); len(e) != 2 {
		t.Errorf("agents dir holds %q", e)
	}
}

func TestLeftoversAreRemoved(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	agents := filepath.Join(f.cache, "agents")
	for _, d := range []string{".staging-fake@1.0.0-123", ".home-fake@1.0.0-9", ".old-fake@1.0.0-1/dir", ".staging-quiet@2.0.0-5"} {
		if err := os.MkdirAll(filepath.Join(agents, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.in.ensure(t.Context(), "fake", nil, false); err != nil {
		t.Fatal(err)
	}
	// Only fake's leftovers: quiet's could belong to a running install.
	if e := f.entries(t); !slices.Equal(e, []string{".fake@1.0.0.lock", ".staging-quiet@2.0.0-5", "fake@1.0.0"}) {
		t.Errorf("agents dir holds %q", e)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		env   []string
		agent string
		is    error
		says  []string
	}{
		{"unknown agent", nil, "nope", ErrUnknownAgent, []string{`unknown agent "nope" (known: fake, quiet)`}},
		{"npm missing", []string{"PATH=/nonexistent"}, "fake", ErrNpmNotFound, []string{"npm not found on PATH", "apt-get install nodejs npm"}},
		{"version missing", []string{installtest.EnvMode + "=etarget"}, "fake", ErrVersionNotFound,
			[]string{"version not found in the npm registry: @test/fake@1.0.0", "npm view @test/fake versions", "No matching version found for @test/fake@1.0.0"}},
		{"package missing", []string{installtest.EnvMode + "=e404"}, "fake", ErrVersionNotFound, []string{"package @test/fake does not exist", "404 Not Found"}},
		{"registry unreachable", []string{installtest.EnvMode + "=offline"}, "fake", ErrRegistry,
			[]string{"npm registry unreachable", "could not reach https://registry.invalid/fake", "ECONNREFUSED"}},
		{"npm fails", []string{installtest.EnvMode + "=fail"}, "fake", ErrNpmFailed, []string{"npm install failed", "exit status 1", "something else went wrong"}},
		{"no binary", []string{installtest.EnvMode + "=nobin"}, "fake", ErrNotRunnable, []string{"none of node_modules/native/bin/fake, node_modules/.bin/fake"}},
		{"binary fails", []string{installtest.EnvExit + "=3", installtest.EnvPrints + "=boom"}, "fake", ErrNotRunnable, []string{"--version`: exit status 3", "boom"}},
		{"wrong version", []string{installtest.EnvPrints + "=fake 0.9.0"}, "fake", ErrNotRunnable, []string{`printed "fake 0.9.0", which lacks the pinned version 1.0.0`}},
		{"binary hangs", []string{installtest.EnvBinSleep + "=30"}, "fake", ErrNotRunnable, []string{"did not finish within 1s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tc.env...)
			f.in.verifyTimeout = time.Second
			start := time.Now()
			_, err := f.in.ensure(t.Context(), tc.agent, nil, false)
			if !errors.Is(err, tc.is) {
				t.Fatalf("error %v, want %v", err, tc.is)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error lacks %q:\n%v", s, err)
				}
			}
			if strings.Contains(err.Error(), "    at ") || strings.Contains(err.Error(), "complete log") {
				t.Errorf("error carries npm's noise:\n%v", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v", d)
			}
			// A failed install leaves nothing but (maybe) the lock.
			if des, _ := os.ReadDir(filepath.Join(f.cache, "agents")); len(des) > 1 {
				t.Errorf("agents dir holds %v", des)
			}
		})
	}
}

func TestQuietAgentNeedsNoVersion(t *testing.T) {
	t.Parallel()
	f := newFixture(t, installtest.EnvPrints+"=Usage: quiet [OPTIONS]")
	got, err := f.in.ensure(t.Context(), "quiet", nil, false)
	if err != nil || got.VerifiedOutput != "Usage: quiet [OPTIONS]" {
		t.Fatalf("%+v, %v", got, err)
	}
}

func TestConcurrentEnsureInstallsOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, installtest.EnvSleep+"=1")
	var wg sync.WaitGroup
	results := make([]Installed, 4)
	errs := make([]error, 4)
	outs := make([]bytes.Buffer, 4)
	for i := range results {
		wg.Go(func() { results[i], errs[i] = f.in.ensure(t.Context(), "fake", &outs[i], false) })
	}
	wg.Wait()
	waited := 0
	for i := range results {
		if errs[i] != nil || results[i] != results[0] {
			t.Errorf("ensure %d: %+v, %v", i, results[i], errs[i])
		}
		if strings.Contains(outs[i].String(), "waiting for another install of fake") {
			waited++
		}
	}
	if n := len(f.npmCalls(t)); n != 1 {
		t.Errorf("npm ran %d times", n)
	}
	if waited == 0 {
		t.Error("no ensure waited for the lock")
	}
}

// TestHelperProcess is the other process of TestTwoProcesses.
func TestHelperProcess(t *testing.T) {
	if os.Getenv("AGENTBOX_INSTALL_HELPER") != "1" {
		t.Skip("helper process")
	}
	in := &installer{environ: os.Environ(), specs: testSpecs(), now: time.Now, verifyTimeout: 10 * time.Second, lockPoll: 10 * time.Millisecond}
	got, err := in.ensure(context.Background(), "fake", os.Stderr, false)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("BINARY=" + got.Binary)
}

func TestTwoProcesses(t *testing.T) {
	t.Parallel()
	f := newFixture(t, installtest.EnvSleep+"=1")
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for range 2 {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperProcess$", "-test.v")
		cmd.Env = append(f.in.environ, "AGENTBOX_INSTALL_HELPER=1")
		out := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	want := "BINARY=" + filepath.Join(f.cache, "agents", "fake@1.0.0", "node_modules/.bin/fake")
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil || !strings.Contains(outs[i].String(), want) {
			t.Errorf("process %d: %v\n%s", i, err, outs[i])
		}
	}
	if n := len(f.npmCalls(t)); n != 1 {
		t.Errorf("npm ran %d times", n)
	}
	if _, ok, err := f.in.lookup("fake"); !ok || err != nil {
		t.Errorf("lookup: %v %v", ok, err)
	}
}

func TestLockWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	agents := filepath.Join(f.cache, "agents")
	if err := os.MkdirAll(agents, 0o755); err != nil {
		t.Fatal(err)
	}
	lf, err := os.OpenFile(filepath.Join(agents, ".fake@1.0.0.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if ok, err := tryLock(lf); !ok || err != nil {
		t.Fatal(ok, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	var progress bytes.Buffer
	_, err = f.in.ensure(ctx, "fake", &progress, false)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(progress.String(), "waiting for another install of fake") {
		t.Fatalf("%v; progress %q", err, progress.String())
	}
	if f.npmCalls(t) != nil {
		t.Error("npm ran without the lock")
	}
	// Once released, the lock is taken again.
	unlockFile(lf)
	if _, err := f.in.ensure(t.Context(), "fake", nil, false); err != nil {
		t.Fatal(err)
	}
}

func TestCancelDuringNpm(t *testing.T) {
	t.Parallel()
	f := newFixture(t, installtest.EnvSleep+"=30")
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := f.in.ensure(ctx, "fake", nil, false)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancel took %v (npm's children not killed?)", d)
	}
	if e := f.entries(t); !slices.Equal(e, []string{".fake@1.0.0.lock"}) {
		t.Errorf("agents dir holds %q", e)
	}
}

func TestClassifyRealNpmOutput(t *testing.T) {
	t.Parallel()
	// As npm 11 printed them here.
	etarget := "npm error code ETARGET\nnpm error notarget No matching version found for @anthropic-ai/claude-code@0.0.0-nope.\n" +
		"npm error notarget In most cases you or one of your dependencies are requesting a package version that doesn't exist.\n" +
		"npm error A complete log of this run can be found in: /root/.npm/_logs/x-debug-0.log\n"
	refused := "npm error code ECONNREFUSED\nnpm error syscall connect\nnpm error errno ECONNREFUSED\n" +
		"npm error FetchError: request to http://127.0.0.1:1/@anthropic-ai%2fclaude-code failed, reason: connect ECONNREFUSED 127.0.0.1:1\n" +
		"npm error     at ClientRequest.<anonymous> (/usr/lib/node_modules/npm/node_modules/minipass-fetch/lib/index.js:130:14)\n"
	old := "npm ERR! code ENOTFOUND\nnpm ERR! network request to https://registry.npmjs.org/x failed, reason: getaddrinfo ENOTFOUND registry.npmjs.org\n"
	for _, tc := range []struct {
		stderr string
		is     error
		says   string
	}{
		{etarget, ErrVersionNotFound, "No matching version found for @anthropic-ai/claude-code@0.0.0-nope"},
		{refused, ErrRegistry, "could not reach http://127.0.0.1:1/@anthropic-ai%2fclaude-code"},
		{old, ErrRegistry, "could not reach https://registry.npmjs.org/x"},
		{"npm error network socket hang up\n", ErrRegistry, "socket hang up"},
		{"weird\n", ErrNpmFailed, "weird"},
	} {
		err := classifyNpmError("@anthropic-ai/claude-code@0.0.0-nope", errors.New("exit status 1"), tc.stderr)
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%q: %v", tc.stderr, err)
		}
	}
}

func TestPrefixWriter(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	p := &prefixWriter{w: &out, prefix: "> "}
	for _, s := range []string{"one\ntw", "o\r\n\n  \nthr", "ee"} {
		if _, err := p.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	p.flush()
	if got := out.String(); got != "> one\n> two\n> three\n" {
		t.Errorf("%q", got)
	}
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	if got := truncate("aé", 2); got != "a" {
		t.Errorf("%q", got)
	}
	if got := truncate("abc", 5); got != "abc" {
		t.Errorf("%q", got)
	}
}

// Package install installs the agent CLIs agentbox drives (Claude Code,
// Codex, OpenCode, ...) at pinned versions from the npm registry into a
// per-user cache, and finds them there.
//
// Each agent lives in its own directory, AGENTS_DIR/<name>@<version>, where
// AGENTS_DIR is $AGENTBOX_CACHE_DIR/agents, else
// $XDG_CACHE_HOME/agentbox/agents, else ~/.cache/agentbox/agents. An install
// runs `npm install PKG@VERSION` into a staging directory next to the
// target, checks that the agent's binary runs, writes a manifest
// (agentbox-install.json) and renames the staging directory into place, all
// under a per-agent lock file, so concurrent installs (several processes)
// never leave a half-written cache. Once the manifest is there, Lookup and
// Ensure find the agent without touching the network.
package install

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// ManifestName is the file, at the top of an installed agent's directory,
// that says what was installed and verified there. A directory without it is
// not an install.
const ManifestName = "agentbox-install.json"

// EnvCacheDir overrides where the cache is (its agents/ subdirectory holds
// the installs).
const EnvCacheDir = "AGENTBOX_CACHE_DIR"

// Errors, wrapped with details; test with errors.Is.
var (
	ErrUnknownAgent    = errors.New("unknown agent")
	ErrNpmNotFound     = errors.New("npm not found")
	ErrRegistry        = errors.New("npm registry unreachable")
	ErrVersionNotFound = errors.New("version not found in the npm registry")
	ErrNotRunnable     = errors.New("installed agent binary does not run")
	ErrNpmFailed       = errors.New("npm install failed")
)

// Spec is one known agent and the exact package version agentbox installs.
type Spec struct {
	// Name is agentbox's name for the agent (the adapter name).
	Name string
	// Package and Version are the npm package and its pinned version.
	Package string
	Version string
	// Binaries are candidate paths of the executable, relative to the
	// install directory, best first; the first that exists is used.
	Binaries []string
	// VersionArgs run the binary to check that it works; it must exit 0.
	VersionArgs []string
	// PrintsVersion says that the output of VersionArgs contains Version.
	PrintsVersion bool
	// Env is added to the (otherwise nearly empty) environment of the
	// check, to keep the agent from phoning home or updating itself.
	Env []string
}

// Installed is an agent found in the cache, as its manifest describes it.
type Installed struct {
	Name    string `json:"name"`
	Package string `json:"package"`
	Version string `json:"version"`
	// Dir is the install directory; Binary is the absolute path of the
	// executable inside it.
	Dir    string `json:"dir"`
	Binary string `json:"binary"`
	// VerifiedOutput is what the binary printed for Spec.VersionArgs when
	// it was installed (trimmed, at most 512 bytes).
	VerifiedOutput string    `json:"verified_output"`
	InstalledAt    time.Time `json:"installed_at"`
}

// manifest is the on-disk form of an install (agentbox-install.json).
type manifest struct {
	Name           string    `json:"name"`
	Package        string    `json:"package"`
	Version        string    `json:"version"`
	Binary         string    `json:"binary"` // relative to the install dir
	InstalledAt    time.Time `json:"installed_at"`
	VerifiedOutput string    `json:"verified_output"`
}

// native returns the npm platform suffix and the Rust target triple of this
// machine (x64 / x86_64, arm64 / aarch64), for the packages that ship a
// native binary per platform.
func native() (npmArch, triple string) {
	if runtime.GOARCH == "arm64" {
		return "arm64", "aarch64"
	}
	return "x64", "x86_64"
}

// known is the table of agents. The versions were installed and run here
// (see the research note agents-offline.md); bump them only together with
// the adapters that speak to them.
func known() []Spec {
	arch, triple := native()
	return []Spec{
		{
			Name: "claude", Package: "@anthropic-ai/claude-code", Version: "2.1.332",
			// A native binary; npm warns EBADENGINE (it asks for node >= 22),
			// which does not matter.
			Binaries:      []string{"node_modules/.bin/claude"},
			VersionArgs:   []string{"--version"},
			PrintsVersion: true,
			Env:           []string{"DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"},
		},
		{
			Name: "codex", Package: "@openai/codex", Version: "0.171.0",
			// .bin/codex is a node wrapper around the native binary.
			Binaries: []string{
				"node_modules/@openai/codex-linux-" + arch + "/vendor/" + triple + "-unknown-linux-musl/bin/codex",
				"node_modules/.bin/codex",
			},
			VersionArgs:   []string{"--version"},
			PrintsVersion: true,
		},
		{
			Name: "opencode", Package: "opencode-ai", Version: "1.18.33",
			Binaries:      []string{"node_modules/.bin/opencode"},
			VersionArgs:   []string{"--version"},
			PrintsVersion: true,
			Env:           []string{"OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_SHARE=1", "OPENCODE_DISABLE_LSP_DOWNLOAD=1"},
		},
		{
			Name: "gemini", Package: "@google/gemini-cli", Version: "0.61.0",
			Binaries:      []string{"node_modules/.bin/gemini"},
			VersionArgs:   []string{"--version"},
			PrintsVersion: true,
			Env:           []string{"GEMINI_CLI_NO_RELAUNCH=1"},
		},
		{
			Name: "pi", Package: "@mariozechner/pi-coding-agent", Version: "0.73.1",
			Binaries:      []string{"node_modules/.bin/pi"},
			VersionArgs:   []string{"--version"},
			PrintsVersion: true,
			Env:           []string{"PI_OFFLINE=1", "PI_TELEMETRY=0"},
		},
		{
			Name: "claude-code-acp", Package: "@zed-industries/claude-code-acp", Version: "0.16.2",
			Binaries: []string{"node_modules/.bin/claude-code-acp"},
			// It has no version flag: it starts the ACP server, which
			// exits at once on the closed stdin.
			VersionArgs: []string{"--version"},
			Env:         []string{"DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"},
		},
		{
			Name: "codex-acp", Package: "@zed-industries/codex-acp", Version: "0.16.0",
			// .bin/codex-acp is a node wrapper (spawnSync) that can leave
			// the native child behind when killed: use the native binary.
			Binaries: []string{
				"node_modules/@zed-industries/codex-acp-linux-" + arch + "/bin/codex-acp",
				"node_modules/.bin/codex-acp",
			},
			// It rejects --version.
			VersionArgs: []string{"--help"},
		},
	}
}

// Names returns the names of the known agents, in table order.
func Names() []string {
	var names []string
	for _, s := range known() {
		names = append(names, s.Name)
	}
	return names
}

// Lookup finds an installed agent in the cache without any network access
// or lock: it reads the manifest and checks that the binary is still there
// and executable. ok is false when the agent is not (fully) installed; err
// is set only for an unknown name or a cache that cannot be read.
func Lookup(name string) (Installed, bool, error) {
	return defaultInstaller().lookup(name)
}

// Binary returns what an adapter's Options.Binary wants: a func that finds
// name's CLI in the cache (with Lookup; it never installs) and fails with a
// message saying how to install it.
func Binary(name string) func() (path, version string, err error) {
	return func() (string, string, error) {
		in, ok, err := Lookup(name)
		switch {
		case err != nil:
			return "", "", err
		case !ok:
			dir, _ := AgentsDir()
			return "", "", fmt.Errorf("%s is not in the agent cache %s (run `agentbox agents install %s`)", name, dir, name)
		}
		return in.Binary, in.Version, nil
	}
}

// Ensure returns the installed agent, installing it first when the cache
// does not hold it. progress (nil: discarded) gets a line when an install
// starts, npm's own output, prefixed, and the elapsed time at the end; a
// cache hit prints nothing and runs no npm.
func Ensure(ctx context.Context, name string, progress io.Writer) (Installed, error) {
	return defaultInstaller().ensure(ctx, name, progress, false)
}

// Reinstall installs the agent even when the cache holds it, replacing the
// cached copy once the new one is verified.
func Reinstall(ctx context.Context, name string, progress io.Writer) (Installed, error) {
	return defaultInstaller().ensure(ctx, name, progress, true)
}

// AgentsDir returns the directory holding the installs (it may not exist).
func AgentsDir() (string, error) { return defaultInstaller().agentsDir() }

// installer holds what an install takes from the process, replaceable in
// tests.
type installer struct {
	environ       []string // environment of npm; PATH and the cache variables are read from it
	specs         []Spec
	now           func() time.Time
	verifyTimeout time.Duration
	lockPoll      time.Duration
}

func defaultInstaller() *installer {
	return &installer{
		environ:       os.Environ(),
		specs:         known(),
		now:           time.Now,
		verifyTimeout: 60 * time.Second,
		lockPoll:      200 * time.Millisecond,
	}
}

func (in *installer) getenv(key string) string {
	v := ""
	for _, kv := range in.environ {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val // the last one wins, as in os/exec
		}
	}
	return v
}

func (in *installer) spec(name string) (Spec, error) {
	var names []string
	for _, s := range in.specs {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return Spec{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownAgent, name, strings.Join(names, ", "))
}

// agentsDir resolves the cache root: $AGENTBOX_CACHE_DIR/agents, else
// $XDG_CACHE_HOME/agentbox/agents (absolute only, as the XDG spec asks),
// else ~/.cache/agentbox/agents.
func (in *installer) agentsDir() (string, error) {
	if d := in.getenv(EnvCacheDir); d != "" {
		abs, err := filepath.Abs(d)
		if err != nil {
			return "", fmt.Errorf("%s: %w", EnvCacheDir, err)
		}
		return filepath.Join(abs, "agents"), nil
	}
	if d := in.getenv("XDG_CACHE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "agentbox", "agents"), nil
	}
	home := in.getenv("HOME")
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no cache directory: set %s or HOME: %w", EnvCacheDir, err)
		}
		home = h
	}
	return filepath.Join(home, ".cache", "agentbox", "agents"), nil
}

// dirName is the install directory's name for s.
func dirName(s Spec) string { return s.Name + "@" + s.Version }

func (in *installer) lookup(name string) (Installed, bool, error) {
	s, err := in.spec(name)
	if err != nil {
		return Installed{}, false, err
	}
	root, err := in.agentsDir()
	if err != nil {
		return Installed{}, false, err
	}
	return readInstall(filepath.Join(root, dirName(s)), s)
}

// readInstall reads dir's manifest. A missing, unreadable-as-JSON or
// mismatched manifest, or a binary that is gone, means "not installed"; only
// I/O errors other than "does not exist" are returned.
func readInstall(dir string, s Spec) (Installed, bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) { // a file where the directory should be
		return Installed{}, false, nil
	}
	if err != nil {
		return Installed{}, false, fmt.Errorf("agent cache: %w", err)
	}
	var m manifest
	if json.Unmarshal(b, &m) != nil || m.Name != s.Name || m.Package != s.Package || m.Version != s.Version ||
		!filepath.IsLocal(m.Binary) {
		return Installed{}, false, nil
	}
	bin := filepath.Join(dir, m.Binary)
	if !isExecutable(bin) {
		return Installed{}, false, nil
	}
	return Installed{
		Name: m.Name, Package: m.Package, Version: m.Version,
		Dir: dir, Binary: bin, VerifiedOutput: m.VerifiedOutput, InstalledAt: m.InstalledAt,
	}, true, nil
}

// isExecutable says whether path (symlinks followed) is a regular file with
// an execute bit.
func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

func (in *installer) ensure(ctx context.Context, name string, progress io.Writer, force bool) (Installed, error) {
	s, err := in.spec(name)
	if err != nil {
		return Installed{}, err
	}
	if progress == nil {
		progress = io.Discard
	}
	root, err := in.agentsDir()
	if err != nil {
		return Installed{}, err
	}
	target := filepath.Join(root, dirName(s))
	if !force {
		if got, ok, err := readInstall(target, s); err != nil || ok {
			return got, err // the fast path: no lock, no npm
		}
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return Installed{}, fmt.Errorf("agent cache: %w", err)
	}
	unlock, err := in.lock(ctx, filepath.Join(root, "."+dirName(s)+".lock"), s, progress)
	if err != nil {
		return Installed{}, err
	}
	defer unlock()
	// Whoever held the lock before us may have installed it.
	if !force {
		if got, ok, err := readInstall(target, s); err != nil || ok {
			return got, err
		}
	}
	removeLeftovers(root, s)
	return in.install(ctx, s, root, target, progress)
}

// lock takes the per-agent lock, polling so that ctx can end the wait, and
// says once on progress that it waits for another install.
func (in *installer) lock(ctx context.Context, path string, s Spec, progress io.Writer) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("agent cache lock: %w", err)
	}
	said := false
	for {
		ok, err := tryLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("agent cache lock %s: %w", path, err)
		}
		if ok {
			return func() { unlockFile(f); f.Close() }, nil
		}
		if !said {
			_, _ = fmt.Fprintf(progress, "agentbox: waiting for another install of %s (lock %s)\n", s.Name, path)
			said = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for the install lock of %s: %w", s.Name, context.Cause(ctx))
		case <-time.After(in.lockPoll):
		}
	}
}

// Leftover directories of an install that died (we hold the lock, so no one
// is using them) are named .staging-, .home- and .old-<name>@<version>-*.
var leftoverKinds = []string{".staging-", ".home-", ".old-"}

func removeLeftovers(root string, s Spec) {
	for _, k := range leftoverKinds {
		matches, _ := filepath.Glob(filepath.Join(root, k+dirName(s)+"-*"))
		for _, m := range matches {
			_ = os.RemoveAll(m)
		}
	}
}

// install does the work under the lock: npm into a staging directory,
// verification, manifest, rename into place.
func (in *installer) install(ctx context.Context, s Spec, root, target string, progress io.Writer) (Installed, error) {
	start := in.now()
	pkg := s.Package + "@" + s.Version
	npm, err := lookPath("npm", in.getenv("PATH"))
	if err != nil {
		return Installed{}, fmt.Errorf("%w on PATH: agent CLIs are installed from the npm registry, so Node.js and npm are needed (Debian/Ubuntu, as root: apt-get install nodejs npm; or run scripts/setup)", ErrNpmNotFound)
	}
	_, _ = fmt.Fprintf(progress, "agentbox: installing %s (%s) into %s\n", s.Name, pkg, target) // progress is best effort

	staging, err := os.MkdirTemp(root, ".staging-"+dirName(s)+"-")
	if err != nil {
		return Installed{}, fmt.Errorf("agent cache: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_ = os.RemoveAll(staging)
		}
	}()
	if err := os.Chmod(staging, 0o755); err != nil { // MkdirTemp makes it 0700
		return Installed{}, fmt.Errorf("agent cache: %w", err)
	}
	pj := fmt.Sprintf("{\n  \"name\": \"agentbox-agent-%s\",\n  \"private\": true,\n  \"description\": \"installed by agentbox: %s\"\n}\n", s.Name, pkg)
	if err := os.WriteFile(filepath.Join(staging, "package.json"), []byte(pj), 0o644); err != nil {
		return Installed{}, fmt.Errorf("agent cache: %w", err)
	}
	if err := in.runNpm(ctx, npm, staging, pkg, progress); err != nil {
		return Installed{}, err
	}

	rel := ""
	for _, b := range s.Binaries {
		if isExecutable(filepath.Join(staging, b)) {
			rel = b
			break
		}
	}
	if rel == "" {
		return Installed{}, fmt.Errorf("%w: npm installed %s but none of %s is an executable file", ErrNotRunnable, pkg, strings.Join(s.Binaries, ", "))
	}
	out, err := in.verify(ctx, s, root, filepath.Join(staging, rel), npm)
	if err != nil {
		return Installed{}, err
	}

	m := manifest{Name: s.Name, Package: s.Package, Version: s.Version, Binary: rel, InstalledAt: in.now().UTC(), VerifiedOutput: out}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return Installed{}, err
	}
	if err := writeFileSync(filepath.Join(staging, ManifestName), append(b, '\n')); err != nil {
		return Installed{}, fmt.Errorf("agent cache: %w", err)
	}
	if err := replaceDir(root, target, staging, s); err != nil {
		return Installed{}, fmt.Errorf("agent cache: %w", err)
	}
	done = true

	got, ok, err := readInstall(target, s)
	if err != nil {
		return Installed{}, err
	}
	if !ok {
		return Installed{}, fmt.Errorf("agent cache: %s vanished right after it was installed", target)
	}
	_, _ = fmt.Fprintf(progress, "agentbox: installed %s %s in %s (%s on disk): %s\n",
		s.Name, s.Version, in.now().Sub(start).Round(100*time.Millisecond), humanBytes(diskUsage(target)), got.Binary)
	return got, nil
}

// replaceDir moves staging to target. Whatever is at target (a broken or
// foreign directory, or the copy being reinstalled) is first moved aside
// and then removed: processes still running its binary keep running.
func replaceDir(root, target, staging string, s Spec) error {
	if _, err := os.Lstat(target); err == nil {
		old, err := os.MkdirTemp(root, ".old-"+dirName(s)+"-")
		if err != nil {
			return err
		}
		aside := filepath.Join(old, "dir")
		if err := os.Rename(target, aside); err != nil {
			_ = os.Remove(old)
			return err
		}
		defer func() { _ = os.RemoveAll(old) }()
	}
	if err := os.Rename(staging, target); err != nil {
		return err
	}
	return syncDir(root)
}

func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	_ = d.Sync() // not supported everywhere; best effort
	return nil
}

// lookPath finds an executable in the PATH list given (not the process's).
func lookPath(file, path string) (string, error) {
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, file)
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in PATH", file)
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.0f MB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%d KB", (n+1023)/1024)
	}
}

// diskUsage is the disk space the files under dir take, counting hard
// links once (npm postinstall scripts hard-link native binaries).
func diskUsage(dir string) int64 {
	var n int64
	seen := map[[2]uint64]bool{}
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		id, size, ok := diskFile(fi)
		if ok {
			if seen[id] {
				return nil
			}
			seen[id] = true
		}
		n += size
		return nil
	})
	return n
}

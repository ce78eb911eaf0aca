package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Protected is the protected-pattern list of the default spec: a subset of
// the policy's built-in list (the agent configuration files), in
// the policy's pattern language (workspace.Match): patterns are anchored at
// the workspace root, "**/" matches any depth, and "dir/**" matches dir
// itself and everything below it.
var Protected = []string{
	"**/CLAUDE.md", "**/AGENTS.md", "**/GEMINI.md",
	"**/.claude/**", "**/.codex/**", "**/.gemini/**", "**/.cursor/**", "**/.vscode/**", "**/.idea/**",
	"**/.cursorrules", "**/.mcp.json",
	"**/.git/hooks/**", "**/.git/config", "**/.gitmodules", "**/.envrc",
	"**/.bashrc", "**/.bash_profile", "**/.zshrc", "**/.profile", "**/.gitconfig",
}

// protectedBy returns the pattern of Protected that covers rel. It is the
// suite's own reading of the patterns above (only the forms they use), so
// that a bug in the runtime's matcher cannot hide a leak from the suite.
func protectedBy(rel string) (string, bool) {
	segs := strings.Split(rel, "/")
	for _, p := range Protected {
		body, anyDepth := strings.CutPrefix(p, "**/")
		base, isDir := strings.CutSuffix(body, "/**")
		start := 0
		if anyDepth {
			start = len(segs) - 1
		}
		for i := 0; i <= start; i++ {
			c := strings.Join(segs[i:], "/")
			if c == base || (isDir && strings.HasPrefix(c, base+"/")) {
				return p, true
			}
		}
	}
	return "", false
}

// gitRuleBy says why a workspace path (a directory when dir) may never
// change on the host: it is named .git (created, replaced or removed), or
// it lies in a .git directory and is not one of the files git writes in
// normal work (or a directory holding them). It is the suite's own,
// deliberately plain reading of the commit's rules (ASCII case only).
func gitRuleBy(rel string, dir bool) (string, bool) {
	segs := strings.Split(rel, "/")
	for i, s := range segs {
		if !strings.EqualFold(s, ".git") {
			continue
		}
		inner := segs[i+1:]
		if len(inner) == 0 {
			return "a .git entry", true
		}
		// Submodule git directories: judge what follows the last
		// "modules/<name>" the same way.
		for len(inner) > 2 && inner[0] == "modules" {
			k := 2
			for k < len(inner) && !gitDataPath(inner[k:]) {
				k++
			}
			if k == len(inner) {
				break
			}
			inner = inner[k:]
		}
		dataDir := dir && (inner[0] == "objects" || inner[0] == "refs" || inner[0] == "logs" || inner[0] == "modules" ||
			(len(inner) == 1 && inner[0] == "info"))
		if !gitDataPath(inner) && !dataDir {
			return "a file in a .git directory that git does not write in normal work", true
		}
		return "", false
	}
	return "", false
}

func gitDataPath(inner []string) bool {
	if strings.HasSuffix(inner[len(inner)-1], ".lock") {
		return false
	}
	switch inner[0] {
	case "objects":
		return len(inner) < 3 || inner[1] != "info" || (inner[2] != "alternates" && inner[2] != "http-alternates")
	case "refs", "logs":
		return true
	case "info":
		return len(inner) == 2 && inner[1] == "refs"
	}
	if len(inner) != 1 {
		return false
	}
	switch n := inner[0]; n {
	case "HEAD", "index", "packed-refs", "shallow", "AUTO_MERGE", "COMMIT_EDITMSG", "MERGE_MSG", "MERGE_MODE", "SQUASH_MSG", "TAG_EDITMSG":
		return true
	default:
		return strings.HasSuffix(n, "_HEAD")
	}
}

// hiddenBy returns the first hidden component of rel outside a .git
// directory (one starting with "."), which the commit holds for review.
func hiddenBy(rel string) (string, bool) {
	for _, s := range strings.Split(rel, "/") {
		if strings.EqualFold(s, ".git") {
			return "", false
		}
		if strings.HasPrefix(s, ".") {
			return s, true
		}
	}
	return "", false
}

// workspaceFiles is the realistic repository every case starts from.
var workspaceFiles = map[string]string{
	"README.md":             "# demo\n",
	"main.go":               "package main\n\nfunc main() {}\n",
	"old.txt":               "to be deleted\n",
	"src/app.py":            "print('hello')\n",
	"sub/notes.txt":         "notes\n",
	".gitignore":            "*.o\n",
	".mcp.json":             `{"mcpServers":{}}` + "\n",
	"CLAUDE.md":             "# project rules\n",
	"AGENTS.md":             "# agents\n",
	".cursorrules":          "be nice\n",
	".git/HEAD":             "ref: refs/heads/main\n",
	".git/config":           "[core]\n\trepositoryformatversion = 0\n",
	".git/hooks/pre-commit": "#!/bin/sh\nexit 0\n",
	".vscode/settings.json": "{}\n",
}

// harness is one case's fixture: host directories, the spec, the sandbox,
// and what the host looked like before.
type harness struct {
	t      *testing.T
	rt     sandbox.Runtime
	opts   Options
	sh     *shared
	c      tcase
	marker string

	root, ws, outside, home string
	spec                    sandbox.Spec

	sb         sandbox.Sandbox
	closed     bool
	violations []sandbox.Violation // from every Commit and Close
	pids       []int

	before map[string]map[string]entry // snapshots by directory
	// allow decides which workspace changes a case expects on the host
	// (never a protected path); nil allows none.
	allow func(c change) bool
	// settled: the workspace was checked and the case then changed it
	// from the host side (settleWorkspace).
	settled bool

	mu            sync.Mutex
	approvedPaths []string // see approve
}

func newHarness(t *testing.T, rt sandbox.Runtime, opts Options, sh *shared, c tcase) *harness {
	guardHost()
	root := t.TempDir()
	h := &harness{
		t: t, rt: rt, opts: opts, sh: sh, c: c,
		marker:  "agentbox-escape-" + randHex(10),
		root:    root,
		ws:      filepath.Join(root, "ws"),
		outside: filepath.Join(root, "outside"),
		home:    filepath.Join(root, "home"),
	}
	files := map[string]string{}
	for p, d := range workspaceFiles {
		files[filepath.Join(h.ws, p)] = d
	}
	for p, d := range map[string]string{
		"outside/secret.txt":        "outside secret\n",
		"outside/dir/keep.txt":      "keep\n",
		"home/.bashrc":              "# host bashrc\n",
		"home/.zshrc":               "# host zshrc\n",
		"home/.gitconfig":           "[user]\n\tname = host\n",
		"home/.ssh/id_rsa":          "-----BEGIN FAKE KEY-----\n",
		"home/.ssh/authorized_keys": "ssh-ed25519 AAAA host\n",
		"home/.aws/credentials":     "[default]\naws_secret_access_key = " + sh.secrets["AWS_SECRET_ACCESS_KEY"] + "\n",
	} {
		files[filepath.Join(root, p)] = d
	}
	for p, d := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(d), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(h.ws, ".git/hooks/pre-commit"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(h.home, ".ssh/id_rsa"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The workspace is left as the test (the daemon's user) created it:
	// making it writable for the sandbox's uid is the runtime's job. Only
	// the path to it is made traversable (t.TempDir is 0700), as a
	// daemon's data directory would be.
	for dir := filepath.Dir(h.ws); strings.HasPrefix(dir, os.TempDir()) && len(dir) > len(os.TempDir()); dir = filepath.Dir(dir) {
		if info, err := os.Stat(dir); err == nil {
			_ = os.Chmod(dir, info.Mode().Perm()|0o111)
		}
	}
	h.spec = h.defaultSpec()
	return h
}

func (h *harness) defaultSpec() sandbox.Spec {
	return sandbox.Spec{
		Workspace:    h.ws,
		WorkspaceDir: h.ws,
		Protected:    append([]string(nil), Protected...),
		Env: map[string]string{
			"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
			// HOME names the host home on purpose: the sandbox must not
			// reach it, whatever the spec says.
			"HOME": h.home,
		},
		Limits: sandbox.Limits{
			MemoryBytes: 512 << 20,
			CPUs:        1,
			Pids:        128,
			Timeout:     time.Minute,
			DiskBytes:   64 << 20,
			OutputBytes: 16 << 20,
		},
		Syscalls: sandbox.Syscalls{Profile: "default"},
		Network:  sandbox.Network{Mode: sandbox.NetworkNone},
		Hostname: "sandbox",
	}
}

// stateDir makes a host state directory (an agent's home, Spec.StateDirs)
// holding files, private to the daemon's user as agent homes are.
func (h *harness) stateDir(files map[string]string) string {
	h.t.Helper()
	dir, err := os.MkdirTemp(h.root, "state-")
	if err != nil {
		h.t.Fatal(err)
	}
	for rel, data := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			h.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			h.t.Fatal(err)
		}
	}
	return dir
}

// remove deletes workspace paths before the sandbox is created.
func (h *harness) remove(rels ...string) {
	for _, rel := range rels {
		if err := os.RemoveAll(filepath.Join(h.ws, rel)); err != nil {
			h.t.Fatal(err)
		}
	}
}

// create snapshots the host and creates the sandbox with the default spec
// changed by mods (then by Options.Spec). It registers the end-of-case
// checks.
func (h *harness) create(mods ...func(*sandbox.Spec)) {
	h.t.Helper()
	for _, m := range mods {
		m(&h.spec)
	}
	if h.opts.Spec != nil {
		h.opts.Spec(&h.spec)
	}
	h.before = map[string]map[string]entry{}
	for _, dir := range []string{h.ws, h.outside, h.home} {
		snap, err := snapshot(dir)
		if err != nil {
			h.t.Fatalf("snapshot %s: %v", dir, err)
		}
		h.before[dir] = snap
	}
	ctx, cancel := bg(2*time.Minute + h.opts.SlowStart)
	defer cancel()
	sb, err := safeCreate(ctx, h.rt, h.spec)
	if err != nil {
		h.t.Fatalf("Create: %v", err)
	}
	h.sb = sb
	h.t.Cleanup(h.finish)
}

// errPanicked marks a runtime panic caught by the suite.
var errPanicked = errors.New("runtime panicked")

// safeCreate is rt.Create with a runtime panic turned into an error, so one
// broken case does not abort the whole suite.
func safeCreate(ctx context.Context, rt sandbox.Runtime, spec sandbox.Spec) (sb sandbox.Sandbox, err error) {
	defer func() {
		if p := recover(); p != nil {
			sb, err = nil, fmt.Errorf("%w in Create: %v\n%s", errPanicked, p, debug.Stack())
		}
	}()
	return rt.Create(ctx, spec)
}

// commit calls Sandbox.Commit and records its violations.
func (h *harness) commit() []sandbox.Violation {
	h.t.Helper()
	ctx, cancel := bg(time.Minute)
	defer cancel()
	v, err := h.sb.Commit(ctx)
	if err != nil {
		h.t.Errorf("Commit: %v", err)
	}
	h.violations = append(h.violations, v...)
	return v
}

// close calls Sandbox.Close once and records its violations.
func (h *harness) close() {
	h.t.Helper()
	if h.closed || h.sb == nil {
		return
	}
	h.closed = true
	ctx, cancel := bg(time.Minute)
	defer cancel()
	v, err := h.sb.Close(ctx)
	if err != nil {
		h.t.Errorf("Close: %v", err)
	}
	h.violations = append(h.violations, v...)
}

// finish closes the sandbox and asserts that the host is unchanged.
func (h *harness) finish() {
	t := h.t
	h.close()

	if left := waitNoMarkerProcs(h.marker, 2*time.Second); len(left) > 0 {
		t.Errorf("processes of the sandbox left on the host after Close:\n  %s", strings.Join(left, "\n  "))
	}
	for _, pid := range h.pids {
		if !pidGone(pid, h.marker) {
			t.Errorf("host pid %d of a sandboxed process still exists after Close", pid)
		}
	}
	for _, dir := range []string{h.outside, h.home} {
		now, err := snapshot(dir)
		if err != nil {
			t.Errorf("snapshot %s: %v", dir, err)
			continue
		}
		for _, c := range diff(h.before[dir], now) {
			t.Errorf("host directory outside the workspace changed: %s: %s", dir, c)
		}
	}
	if !h.settled {
		h.checkWorkspace()
	}
	for _, msg := range checkHostFiles() {
		t.Errorf("%s (restored by the suite)", msg)
	}
}

// checkWorkspace asserts that every change in the host workspace since the
// snapshot is one the case allows and none the commit must never apply:
// a protected path, a .git entry or a git directory file outside git's
// own data, a hidden path no reviewer approved.
func (h *harness) checkWorkspace() {
	t := h.t
	now, err := snapshot(h.ws)
	if err != nil {
		t.Errorf("snapshot workspace: %v", err)
	}
	for _, c := range diff(h.before[h.ws], now) {
		if pat, ok := protectedBy(c.Path); ok {
			t.Errorf("protected workspace path changed on the host (pattern %q): %s", pat, c)
			continue
		}
		isDir := (c.Now != nil && c.Now.Mode.IsDir()) || (c.Now == nil && c.Before.Mode.IsDir())
		if why, ok := gitRuleBy(c.Path, isDir); ok {
			t.Errorf("%s changed on the host: %s", why, c)
			continue
		}
		if seg, ok := hiddenBy(c.Path); ok {
			if !h.approved(c.Path) {
				t.Errorf("hidden path (%s) changed on the host without a reviewer's approval: %s", seg, c)
			}
			continue
		}
		if h.allow == nil || !h.allow(c) {
			t.Errorf("unexpected change in the host workspace: %s", c)
		}
	}
}

// settleWorkspace checks the host workspace now, as the end of the case
// would, and stops checking it: the case goes on to use it from the host
// side (say, runs git in it), which changes it legitimately.
func (h *harness) settleWorkspace() {
	h.t.Helper()
	h.close()
	h.checkWorkspace()
	h.settled = true
}

// approve records workspace paths a case's reviewer approved: changes at
// and below them may reach the host although they are hidden.
func (h *harness) approve(rel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.approvedPaths = append(h.approvedPaths, rel)
}

func (h *harness) approved(rel string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.approvedPaths {
		if rel == p || strings.HasPrefix(rel, p+"/") {
			return true
		}
	}
	return false
}

// hostGit runs git on the host, in dir, as a user would after the
// session: as the daemon's user, with no global or system configuration.
func (h *harness) hostGit(dir string, args ...string) (string, error) {
	h.t.Helper()
	home := filepath.Join(h.root, "githome")
	if err := os.MkdirAll(home, 0o700); err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := bg(time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(gitIdentity(), "PATH=/usr/local/bin:/usr/bin:/bin", "HOME="+home, "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mustHostGit is hostGit that fails the case on an error.
func (h *harness) mustHostGit(dir string, args ...string) string {
	h.t.Helper()
	out, err := h.hostGit(dir, args...)
	if err != nil {
		h.t.Fatalf("host: git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return out
}

func gitIdentity() []string {
	return []string{"GIT_AUTHOR_NAME=agentbox test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=agentbox test", "GIT_COMMITTER_EMAIL=test@example.com"}
}

// result is a finished sandboxed process.
type result struct {
	exit           sandbox.Exit
	err            error // from Wait
	stdout, stderr string
	probes         map[string]string
	dups           []string
	pid            int
}

func (r *result) String() string {
	return fmt.Sprintf("exit=%+v wait_err=%v\n--- stdout ---\n%s\n--- stderr ---\n%s", r.exit, r.err, clip(r.stdout), clip(r.stderr))
}

func clip(s string) string {
	if len(s) > 4000 {
		return s[:4000] + fmt.Sprintf("… (%d bytes)", len(s))
	}
	return s
}

// runOpts adjusts one command.
type runOpts struct {
	stdin          io.Reader
	stdout, stderr io.Writer // replace the captured buffers
	timeout        time.Duration
	env            map[string]string
	dir            string
	watchdog       time.Duration // how long Wait may take before the case fails
}

// proc is a started command.
type proc struct {
	h              *harness
	p              sandbox.Process
	stdout, stderr *syncBuffer
	watchdog       time.Duration
}

// start runs args in the sandbox; the marker is in its environment so
// every descendant can be found on the host.
func (h *harness) start(args []string, o runOpts) *proc {
	h.t.Helper()
	env := map[string]string{"AGENTBOX_ESCAPE_MARKER": h.marker}
	for k, v := range o.env {
		env[k] = v
	}
	pr := &proc{h: h, stdout: &syncBuffer{}, stderr: &syncBuffer{}, watchdog: o.watchdog}
	if pr.watchdog == 0 {
		pr.watchdog = 90 * time.Second
	}
	pr.watchdog += h.opts.SlowStart
	cmd := sandbox.Cmd{Args: args, Env: env, Dir: o.dir, Stdin: o.stdin, Stdout: pr.stdout, Stderr: pr.stderr, Timeout: o.timeout}
	if o.stdout != nil {
		cmd.Stdout = o.stdout
	}
	if o.stderr != nil {
		cmd.Stderr = o.stderr
	}
	ctx, cancel := bg(time.Minute + h.opts.SlowStart)
	defer cancel()
	p, err := h.sb.Start(ctx, cmd)
	if err != nil {
		h.t.Fatalf("Start %q: %v", args[0], err)
	}
	pr.p = p
	if pid := p.Pid(); pid > 0 {
		h.pids = append(h.pids, pid)
	}
	return pr
}

// wait waits for the process, failing the case if Wait hangs.
func (pr *proc) wait() *result {
	h := pr.h
	h.t.Helper()
	type waited struct {
		exit sandbox.Exit
		err  error
	}
	ch := make(chan waited, 1)
	go func() {
		e, err := pr.p.Wait()
		ch <- waited{e, err}
	}()
	var w waited
	select {
	case w = <-ch:
	case <-time.After(pr.watchdog):
		_ = pr.p.Signal(syscall.SIGKILL)
		select {
		case w = <-ch:
			h.t.Errorf("Wait did not return within %v; it returned only after SIGKILL", pr.watchdog)
		case <-time.After(30 * time.Second):
			h.t.Fatalf("Wait did not return within %v, nor 30s after SIGKILL", pr.watchdog)
		}
	}
	r := &result{exit: w.exit, err: w.err, stdout: pr.stdout.String(), stderr: pr.stderr.String(), pid: pr.p.Pid()}
	r.probes, r.dups = parseProbes(r.stdout)
	// No host secret may ever appear in what a sandbox prints.
	for name, v := range h.sh.secrets {
		if strings.Contains(r.stdout, v) || strings.Contains(r.stderr, v) {
			h.t.Errorf("the value of host variable %s appeared in the sandbox's output", name)
		}
	}
	return r
}

// python runs a probe script (the prelude plus code) and waits for it.
func (h *harness) python(code string, o ...runOpts) *result {
	h.t.Helper()
	return h.start(h.pythonArgs(code), first(o)).wait()
}

func (h *harness) pythonArgs(code string) []string {
	// -I -S: no user site, no PYTHON* variables, no site import: a
	// smaller and faster interpreter start, and nothing from the host.
	return []string{"python3", "-I", "-S", "-c", prelude() + code, h.marker}
}

// shell runs a /bin/sh script (the marker is $0) and waits for it.
func (h *harness) shell(script string, o ...runOpts) *result {
	h.t.Helper()
	return h.start(h.shellArgs(script), first(o)).wait()
}

func (h *harness) shellArgs(script string) []string {
	return []string{"sh", "-c", script, h.marker}
}

func first(o []runOpts) runOpts {
	if len(o) > 0 {
		return o[0]
	}
	return runOpts{}
}

// want returns the expected result of probe, after Options.Expect.
func (h *harness) want(probe string) string {
	if w, ok := h.opts.Expect[h.c.name+"/"+probe]; ok {
		return w
	}
	w, ok := h.c.want[probe]
	if !ok {
		h.t.Fatalf("suite bug: case %s has no probe %q", h.c.name, probe)
	}
	return w
}

// expect asserts the named probes (all of the case's when none are named)
// against their expected results, and that the process did not fail in an
// unexpected way.
func (h *harness) expect(r *result, probes ...string) {
	h.t.Helper()
	if len(probes) == 0 {
		probes = sortedKeys(h.c.want)
	}
	h.t.Logf("probes: %s", fmtEnv(r.probes))
	var bad []string
	for _, p := range probes {
		want := h.want(p)
		got, ok := r.probes[p]
		if !ok {
			got = "(not reported)"
		}
		if !matches(want, got) {
			bad = append(bad, fmt.Sprintf("%s: got %s, want %s", p, got, want))
		}
	}
	if len(r.dups) > 0 {
		bad = append(bad, "probes reported twice: "+strings.Join(r.dups, ", "))
	}
	if len(bad) > 0 {
		h.t.Errorf("probe results differ:\n  %s\n%s", strings.Join(bad, "\n  "), r)
	}
}

// got returns the result of a probe ("" if not reported).
func (r *result) got(probe string) string { return r.probes[probe] }

// expectExit asserts a clean exit with code.
func (h *harness) expectExit(r *result, code int) {
	h.t.Helper()
	if r.err != nil || r.exit.Code != code || r.exit.Reason != "" {
		h.t.Errorf("want exit %d with no verdict, got:\n%s", code, r)
	}
}

// expectDropped asserts that Commit/Close reported one of rels (the
// changed path, or a parent whose removal covers it) as a dropped change to
// a protected path, with the rule naming pattern.
func (h *harness) expectDropped(pattern string, rels ...string) {
	h.t.Helper()
	for _, v := range h.violations {
		if v.Action != "dropped" || v.Kind != sandbox.ViolationFilesystem || !strings.Contains(v.Rule, pattern) {
			continue
		}
		for _, rel := range rels {
			if v.Target == rel || strings.HasSuffix(v.Target, "/"+rel) {
				return
			}
		}
	}
	h.t.Errorf("no violation {kind: filesystem, action: dropped, target: %s, rule naming %q} from Commit/Close; got %s",
		strings.Join(rels, " or "), pattern, fmtViolations(h.violations))
}

func fmtViolations(vs []sandbox.Violation) string {
	if len(vs) == 0 {
		return "none"
	}
	var b strings.Builder
	for _, v := range vs {
		fmt.Fprintf(&b, "\n  %+v", v)
	}
	return b.String()
}

// read returns a host workspace file's content ("" and false if absent).
func (h *harness) read(rel string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(h.ws, rel))
	if err != nil {
		return "", false
	}
	return string(b), true
}

// syncBuffer is a bytes.Buffer safe for the runtime's copying goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

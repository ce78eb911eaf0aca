package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/client"
)

// The newcomer path: what someone who has just cloned the repository
// meets, from the README's first screen to the first errors a wrong setup
// gives (research/newcomer-review.md). Each error must say what to do.

// repoRoot is the checkout this test runs in.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestNewcomerReadmeCommands: the README's first screen gives two commands,
// `make demo` and `make test`, and says what each does; the Makefile has
// both targets, each running the script the README's words describe.
func TestNewcomerReadmeCommands(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The first screen: what comes before the first rule.
	first, _, ok := strings.Cut(string(readme), "\n---\n")
	if !ok || strings.Count(first, "\n") > 30 {
		t.Fatalf("the README's first screen (before its first ---) is missing or longer than a screen:\n%s", first)
	}
	block := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(first)
	if block == nil {
		t.Fatalf("no sh block on the README's first screen:\n%s", first)
	}
	var cmds []string
	for _, l := range strings.Split(strings.TrimSpace(block[1]), "\n") {
		cmd, comment, _ := strings.Cut(l, "#")
		cmds = append(cmds, strings.TrimSpace(cmd))
		switch strings.TrimSpace(cmd) {
		case "make demo":
			for _, w := range []string{"build", "start the daemon", "demo session", "mock"} {
				if !strings.Contains(comment, w) {
					t.Errorf("the README says of make demo %q, without %q", comment, w)
				}
			}
		case "make test":
			for _, w := range []string{"install what the tests need", "run every test"} {
				if !strings.Contains(comment, w) {
					t.Errorf("the README says of make test %q, without %q", comment, w)
				}
			}
		}
	}
	if strings.Join(cmds, ";") != "make demo;make test" {
		t.Fatalf("the README's first screen gives %q, want make demo and make test", cmds)
	}

	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for target, script := range map[string]string{"demo": "./scripts/demo", "test": "./scripts/test"} {
		m := regexp.MustCompile(`(?m)^` + target + `:.*\n\t(.*)$`).FindStringSubmatch(string(makefile))
		if m == nil || strings.TrimSpace(m[1]) != script {
			t.Errorf("Makefile target %s: %q, want it to run %s", target, m, script)
			continue
		}
		if !regexp.MustCompile(`(?m)^\.PHONY:.*\b` + target + `\b`).Match(makefile) {
			t.Errorf("Makefile target %s is not .PHONY", target)
		}
		if fi, err := os.Stat(filepath.Join(root, script)); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("%s: %v (mode %v): make %s cannot run it", script, err, fi, target)
		}
	}
	demo, err := os.ReadFile(filepath.Join(root, "scripts/demo"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"scripts/build", " serve ", "run --agent mock", "sessions events"} {
		if !bytes.Contains(demo, []byte(w)) {
			t.Errorf("scripts/demo does not do what the README says (no %q)", w)
		}
	}
}

// TestNewcomerMakeDemo runs the real `make demo` (about 2 s once the
// machine is set up, which `make test` does first) and checks that it shows
// a full mock turn, with the agents table within 100 columns.
func TestNewcomerMakeDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make demo")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "demo")
	cmd.Dir = repoRoot(t)
	// The demo's daemon and CLI take their address and data from the
	// script; nothing of this test's environment may point them elsewhere.
	cmd.Env = withoutAgentboxEnv(os.Environ())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("make demo: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, w := range []string{"$ agentbox agents", "mock", "$ agentbox run --agent mock --yes '/scenario all'", "✓ end_turn", "$ agentbox sessions list", "$ agentbox sessions events"} {
		if !strings.Contains(out, w) {
			t.Errorf("make demo's output lacks %q:\n%s", w, out)
		}
	}
	table, _, _ := strings.Cut(strings.SplitN(out, "$ agentbox agents\n", 2)[len(strings.SplitN(out, "$ agentbox agents\n", 2))-1], "\n\n")
	for _, l := range strings.Split(table, "\n") {
		if n := utf8.RuneCountInString(l); n > 100 {
			t.Errorf("the demo's agents table is %d columns wide: %q", n, l)
		}
	}
}

func withoutAgentboxEnv(env []string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, "AGENTBOX_") {
			out = append(out, e)
		}
	}
	return out
}

// runCLI runs the binary as a client with args and returns its exit code,
// stdout and stderr.
func runCLI(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append([]string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin"}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("%v: %v", args, err)
	return 0, "", ""
}

// TestNewcomerErrors: each first mistake gets an error that says what to
// do, from the real binary.
func TestNewcomerErrors(t *testing.T) {
	t.Run("no daemon", func(t *testing.T) {
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		for _, args := range [][]string{{"sessions", "list"}, {"run", "--agent", "mock", "hi"}} {
			code, _, stderr := runCLI(t, []string{"AGENTBOX_URL=http://" + addr}, args...)
			if code != 1 || !strings.Contains(stderr, "no agentbox daemon answers at tcp "+addr+": start one with `agentbox serve`, or point --url or AGENTBOX_URL at one") {
				t.Errorf("%v with no daemon: %d %q", args, code, stderr)
			}
		}
	})
	t.Run("amp install", func(t *testing.T) {
		code, _, stderr := runCLI(t, nil, "agents", "install", "amp")
		if code != 1 || !strings.Contains(stderr, "amp cannot be installed: not supported: Amp's agent loop runs on Amp's servers") || strings.Contains(stderr, "unknown agent") {
			t.Errorf("agents install amp: %d %q", code, stderr)
		}
	})
	t.Run("401", func(t *testing.T) {
		d := startDaemon(t, t.TempDir())
		code, _, stderr := runCLI(t, []string{"AGENTBOX_URL=" + d.url}, "agents", "--token", "not-the-token")
		for _, w := range []string{"401 Unauthorized", "pass the daemon's token with --token or AGENTBOX_TOKEN", "DATA_DIR/token"} {
			if code != 1 || !strings.Contains(stderr, w) {
				t.Errorf("a wrong token: %d %q, want %q", code, stderr, w)
			}
		}
		if strings.Contains(stderr, d.token) {
			t.Error("the 401 message shows the token")
		}
	})
	t.Run("non-root daemon", testNonRootDaemon)
}

// testNonRootDaemon: a daemon that cannot create sandboxes because it is
// not root says so, by name, to a client asking for a sandboxed exec or
// session, and doctor run as that user says so too; never an idmap
// helper's failure.
func testNonRootDaemon(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a daemon as another user")
	}
	const nobody = 65534
	// The binary and the data dir must be reachable by that user: the
	// test's build dir is root's alone.
	dir, err := os.MkdirTemp("", "agentbox-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "agentbox")
	copyFile(t, binary, bin, 0o755)
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(data, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	asNobody := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}

	port := freePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	logs := &lockedBuffer{}
	srv := exec.Command(bin, "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data-dir", data)
	srv.Env = []string{"HOME=" + data, "PATH=/usr/bin:/bin"}
	srv.Stdout, srv.Stderr, srv.SysProcAttr = logs, logs, asNobody
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Process.Kill()
		_ = srv.Wait()
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs.String())
		}
	})
	var token string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// Root reads it as it is (client.ReadTokenFile refuses another
		// user's file, on purpose).
		b, err := os.ReadFile(filepath.Join(data, client.TokenFileName))
		tok := strings.TrimSpace(string(b))
		if err == nil && tok != "" {
			c, _ := client.New(url, client.WithToken(tok))
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			_, err = c.Health(ctx)
			cancel()
			if err == nil {
				token = tok
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("non-root daemon not healthy: %v\n%s", err, logs.String())
		}
	}
	const want = "the process runtime needs root (CAP_SYS_ADMIN, CAP_SETUID, CAP_SETGID)"
	env := []string{"AGENTBOX_URL=" + url, "AGENTBOX_TOKEN=" + token}
	for _, args := range [][]string{
		{"exec", "--", "true"},
		{"run", "--agent", "mock", "--policy", "agent-default", "hi"},
	} {
		code, _, stderr := runCLI(t, env, args...)
		if code != 1 || !strings.Contains(stderr, "422") || !strings.Contains(stderr, want) || !strings.Contains(stderr, fmt.Sprintf("runs as uid %d", nobody)) || strings.Contains(stderr, "idmap helper") {
			t.Errorf("%v against a non-root daemon: %d %q, want 422 and %q", args, code, stderr, want)
		}
	}
	// An unsandboxed session still works: only sandboxes need root.
	if code, stdout, stderr := runCLI(t, env, "run", "--rm", "--agent", "mock", "hello"); code != 0 || !strings.Contains(stdout, "You said: hello") {
		t.Errorf("an unsandboxed run against a non-root daemon: %d %q %q", code, stdout, stderr)
	}

	// doctor, as that user: the process runtime is unavailable, by name.
	doc := exec.CommandContext(t.Context(), bin, "doctor", "--no-boot")
	doc.Env = []string{"HOME=" + data, "PATH=/usr/bin:/bin"}
	doc.SysProcAttr = asNobody
	var stdout, stderr bytes.Buffer
	doc.Stdout, doc.Stderr = &stdout, &stderr
	err = doc.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("doctor as a non-root user: %v, want exit 1\n%s%s", err, stdout.String(), stderr.String())
	}
	if !regexp.MustCompile(`(?m)^process +unavailable +`+regexp.QuoteMeta(want)).MatchString(stdout.String()) ||
		!regexp.MustCompile(`(?m)^root +missing`).MatchString(stdout.String()) || !strings.Contains(stderr.String(), want) {
		t.Errorf("doctor as a non-root user:\n%s\n%s", stdout.String(), stderr.String())
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

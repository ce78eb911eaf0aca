package install

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// npmProgressPrefix starts each line of npm's output copied to progress.
const npmProgressPrefix = "agentbox:   npm: "

// runNpm installs pkg into dir with the user's own npm configuration
// (registry, proxy, cache), never globally.
func (in *installer) runNpm(ctx context.Context, npm, dir, pkg string, progress io.Writer) error {
	cmd := exec.CommandContext(ctx, npm, "install",
		"--no-audit", "--no-fund", "--no-save", "--loglevel=error",
		"--global=false", // whatever the user's npmrc says
		"--prefix", dir, pkg)
	cmd.Dir = dir
	cmd.Env = npmEnv(in.environ)
	setProcessGroup(cmd) // cancelling kills npm and its install scripts
	cmd.WaitDelay = 5 * time.Second

	pw := &prefixWriter{w: progress, prefix: npmProgressPrefix}
	tail := &tailBuffer{max: 32 << 10}
	cmd.Stdout = pw
	cmd.Stderr = io.MultiWriter(pw, tail)
	err := cmd.Run()
	pw.flush()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("installing %s: %w", pkg, context.Cause(ctx))
	}
	return classifyNpmError(pkg, err, tail.String())
}

// npmEnv is the process environment without settings that would make the
// install global, and without npm's update check.
func npmEnv(environ []string) []string {
	out := make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToLower(k) {
		case "npm_config_global", "npm_config_location", "npm_config_update_notifier":
			continue
		}
		out = append(out, kv)
	}
	return append(out, "npm_config_update_notifier=false")
}

var (
	npmCodeRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?m)^npm (?:error|ERR!) code (\S+)`) })
	npmURLRe  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?:request to|GET) (https?://\S+)`) })
)

// networkCodes are npm/node error codes that mean the registry could not
// be reached (or its TLS not be trusted).
var networkCodes = map[string]bool{
	"ECONNREFUSED": true, "ENOTFOUND": true, "ETIMEDOUT": true, "EAI_AGAIN": true,
	"ECONNRESET": true, "ENETUNREACH": true, "EHOSTUNREACH": true, "ESOCKETTIMEDOUT": true,
	"ERR_SOCKET_TIMEOUT": true, "EPROTO": true, "UNABLE_TO_GET_ISSUER_CERT_LOCALLY": true,
	"SELF_SIGNED_CERT_IN_CHAIN": true, "CERT_HAS_EXPIRED": true, "ECONNABORTED": true,
}

// classifyNpmError turns a failed `npm install` into one of the package's
// errors, with npm's own error lines attached.
func classifyNpmError(pkg string, runErr error, stderr string) error {
	code := ""
	if m := npmCodeRe().FindStringSubmatch(stderr); m != nil {
		code = m[1]
	}
	detail := npmErrorLines(stderr)
	if detail == "" {
		detail = strings.TrimSpace(lastLines(stderr, 5))
	}
	if detail != "" {
		detail = "\n  " + strings.ReplaceAll(detail, "\n", "\n  ")
	}
	switch {
	case code == "ETARGET":
		return fmt.Errorf("%w: %s (list the published ones with: npm view %s versions)%s",
			ErrVersionNotFound, pkg, pkgName(pkg), detail)
	case code == "E404":
		return fmt.Errorf("%w: package %s does not exist there%s", ErrVersionNotFound, pkgName(pkg), detail)
	case networkCodes[code] || (code == "" && (strings.Contains(stderr, "FetchError") || strings.Contains(stderr, "network"))):
		where := "the registry in your npm config"
		if m := npmURLRe().FindStringSubmatch(stderr); m != nil {
			where = m[1]
		}
		return fmt.Errorf("%w: installing %s could not reach %s (check `npm config get registry` and the proxy settings)%s",
			ErrRegistry, pkg, where, detail)
	}
	return fmt.Errorf("%w: npm install %s: %w%s", ErrNpmFailed, pkg, runErr, detail)
}

// pkgName strips the @version from "@scope/name@version".
func pkgName(pkg string) string {
	if i := strings.LastIndex(pkg, "@"); i > 0 {
		return pkg[:i]
	}
	return pkg
}

// npmErrorLines returns npm's "npm error" lines, without the stack trace
// and the pointer to the debug log, at most 8.
func npmErrorLines(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimRight(l, "\r ")
		rest, ok := strings.CutPrefix(l, "npm error ")
		if !ok {
			rest, ok = strings.CutPrefix(l, "npm ERR! ")
		}
		if !ok || strings.HasPrefix(rest, "    at ") || strings.Contains(rest, "complete log of this run") {
			continue
		}
		out = append(out, "npm error "+rest)
		if len(out) == 8 {
			break
		}
	}
	return strings.Join(out, "\n")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// verify runs the freshly installed binary with s.VersionArgs in a nearly
// empty environment (PATH with node's directory, HOME a scratch directory
// that is removed afterwards, stdin closed) and returns what it printed.
func (in *installer) verify(ctx context.Context, s Spec, root, bin, npm string) (string, error) {
	home, err := os.MkdirTemp(root, ".home-"+dirName(s)+"-")
	if err != nil {
		return "", fmt.Errorf("agent cache: %w", err)
	}
	defer func() { _ = os.RemoveAll(home) }()

	nodeDir := filepath.Dir(npm)
	if node, err := lookPath("node", in.getenv("PATH")); err == nil {
		nodeDir = filepath.Dir(node)
	}
	var path []string
	seen := map[string]bool{}
	for _, d := range []string{nodeDir, "/usr/local/bin", "/usr/bin", "/bin"} {
		if !seen[d] {
			seen[d] = true
			path = append(path, d)
		}
	}
	env := append([]string{
		"PATH=" + strings.Join(path, string(filepath.ListSeparator)),
		"HOME=" + home,
		"LANG=C.UTF-8",
		"TERM=dumb",
		"NO_COLOR=1",
	}, s.Env...)

	vctx, cancel := context.WithTimeout(ctx, in.verifyTimeout)
	defer cancel()
	cmd := exec.CommandContext(vctx, bin, s.VersionArgs...)
	cmd.Dir = home
	cmd.Env = env
	setProcessGroup(cmd)
	cmd.WaitDelay = 2 * time.Second
	out := &tailBuffer{max: 64 << 10}
	cmd.Stdout = out
	cmd.Stderr = out
	runErr := cmd.Run()
	killGroup(cmd) // anything it left running
	text := strings.TrimSpace(out.String())
	shown := strings.Join(append([]string{bin}, s.VersionArgs...), " ")
	switch {
	case ctx.Err() != nil:
		return "", fmt.Errorf("verifying %s: %w", s.Name, context.Cause(ctx))
	case vctx.Err() != nil:
		return "", fmt.Errorf("%w: `%s` did not finish within %s", ErrNotRunnable, shown, in.verifyTimeout)
	case runErr != nil:
		return "", fmt.Errorf("%w: `%s`: %w\n  %s", ErrNotRunnable, shown, runErr, strings.ReplaceAll(lastLines(text, 10), "\n", "\n  "))
	case s.PrintsVersion && !strings.Contains(text, s.Version):
		return "", fmt.Errorf("%w: `%s` printed %q, which lacks the pinned version %s", ErrNotRunnable, shown, truncate(text, 200), s.Version)
	}
	return truncate(text, 512), nil
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// prefixWriter copies whole lines to w, each with prefix. Safe for the two
// goroutines os/exec copies stdout and stderr with.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		p.emit(p.buf[:i])
		p.buf = p.buf[i+1:]
	}
	if len(p.buf) > 64<<10 { // a very long line without a newline
		p.emit(p.buf)
		p.buf = p.buf[:0]
	}
	return len(b), nil
}

func (p *prefixWriter) emit(line []byte) {
	line = bytes.TrimRight(line, "\r")
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	// Errors writing progress must not fail the install.
	_, _ = fmt.Fprintf(p.w, "%s%s\n", p.prefix, line)
}

func (p *prefixWriter) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) > 0 {
		p.emit(p.buf)
		p.buf = nil
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

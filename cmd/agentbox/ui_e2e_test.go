package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
)

// TestInspectorInBrowser drives the inspector (GET /ui) of the real daemon
// in headless Chromium: log in with the daemon's token, create a mock
// session, see streamed text, see an agent's markup shown as inert text,
// approve a permission and see the file it wrote, follow the session
// across a broken connection (the stream resumes by seq: every turn shown
// once), see a sandboxed session's violation and network ask and approve
// the ask (when this host can sandbox), and keep a screenshot (t.ArtifactDir; `go test -artifacts` keeps
// it). It fails on any script error or Content-Security-Policy violation
// in the page.
func TestInspectorInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium: skipped with -short")
	}
	chrome := findChromium()
	if chrome == "" {
		t.Skip("no chromium on PATH (scripts/setup installs Debian's chromium)")
	}
	// The page reaches the daemon through a link the test can cut. The
	// page's Host is the link's address, which the daemon is told to
	// accept (as an operator would name a proxy's).
	link := newCuttableLink(t)
	// A server on the host that a sandboxed session's command asks to
	// reach: the built-in global policy, which denies the host's loopback,
	// with this one port permitted (every other destination still asked).
	var hostHits atomic.Int64
	hostLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hostSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hostHits.Add(1)
		_, _ = io.WriteString(w, "hello from the host\n")
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hostSrv.Serve(hostLn) }()
	t.Cleanup(func() { _ = hostSrv.Close() })
	hostPort := hostLn.Addr().(*net.TCPAddr).Port
	global := filepath.Join(t.TempDir(), "global.yaml")
	if err := os.WriteFile(global, fmt.Appendf(nil, `version: 1
isolation: process
resources: {memory: 8Gi, cpus: 4, pids: 4096, timeout: 24h, disk: 20Gi, files: 1000000, output: 64Mi}
filesystem: {read_outside_workspace: true}
network: {default: ask, mode: proxy, allow: ["*", "127.0.0.1:%d"], max_connections: 1024, max_connection_rate: 400}
env: {pass: [TERM, COLORTERM, LANG, LC_ALL, TZ]}
`, hostPort), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, t.TempDir(), "--allowed-hosts", link.addr, "--global-policy", global, "--network-ask-timeout", "3m")
	link.target = strings.TrimPrefix(d.url, "http://")
	ui := "http://" + link.addr + "/ui"

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
		chromedp.DisableGPU,
	)
	if os.Geteuid() == 0 {
		// Chromium refuses to start as root with its sandbox on (its
		// setuid/user-namespace sandbox is built to drop from an
		// unprivileged user, and root could leave it). The test runs
		// as root in CI containers; the page it loads is this daemon's
		// own, from a loopback address, so running the renderer
		// unsandboxed exposes nothing it would not have anyway.
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(actx)
	defer cancelCtx()
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()

	var mu sync.Mutex
	var pageErrors []string
	if err := chromedp.Listen(ctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			mu.Lock()
			x := e.ExceptionDetails
			msg := x.Text
			if x.Exception != nil {
				msg += " " + x.Exception.Description
			}
			pageErrors = append(pageErrors, fmt.Sprintf("exception at %s:%d: %s", x.URL, x.LineNumber+1, msg))
			mu.Unlock()
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				var args []string
				for _, a := range e.Args {
					args = append(args, fmt.Sprint(a.Value)+a.Description)
				}
				mu.Lock()
				pageErrors = append(pageErrors, "console.error: "+strings.Join(args, " "))
				mu.Unlock()
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	screenshot := func(name string) {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
		if err != nil {
			t.Logf("screenshot %s: %v", name, err)
			return
		}
		p := filepath.Join(t.ArtifactDir(), name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Errorf("screenshot: %v", err)
			return
		}
		t.Logf("screenshot: %s", p)
	}
	defer func() {
		if t.Failed() {
			screenshot("inspector-failed.png")
		}
	}()
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// wait polls a JavaScript expression until it is true.
	wait := func(what, expr string) {
		t.Helper()
		ok, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(90*time.Second), chromedp.WithPollingInterval(50*time.Millisecond)))
		if err != nil || !ok {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('main').innerText`))
			t.Fatalf("waiting for %s (%s): %v\npage text:\n%s", what, expr, err, text)
		}
	}
	timelineHas := func(s string) string {
		b, _ := json.Marshal(s)
		return fmt.Sprintf(`(document.getElementById('timeline')?.textContent || '').includes(%s)`, b)
	}
	send := func(text string) {
		t.Helper()
		run("send "+text, chromedp.SetValue(chromedp.CSS("#message"), text), chromedp.Click(chromedp.CSS("#send")))
	}

	// The login page: the token is asked for, not taken from the URL.
	run("open /ui", chromedp.Navigate(ui), chromedp.WaitVisible(chromedp.CSS("#token")))
	// Record every CSP violation from here on (Evaluate is not subject to
	// the page's policy).
	evalJS[bool](ctx, t, `window.__csp = []; document.addEventListener('securitypolicyviolation', e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI)); true`)
	run("log in",
		chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token"),
		chromedp.Click(chromedp.CSS("#login button[type=submit]")))
	wait("a wrong token refused", `document.getElementById('login-error').textContent.includes('refused')`)
	run("log in",
		chromedp.SendKeys(chromedp.CSS("#token"), d.token),
		chromedp.Click(chromedp.CSS("#login button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS("#new-session")))
	href := evalJS[string](ctx, t, `location.href`)
	if strings.Contains(href, d.token) {
		t.Fatalf("the token is in the page's URL: %s", href)
	}

	// A new mock session, from the page.
	wait("the agents list", `[...document.querySelectorAll('#new-agent option')].some(o => o.value === 'mock' && !o.disabled)`)
	run("create a session", chromedp.SetValue(chromedp.CSS("#new-agent"), "mock"), chromedp.Click(chromedp.CSS("#create")))
	wait("the session view", `location.hash.startsWith('#/s/ses_') && !!document.getElementById('timeline')`)
	id := evalJS[string](ctx, t, `location.hash.slice(4)`)
	wait("session.started", timelineHas("Session started"))
	wait("the stream live", `document.getElementById('conn').textContent === 'live'`)

	// Streamed text.
	send("/scenario text")
	wait("the streamed reply", timelineHas("Hello! I am the mock agent. I answer from a script"))
	wait("the turn's end and usage", `document.getElementById('usage').textContent.includes('out tokens')`)

	// What the agent produces is text: markup in a message, in a
	// command's output and in a file name stays inert.
	const payload = `<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>`
	xss := mockScript(
		map[string]any{"kind": "text", "text": "look: " + payload},
		map[string]any{"kind": "command", "command": `printf '%s\n' '<img src=y onerror=window.__pwned=3>'`},
		map[string]any{"kind": "write", "path": `<img src=z onerror=window.__pwned=4>.txt`, "content": payload + "\n"},
	)
	send(xss)
	wait("the markup as text", timelineHas(`look: `+payload))
	wait("the command's output as text", timelineHas(`<img src=y onerror=window.__pwned=3>`))
	wait("the file name as text", `[...document.querySelectorAll('.change')].some(c => c.dataset.path === '<img src=z onerror=window.__pwned=4>.txt')`)
	type inertness struct {
		Pwned   any `json:"pwned"`
		Tags    int `json:"tags"`
		Scripts int `json:"scripts"`
	}
	inert := evalJS[inertness](ctx, t, `({pwned: window.__pwned ?? null, tags: document.querySelectorAll('#main img, #main script, #main iframe').length, scripts: document.scripts.length})`)
	if inert.Pwned != nil || inert.Tags != 0 || inert.Scripts != 1 {
		t.Fatalf("the agent's markup became live: %+v", inert)
	}

	// A permission: approve it in the page; the write happens. Sent once
	// the last turn has ended: a message during a turn is refused (409).
	wait("the second turn's end", `(document.getElementById('main').innerText.match(/Turn ended/g) || []).length >= 2`)
	send("/scenario permission-write ui-proof.txt")
	wait("the permission request", `!!document.querySelector('.ev.permission:not(.resolved) button.allow')`)
	run("allow", chromedp.Click(chromedp.CSS(`.ev.permission:not(.resolved) button.allow`)))
	wait("the permission resolved", `[...document.querySelectorAll('.ev.permission.resolved')].some(c => c.textContent.includes('Allowed by user'))`)
	wait("the file change", `[...document.querySelectorAll('.change')].some(c => c.dataset.path === 'ui-proof.txt')`)

	// A question, answered with one of its options.
	wait("the third turn's end", `(document.getElementById('main').innerText.match(/Turn ended/g) || []).length >= 3`)
	send("/scenario question")
	wait("the question", `!!document.querySelector('.ev.question:not(.resolved) button[data-option="green"]')`)
	run("answer", chromedp.Click(chromedp.CSS(`.ev.question:not(.resolved) button[data-option="green"]`)))
	wait("the answer recorded", `[...document.querySelectorAll('.ev.question.resolved')].some(c => c.textContent.includes('Answered by user: Green'))`)

	// The file, through the files API when the daemon has it.
	run("files tab", chromedp.Click(chromedp.CSS("#tabbtn-files")))
	wait("the files listing or its absence", `!!document.querySelector('#file-list li[data-path="ui-proof.txt"]') || document.getElementById('files-msg').textContent.includes('not available')`)
	filesAPI := evalJS[bool](ctx, t, `!!document.querySelector('#file-list li[data-path="ui-proof.txt"]')`)
	if filesAPI {
		run("open the file", chromedp.Click(chromedp.CSS(`#file-list li[data-path="ui-proof.txt"] button`)))
		wait("the file's content", `(document.getElementById('file-content')?.textContent || '').includes('Hello from the mock agent.')`)
		// The file named with markup is listed as text too.
		wait("the markup file name listed", `!!document.querySelector('#file-list li[data-path="<img src=z onerror=window.__pwned=4>.txt"]')`)
	} else {
		t.Log("the daemon has no files API: the write is checked through its event and on disk")
		s, err := d.c.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(s.Cwd, "ui-proof.txt"))
		if err != nil || !strings.Contains(string(b), "Hello from the mock agent.") {
			t.Fatalf("the file the agent wrote: %q, %v", b, err)
		}
	}
	run("diff tab", chromedp.Click(chromedp.CSS("#tabbtn-diff")))
	wait("the diff or its absence", `!!document.querySelector('#diff-files li[data-path="ui-proof.txt"]') || document.getElementById('diff-msg').textContent.includes('not available')`)
	if evalJS[bool](ctx, t, `!!document.querySelector('#diff-files li[data-path="ui-proof.txt"]')`) {
		wait("the session's diff", `document.getElementById('diff-body').textContent.includes('+Hello from the mock agent.')`)
		wait("the markup file in the diff, as text", `!!document.querySelector('#diff-files li[data-path="<img src=z onerror=window.__pwned=4>.txt"]')`)
	} else {
		t.Log("the daemon has no diff API: the page says so")
	}
	// The exec console: its terminal renderer on hostile and ordinary
	// input, then bash on a pseudo-terminal in a sandbox.
	for _, tc := range []struct{ in, want string }{
		{"ab\bc\r\nx", "ac\nx\n"},
		{"gone\x1b[2J\x1b[Hz", "z\n\n"},
		{"\x1b]0;<img src=x onerror=window.__pwned=5>\x07\x1b[31mred\x1b[0m \x1b[?25lok", "red ok\n\n"},
		{"1\r\n2\r\n3\r\n4", "2\n3\n4"},
		{"hello\x1b[3D\x1b[K!\x1b[2;3Hx", "he!\n  x\n"},
		{"\x1b[999999;999999Hend\x1b[A\x1b", "\n         e\nnd"},
		{"0123456789abc", "0123456789\nabc\n"},
	} {
		in, _ := json.Marshal(tc.in)
		got := evalJS[string](ctx, t, fmt.Sprintf(`(() => { const t = new Term(3, 10); t.write(%s); return t.text(); })()`, in))
		if got != tc.want {
			t.Errorf("Term renders %q as %q, want %q", tc.in, got, tc.want)
		}
	}
	run("console tab", chromedp.Click(chromedp.CSS("#tabbtn-console")), chromedp.Click(chromedp.CSS("#console-start")))
	wait("the console's process", `document.getElementById('console-msg').textContent.includes('prc_')`)
	run("type a command", chromedp.SendKeys(chromedp.CSS("#console-screen"), "echo hi\r"))
	wait("the command's output on the screen", `document.getElementById('console-screen').textContent.split('\n').some(l => l.trim() === 'hi')`)
	run("pick a terminal size", chromedp.SetValue(chromedp.CSS("#console-size"), "40x120"))
	evalJS[bool](ctx, t, `document.getElementById('console-size').dispatchEvent(new Event('change'))`)
	wait("the resize", `document.getElementById('console-screen').dataset.size === '40x120'`)
	run("ask the size", chromedp.SendKeys(chromedp.CSS("#console-screen"), "stty size\r"))
	wait("the new size in the terminal", `document.getElementById('console-screen').textContent.split('\n').some(l => l.trim() === '40 120')`)
	screenshot("inspector-console.png")
	run("kill the console", chromedp.Click(chromedp.CSS("#console-stop")))
	run("back to the conversation", chromedp.Click(chromedp.CSS("#tabbtn-conversation")))

	// The connection breaks (a proxy's restart, a laptop's sleep) while
	// the agent works: the page reconnects with the last seq it showed
	// and shows what happened meanwhile, nothing missed and nothing twice.
	link.cut()
	wait("the page noticing", `document.getElementById('conn').textContent === 'reconnecting'`)
	if _, err := d.c.Send(ctx, id, "/scenario text while the page was away"); err != nil {
		t.Fatal(err)
	}
	waitTurns(t, d.c, id, 5)
	link.restore()
	wait("the reconnected stream", `document.getElementById('conn').textContent === 'live'`)
	wait("what happened meanwhile", timelineHas("while the page was away"))
	page, err := d.c.Events(ctx, id, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var turns, last int64
	for _, e := range page.Events {
		if e.Type == event.TypeTurnCompleted {
			turns++
		}
		last = e.Seq
	}
	wait("every event shown", fmt.Sprintf(`document.getElementById('timeline').dataset.lastSeq === '%d'`, last))
	shown := evalJS[int64](ctx, t, `document.querySelectorAll('#timeline .ev.turn[data-stop]').length`)
	if shown != turns {
		t.Fatalf("the page shows %d ended turns, the log has %d", shown, turns)
	}

	csp := evalJS[[]string](ctx, t, `window.__csp`)
	if len(csp) != 0 {
		t.Errorf("Content-Security-Policy violations: %q", csp)
	}

	// A sandboxed session, when this host can make one: a protected file
	// the agent writes is dropped at the turn's end, and the page shows
	// the violation.
	sb, err := d.c.CreateSession(ctx, client.CreateSession{Agent: "mock", Policy: json.RawMessage(`"agent-default"`)})
	if err != nil {
		t.Logf("no sandboxed session on this host (%v): the violation view is not checked", err)
	} else {
		evalJS[bool](ctx, t, `location.hash = '#/s/`+sb.ID+`'; true`)
		wait("the sandboxed session", timelineHas("Session started"))
		send(mockScript(map[string]any{"kind": "command", "command": "echo '<b>evil</b>' > CLAUDE.md; echo ok > fine.txt"}))
		wait("the violation", `[...document.querySelectorAll('.ev.violation')].some(v => v.textContent.includes('CLAUDE.md'))`)
		screenshot("inspector-violation.png")

		// A network ask: the agent's command reaches for a destination
		// no rule of the session settles (the session asks; its rules
		// permit the host's port only by address, as the host's loopback
		// is never reached by a name alone); the page shows the ask, with
		// the destination and the process, and the user's approval from
		// the page lets that one connection through.
		ns, err := d.c.CreateSession(ctx, client.CreateSession{Agent: "mock", Policy: json.RawMessage(fmt.Sprintf(
			`{"version":1,"filesystem":{"read_outside_workspace":true},"network":{"default":"ask","allow":["127.0.0.1:%d"]}}`, hostPort))})
		if err != nil {
			t.Fatal(err)
		}
		evalJS[bool](ctx, t, `location.hash = '#/s/`+ns.ID+`'; true`)
		wait("the asking session", `document.querySelector('#main h2')?.textContent === '`+ns.ID+`' && `+timelineHas("Session started"))
		wait("its stream live", `document.getElementById('conn').textContent === 'live'`)
		send(mockScript(map[string]any{"kind": "command", "command": fmt.Sprintf(
			`curl -s --max-time 120 --noproxy '' -x "$HTTP_PROXY" -w 'status %%{http_code}\n' http://localhost:%d/`, hostPort)}))
		const ask = `.ev.permission[data-kind="network"]:not(.resolved)`
		wait("the network ask", `!!document.querySelector('`+ask+` button.allow')`)
		wait("the ask's destination and process", fmt.Sprintf(`(t => t.includes('Network access: localhost:%d') && t.includes('curl'))(document.querySelector('%s').textContent)`, hostPort, ask))
		if n := hostHits.Load(); n != 0 {
			t.Fatalf("the host server was reached %d times before the approval", n)
		}
		screenshot("inspector-network-ask.png")
		run("allow the connection", chromedp.Click(chromedp.CSS(ask+` button.allow`)))
		wait("the ask resolved", `[...document.querySelectorAll('.ev.permission.resolved[data-kind="network"]')].some(c => c.textContent.includes('Allowed by user'))`)
		wait("the connection made", timelineHas("hello from the host")+` && `+timelineHas("status 200"))
		if n := hostHits.Load(); n != 1 {
			t.Fatalf("the host server saw %d requests after one approval, want 1", n)
		}
	}

	// The session list shows it, with its agent and status.
	evalJS[bool](ctx, t, `location.hash = '#/'; true`)
	wait("the session listed", fmt.Sprintf(`!!document.querySelector('#sessions tr[data-session=%q]')`, id))
	wait("its agent and status", fmt.Sprintf(`(t => t.includes('mock') && t.includes('idle'))(document.querySelector('#sessions tr[data-session=%q]').textContent)`, id))
	// A reload keeps the token (this tab's sessionStorage) and replays
	// the whole log.
	evalJS[bool](ctx, t, `location.hash = '#/s/`+id+`'; true`)
	run("reload", chromedp.Reload())
	wait("the replayed log", timelineHas("while the page was away")+fmt.Sprintf(` && document.getElementById('timeline').dataset.lastSeq === '%d'`, last))
	screenshot("inspector.png")

	mu.Lock()
	defer mu.Unlock()
	for _, e := range pageErrors {
		t.Errorf("page: %s", e)
	}
}

// waitTurns waits until the session's log has n turn.completed events.
func waitTurns(t *testing.T, c *client.Client, id string, n int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		got := 0
		err := c.EventsAll(t.Context(), id, 0, func(e event.Event) error {
			if e.Type == event.TypeTurnCompleted {
				got++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d turns completed, want %d", got, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cuttableLink forwards TCP connections from its own loopback address to
// target, until cut: then it closes every connection and refuses new
// ones until restored.
type cuttableLink struct {
	addr   string
	target string // set before the first connection
	ln     net.Listener
	mu     sync.Mutex
	cutOff bool
	conns  map[net.Conn]struct{}
}

func newCuttableLink(t *testing.T) *cuttableLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &cuttableLink{addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		l.cut()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { l.forward(c) })
		}
	})
	return l
}

func (l *cuttableLink) forward(c net.Conn) {
	l.mu.Lock()
	if l.cutOff {
		l.mu.Unlock()
		_ = c.Close()
		return
	}
	up, err := net.Dial("tcp", l.target)
	if err != nil {
		l.mu.Unlock()
		_ = c.Close()
		return
	}
	l.conns[c], l.conns[up] = struct{}{}, struct{}{}
	l.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	_ = c.Close()
	_ = up.Close()
	<-done
	l.mu.Lock()
	delete(l.conns, c)
	delete(l.conns, up)
	l.mu.Unlock()
}

func (l *cuttableLink) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cutOff = true
	for c := range l.conns {
		_ = c.Close()
	}
}

func (l *cuttableLink) restore() {
	l.mu.Lock()
	l.cutOff = false
	l.mu.Unlock()
}

// evalJS evaluates a JavaScript expression in the page (not subject to the
// page's Content-Security-Policy) and returns its value.
func evalJS[T any](ctx context.Context, t *testing.T, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// findChromium returns the path of a Chromium (or Chrome) binary, or "".
func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

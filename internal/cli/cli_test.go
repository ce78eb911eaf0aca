package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/amp"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/reexec"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
	"github.com/agentbox/agentbox/internal/stacktest"
	"github.com/agentbox/agentbox/internal/store/sqlite"
)

func TestMain(m *testing.M) {
	// The sandboxed sessions' daemon and doctor's probes re-execute this
	// binary as the sandbox's helpers.
	reexec.Init()
	code := m.Run()
	stopSandboxDaemon()
	if code == 0 {
		// The sandboxed sessions' daemon leaves one goroutine on purpose:
		// it waits for the deathwatch process, which outlives the daemon
		// by design (internal/daemon/deathwatch_linux.go) and exits a
		// moment after the daemon's clean shutdown.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/agentbox/agentbox/internal/daemon.startDeathwatch.func1")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on a successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// harness runs commands against the real stack (internal/stacktest) with
// the mock agent.
type harness struct {
	t *testing.T
	// url is the daemon's; stk is its stack unless the daemon is a whole
	// one (sandboxedHarness).
	url string
	stk *stacktest.Stack
	// secrets are the daemon's secrets (the egress proxy's store).
	secrets *egress.Secrets
	env     map[string]string
	// signals receives the channel run registers for Ctrl-C.
	signals chan chan<- os.Signal
	// terminal makes the CLI take every stream for a terminal.
	terminal bool
}

// newHarness serves the stack of opts, with the mock agent alone unless
// opts.Agents says otherwise.
func newHarness(t *testing.T, opts stacktest.Options) *harness {
	t.Helper()
	if opts.Agents == nil {
		opts.Agents = agent.NewRegistry()
		opts.Agents.Register(mock.Name, mock.New())
	}
	// The CLI cannot see a power failure: writes need not wait for the disk.
	opts.Store.Sync = sqlite.SyncNormal
	secrets := egress.NewSecrets()
	if opts.API.Secrets == nil {
		opts.API.Secrets = secrets
	}
	stk := stacktest.New(t, opts)
	return &harness{t: t, url: stk.URL, stk: stk, secrets: secrets, env: map[string]string{EnvURL: stk.URL}, signals: make(chan chan<- os.Signal, 1)}
}

// withToken is the stack's options for an API that requires token.
func withToken(token string) stacktest.Options {
	return stacktest.Options{API: httpapi.Config{Token: token}}
}

// mockScript is the text that makes the mock agent run steps.
func mockScript(t *testing.T, steps ...mock.Step) string {
	t.Helper()
	b, err := json.Marshal(steps)
	if err != nil {
		t.Fatal(err)
	}
	return "/mock " + string(b)
}

var sessionIDRE = regexp.MustCompile(`ses_[0-9A-Za-z]+`)

// sessionOf returns the session id run printed first on stdout or stderr.
func sessionOf(t *testing.T, r result) string {
	t.Helper()
	id := sessionIDRE.FindString(r.stdout + r.stderr)
	if id == "" {
		t.Fatalf("no session id in the output:\n%s\n%s", r.stdout, r.stderr)
	}
	return id
}

type result struct {
	stdout, stderr string
	code           int
}

// run executes the CLI with args; stdin is a string reader (answers
// prompts) unless in is given.
func (h *harness) run(ctx context.Context, in io.Reader, args ...string) result {
	h.t.Helper()
	e := env{
		getenv:     func(k string) string { return h.env[k] },
		isTerminal: func(any) bool { return h.terminal },
		notify: func(c chan<- os.Signal) func() {
			select {
			case h.signals <- c:
			default:
			}
			return func() {}
		},
	}
	root := newRoot("1.2.3-test", e)
	var stdout, stderr bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	if in == nil {
		in = strings.NewReader("")
	}
	root.SetIn(in)
	code := Execute(ctx, root)
	return result{stdout.String(), stderr.String(), code}
}

func (h *harness) client() *client.Client {
	c, err := client.New(h.url, client.WithToken(h.env[EnvToken]))
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

func (r result) check(t *testing.T, code int, stdout, stderr []string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit code %d, want %d", r.code, code)
	}
	for _, s := range stdout {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("stdout lacks %q", s)
		}
	}
	for _, s := range stderr {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr lacks %q", s)
		}
	}
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, stacktest.Options{})
	r := h.run(t.Context(), nil, "run", "--agent", "mock", "hello", "world")
	id := sessionOf(t, r)
	r.check(t, 0,
		[]string{"● session " + id + " started · mock", "> hello world\n", "You said: hello world\n", "✓ end_turn", "2 in / 4 out tokens"},
		[]string{"session " + id + " (continue with --session " + id + ")"})

	// Continuing shows only the new turn.
	r = h.run(t.Context(), nil, "run", "--session", id, "again")
	r.check(t, 0, []string{"You said: again"}, nil)
	if strings.Contains(r.stdout, "hello world") || strings.Contains(r.stdout, "session "+id+" started") {
		t.Errorf("the second run shows the first turn:\n%s", r.stdout)
	}
}

func TestRunJSON(t *testing.T) {
	t.Parallel()
	h := newHarness(t, stacktest.Options{})
	r := h.run(t.Context(), nil, "--json", "run", "--agent", "mock", "--model", "m", "--permission-mode", "plan", "hi")
	r.check(t, 0, nil, nil)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	var last event.Event
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &last); err != nil || last.Seq != int64(i+1) {
			t.Fatalf("line %d %q: %v", i, l, err)
		}
	}
	if last.Type != event.TypeTurnCompleted || r.stderr != "" {
		t.Fatalf("last event %s, stderr %q", last.Type, r.stderr)
	}
	s, err := h.client().GetSession(t.Context(), last.SessionID)
	if err != nil || s.Model != "m" || s.PermissionMode != "plan" {
		t.Fatalf("session %+v, %v", s, err)
	}
}

// permissionScript makes the mock agent ask to run a command (ls -la in
// its empty working directory), then run it if allowed.
func permissionScript(t *testing.T) string {
	return mockScript(t, mock.Step{Kind: mock.KindPermission, Text: "Run ls -la"}, mock.Step{Kind: mock.KindCommand, Command: "ls -la"})
}

func TestRunPermissionPrompt(t *testing.T) {
	t.Parallel()
	// What the agent shows of the answer: the command's output, or its
	// words for a refusal.
	const (
		allowed = "\n    drwx"
		denied  = "I did not run ls -la: permission denied"
	)
	tests := []struct {
		name, stdin string
		in          func(t *testing.T) io.Reader
		args        []string
		want        string
		stdout      []string
		stderr      []string
	}{
		{name: "yes", stdin: "y\n", want: allowed, stdout: []string{"✓ allowed by user", "$ ls -la", "    total "}, stderr: []string{"Allow Run ls -la? [y/N] "}},
		{name: "YES", stdin: "YES\n", want: allowed},
		{name: "no", stdin: "n\n", want: denied, stdout: []string{"✗ denied by user"}, stderr: []string{"Allow Run ls -la? [y/N] "}},
		{name: "empty line", stdin: "\n", want: denied},
		// Answers nobody was asked for are the CLI's rule: by policy.
		{name: "end of input", stdin: "", want: denied, stdout: []string{"✗ denied by policy"}, stderr: []string{"no more input"}},
		{name: "not a terminal", in: devNull, want: denied, stdout: []string{"✗ denied by policy"}, stderr: []string{`permission "Run ls -la" denied: stdin is not a terminal; pass --yes to allow`}},
		{name: "not a terminal with --yes", in: devNull, args: []string{"--yes"}, want: allowed, stdout: []string{"✓ allowed by policy"}, stderr: []string{`permission "Run ls -la" allowed (--yes)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, stacktest.Options{})
			var in io.Reader = strings.NewReader(tt.stdin)
			if tt.in != nil {
				in = tt.in(t)
			}
			args := append([]string{"run", "--agent", "mock"}, tt.args...)
			r := h.run(t.Context(), in, append(args, permissionScript(t))...)
			r.check(t, 0, append(tt.stdout, "? permission [command] Run ls -la", "✓ end_turn", tt.want), tt.stderr)
			// The log says the same as the screen: a person's answer is
			// by user, the CLI's own by policy, never the other way.
			wantBy := event.ByUser
			if tt.in != nil || tt.stdin == "" {
				wantBy = event.ByPolicy
			}
			n := 0
			if err := h.client().EventsAll(t.Context(), sessionOf(t, r), 0, func(ev event.Event) error {
				if p, err := ev.Decode(); err == nil {
					if res, ok := p.(*event.PermissionResolved); ok {
						n++
						if res.By != wantBy {
							t.Errorf("permission resolved by %q, want %q", res.By, wantBy)
						}
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Errorf("%d permission.resolved events", n)
			}
		})
	}
}

func devNull(t *testing.T) io.Reader {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func TestRunQuestion(t *testing.T) {
	t.Parallel()
	// The mock agent says each answer it got.
	prompt := mockScript(t,
		mock.Step{Kind: mock.KindQuestion, Text: "Which branch?", Options: []event.QuestionOption{{ID: "main", Label: "main"}, {ID: "dev", Label: "dev"}}},
		mock.Step{Kind: mock.KindQuestion, Text: "Commit message?", FreeText: true},
		mock.Step{Kind: mock.KindQuestion, Text: "Push?", Options: []event.QuestionOption{{ID: "y", Label: "yes"}}})
	h := newHarness(t, stacktest.Options{})
	// "9" is out of range and asked again; "fix it" is free text; "" declines.
	r := h.run(t.Context(), strings.NewReader("9\n2\nfix it\n\n"), "run", "--agent", "mock", prompt)
	r.check(t, 0,
		[]string{"? question: Which branch?", "answered: dev (by user)", "answered: fix it", "cancelled (by user)",
			"You answered: dev", "You answered: fix it", "You did not answer", "✓ end_turn"},
		[]string{"Which branch?\n  1) main\n  2) dev\nPick 1-2 (empty to decline): Please pick 1-2: ", "Commit message?\nAnswer (empty to decline): "})
}

// TestRunQuestionNoTerminal: a question the CLI declines on its own (no
// terminal to ask) is recorded as by policy.
func TestRunQuestionNoTerminal(t *testing.T) {
	t.Parallel()
	prompt := mockScript(t, mock.Step{Kind: mock.KindQuestion, Text: "Shall I finish?", Options: []event.QuestionOption{{ID: "y", Label: "yes"}}})
	h := newHarness(t, stacktest.Options{})
	r := h.run(t.Context(), devNull(t), "run", "--agent", "mock", prompt)
	r.check(t, 0, []string{"cancelled (by policy)", "You did not answer"}, []string{`question "Shall I finish?" declined: stdin is not a terminal`})
	if strings.Contains(r.stdout, "by user") {
		t.Errorf("an automatic answer shown as the user's:\n%s", r.stdout)
	}
}

func TestRunFailedTurn(t *testing.T) {
	t.Parallel()
	fail := mockScript(t, mock.Step{Kind: mock.KindError, Code: "boom", Text: "the model API failed"})
	h := newHarness(t, stacktest.Options{})
	r := h.run(t.Context(), nil, "run", "--agent", "mock", fail)
	r.check(t, 1, []string{"✗ error [boom]: the model API failed", "✗ error: the model API failed"}, []string{"agentbox: turn turn_", "failed: the model API failed"})

	// --rm removes the session however the turn ended; the exit code stays.
	r = h.run(t.Context(), nil, "run", "--rm", "--agent", "mock", fail)
	r.check(t, 1, nil, []string{"failed: the model API failed"})
	if _, err := h.client().GetSession(t.Context(), sessionOf(t, r)); !client.IsNotFound(err) {
		t.Fatalf("session after a failed run --rm: %v", err)
	}
}

// blocking makes the mock agent say "working", then wait for the turn to
// be interrupted.
func blocking(t *testing.T) string {
	return mockScript(t, mock.Step{Kind: mock.KindText, Text: "working"}, mock.Step{Kind: mock.KindSleep, Duration: mock.Duration(time.Hour)})
}

// stubbornHarness serves the mock agent behind an agent that ignores
// interrupts: its turn ends when release is closed (or the session closes).
func stubbornHarness(t *testing.T, release <-chan struct{}) *harness {
	reg := agent.NewRegistry()
	reg.Register(mock.Name, stubbornAgent{Adapter: mock.New(), release: release})
	return newHarness(t, stacktest.Options{Agents: reg})
}

type stubbornAgent struct {
	agent.Adapter
	release <-chan struct{}
}

func (a stubbornAgent) Start(ctx context.Context, cfg agent.Config, h agent.Host) (agent.Session, error) {
	s, err := a.Adapter.Start(ctx, cfg, h)
	if err != nil {
		return nil, err
	}
	return &stubbornSession{Session: s, release: a.release}, nil
}

type stubbornSession struct {
	agent.Session
	release <-chan struct{}
}

// Prompt runs the turn under a context the engine's interrupt does not
// reach; release ends it.
func (s *stubbornSession) Prompt(ctx context.Context, in agent.Input) (agent.Result, error) {
	tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	go func() {
		select {
		case <-s.release:
			cancel()
		case <-tctx.Done():
		}
	}()
	return s.Session.Prompt(tctx, in)
}

// waitFor polls until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hasEvent says whether session id's log holds an event of type typ.
func (h *harness) hasEvent(id string, typ event.Type) bool {
	evs, err := h.stk.Store.Events(context.Background(), id, 0, 1<<20)
	if err != nil {
		return false
	}
	for _, ev := range evs {
		if ev.Type == typ {
			return true
		}
	}
	return false
}

// anyEvent says whether any session's log holds an event of type typ.
func (h *harness) anyEvent(typ event.Type) bool {
	list, err := h.client().ListSessions(context.Background(), client.ListOptions{})
	if err != nil {
		return false
	}
	for _, s := range list.Sessions {
		if h.hasEvent(s.ID, typ) {
			return true
		}
	}
	return false
}

func TestRunCtrlC(t *testing.T) {
	t.Parallel()
	t.Run("once interrupts the turn", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, stacktest.Options{})
		go func() {
			c := <-h.signals
			waitFor(t, "the turn", func() bool { return h.anyEvent(event.TypeItemDelta) })
			c <- os.Interrupt
		}()
		r := h.run(t.Context(), nil, "run", "--agent", "mock", blocking(t))
		r.check(t, ExitInterrupted, []string{"working", "■ interrupted"}, []string{"interrupting the turn (Ctrl-C again to quit)", "was interrupted"})
	})
	t.Run("twice quits", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		defer close(release)
		h := stubbornHarness(t, release)
		go func() {
			c := <-h.signals
			waitFor(t, "the turn", func() bool { return h.anyEvent(event.TypeItemDelta) })
			c <- os.Interrupt
			time.Sleep(20 * time.Millisecond)
			c <- os.Interrupt
		}()
		r := h.run(t.Context(), nil, "run", "--agent", "mock", blocking(t))
		r.check(t, ExitInterrupted, []string{"working"}, []string{"interrupting the turn", "agentbox: interrupted"})
		if strings.Contains(r.stdout, "■ interrupted") {
			t.Error("the turn completed although the agent ignores interrupts")
		}
	})
	t.Run("a context cancelled by SIGINT counts as Ctrl-C", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, stacktest.Options{})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go func() {
			c := <-h.signals
			waitFor(t, "the turn", func() bool { return h.anyEvent(event.TypeItemDelta) })
			cancel() // what signal.NotifyContext in main does
			c <- os.Interrupt
		}()
		r := h.run(ctx, nil, "run", "--agent", "mock", blocking(t))
		r.check(t, ExitInterrupted, []string{"■ interrupted"}, nil)
	})
	t.Run("a cancelled context without a signal stops", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		defer close(release)
		h := stubbornHarness(t, release)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go func() {
			<-h.signals
			waitFor(t, "the turn", func() bool { return h.anyEvent(event.TypeItemDelta) })
			cancel() // SIGTERM, say
		}()
		r := h.run(ctx, nil, "run", "--agent", "mock", blocking(t))
		r.check(t, 1, nil, []string{"context canceled"})
	})
}

func TestRunUsageErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, stacktest.Options{})
	for _, tt := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"run", "hi"}, ExitUsage, "--agent is required"},
		{[]string{"run", "--agent", "mock"}, 1, "requires at least 1 arg"},
		{[]string{"run", "--agent", "mock", "  "}, 1, "the prompt is empty"},
		{[]string{"run", "--agent", "mock", "--permission-mode", "yolo", "hi"}, ExitUsage, `--permission-mode "yolo"`},
		{[]string{"run", "--session", "ses_1", "--agent", "mock", "hi"}, ExitUsage, "cannot be combined with --session"},
		{[]string{"run", "--bogus"}, ExitUsage, "unknown flag: --bogus (see agentbox run --help)"},
		{[]string{"run", "--agent", "nope", "hi"}, 1, "create session: POST /v1/sessions: 422"},
		{[]string{"run", "--session", "ses_404", "hi"}, 1, "404 Not Found"},
		{[]string{"sessions", "list", "--status", "weird"}, ExitUsage, `--status "weird"`},
		{[]string{"sessions", "events", "x", "--after", "-1"}, ExitUsage, "must not be negative"},
	} {
		r := h.run(t.Context(), nil, tt.args...)
		if r.code != tt.code || !strings.Contains(r.stderr, tt.stderr) {
			t.Errorf("%v: code %d, stderr %q; want %d and %q", tt.args, r.code, r.stderr, tt.code, tt.stderr)
		}
	}
}

func TestSessionsCommands(t *testing.T) {
	t.Parallel()
	h := newHarness(t, stacktest.Options{})
	ctx := t.Context()
	c := h.client()
	var ids []string
	for range 3 {
		s, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock", Model: "m1", Metadata: map[string]string{"team": "a"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	turn, _ := c.Send(ctx, ids[0], "first")
	if _, err := c.WaitTurn(ctx, ids[0], turn.TurnID, 0, nil); err != nil {
		t.Fatal(err)
	}

	r := h.run(ctx, nil, "sessions", "list", "--limit", "2")
	r.check(t, 0, []string{"ID", "AGENT", "STATUS", ids[2], ids[1], "m1", "idle"}, []string{"more: agentbox sessions list --before " + ids[1]})
	if strings.Contains(r.stdout, ids[0]) {
		t.Errorf("--limit 2 listed the third session")
	}
	r = h.run(ctx, nil, "--json", "sessions", "list", "--before", ids[1])
	var list client.SessionList
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Sessions) != 1 || list.Sessions[0].ID != ids[0] {
		t.Fatalf("json list %q: %v", r.stdout, err)
	}

	r = h.run(ctx, nil, "sessions", "show", ids[0])
	r.check(t, 0, []string{"ID:", ids[0], "Agent:", "mock", "Status:", "idle", "Metadata.team:", "Cwd:", "Sandboxed:", "no (the agent runs on the host)"}, nil)
	r = h.run(ctx, nil, "--json", "sessions", "show", ids[0])
	var s client.Session
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || s.ID != ids[0] {
		t.Fatalf("json show %q: %v", r.stdout, err)
	}

	r = h.run(ctx, nil, "sessions", "events", ids[0])
	r.check(t, 0, []string{"● session " + ids[0] + " started", "> first", "You said: first", "✓ end_turn"}, nil)
	r = h.run(ctx, nil, "--json", "sessions", "events", ids[0], "--after", "2", "--limit", "3")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 3 || !strings.Contains(lines[0], `"seq":3`) {
		t.Fatalf("events --after 2 --limit 3:\n%s", r.stdout)
	}

	r = h.run(ctx, nil, "sessions", "rm", ids[1])
	r.check(t, 0, []string{"ended " + ids[1]}, nil)
	r = h.run(ctx, nil, "sessions", "rm", "--purge", ids[2], "ses_nope")
	r.check(t, 1, []string{"purged " + ids[2]}, []string{"ses_nope: DELETE /v1/sessions/ses_nope: 404"})
	if _, err := c.GetSession(ctx, ids[2]); !client.IsNotFound(err) {
		t.Fatalf("purged session still there: %v", err)
	}

	// The mock's sessions run on this host: none pauses.
	r = h.run(ctx, nil, "sessions", "pause", ids[0])
	r.check(t, 1, nil, []string{"/pause: 409", "cannot be paused"})

	// tail of an ended session prints its log and returns.
	r = h.run(ctx, nil, "sessions", "tail", ids[1])
	r.check(t, 0, []string{"● session ended: terminated"}, nil)
}

func TestSessionsTailFollows(t *testing.T) {
	t.Parallel()
	h := newHarness(t, stacktest.Options{})
	ctx := t.Context()
	c := h.client()
	s, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	// An old session.ended (as before a resume) must not stop the tail. The
	// mock agent cannot resume, so the engine's record of a stop goes into
	// the store directly.
	old, err := h.stk.Store.Append(ctx, s.ID, event.New(event.SourceDaemon, &event.SessionEnded{Reason: event.EndInterrupted}))
	if err != nil {
		t.Fatal(err)
	}
	after := old[0].Seq

	var r result
	var wg sync.WaitGroup
	wg.Go(func() { r = h.run(ctx, nil, "--json", "sessions", "tail", s.ID) })
	turn, err := c.Send(ctx, s.ID, permissionScript(t))
	if err != nil {
		t.Fatal(err)
	}
	// tail shows the request but does not answer it.
	waitFor(t, "the permission request", func() bool { return h.hasEvent(s.ID, event.TypePermissionRequested) })
	time.Sleep(50 * time.Millisecond)
	if h.hasEvent(s.ID, event.TypePermissionResolved) {
		t.Fatal("tail answered a permission request")
	}
	reqs, _ := c.Requests(ctx, s.ID, client.RequestsPending)
	if _, err := c.AnswerPermission(ctx, s.ID, reqs.Requests[0].ID, client.PermissionAnswer{Decision: "deny"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitTurn(ctx, s.ID, turn.TurnID, after, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSession(ctx, s.ID, false); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	r.check(t, 0, []string{`"type":"permission.requested"`, `"type":"permission.resolved"`, `"type":"turn.completed"`, `"reason":"terminated"`}, nil)
}

func TestSessionsTailCtrlC(t *testing.T) {
	t.Parallel()
	h := newHarness(t, stacktest.Options{})
	ses, err := h.client().CreateSession(t.Context(), client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	id := ses.ID
	go func() { (<-h.signals) <- os.Interrupt }()
	r := h.run(t.Context(), nil, "sessions", "tail", id)
	r.check(t, 0, nil, nil)

	// A context cancelled by SIGINT or SIGTERM also stops it quietly.
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-h.signals
		cancel()
	}()
	r = h.run(ctx, nil, "sessions", "tail", id)
	r.check(t, 0, nil, nil)
	if r.stderr != "" {
		t.Errorf("stderr %q", r.stderr)
	}
}

func TestAgentsAndVersion(t *testing.T) {
	t.Parallel()
	reg := agent.NewRegistry()
	reg.Register(mock.Name, mock.New())
	reg.Register(amp.Name, amp.New()) // listed, unavailable, with the reason
	h := newHarness(t, stacktest.Options{Agents: reg, API: httpapi.Config{Version: "9.8.7-daemon"}})
	r := h.run(t.Context(), nil, "agents")
	r.check(t, 0, []string{"NAME", "mock", "yes", "builtin", "amp", "no", "    not supported: Amp's agent loop", "Amp"}, nil)
	r = h.run(t.Context(), nil, "--json", "agents")
	var list client.AgentList
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Agents) != 2 {
		t.Fatalf("json agents %q: %v", r.stdout, err)
	}

	r = h.run(t.Context(), nil, "version")
	r.check(t, 0, []string{"agentbox 1.2.3-test\n", "build    " + runtime.Version(), "daemon   9.8.7-daemon (event schema v1) at " + h.stk.URL}, nil)
	r = h.run(t.Context(), nil, "--version")
	if r.code != 0 || r.stdout != "agentbox 1.2.3-test\n" {
		t.Fatalf("--version: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = h.run(t.Context(), nil, "version", "--url", "http://127.0.0.1:1")
	r.check(t, 0, []string{"agentbox 1.2.3-test\n"}, []string{"daemon not reachable at http://127.0.0.1:1"})
	r = h.run(t.Context(), nil, "--json", "version", "--url", "unix:///nonexistent/agentbox.sock")
	var v struct {
		Version string
		Build   struct {
			GoVersion string `json:"go_version"`
		}
		Daemon      *client.Health
		DaemonError string `json:"daemon_error"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.Version != "1.2.3-test" || v.Build.GoVersion != runtime.Version() || v.Daemon != nil || v.DaemonError == "" || r.code != 0 {
		t.Fatalf("json version %q: %v", r.stdout, err)
	}
}

func TestTokenHandling(t *testing.T) {
	t.Parallel()
	const token = "tok-s3cret-value"
	h := newHarness(t, withToken(token))
	r := h.run(t.Context(), nil, "agents")
	r.check(t, 1, nil, []string{"401"})

	h.env[EnvToken] = token
	r = h.run(t.Context(), nil, "agents")
	r.check(t, 0, []string{"mock"}, nil)
	r = h.run(t.Context(), nil, "agents", "--token", "wrong")
	r.check(t, 1, nil, []string{"401"})

	for _, args := range [][]string{{"--help"}, {"run", "--help"}, {"agents", "--token", "wrong"}, {"version", "--url", "http://127.0.0.1:1"}} {
		r = h.run(t.Context(), nil, args...)
		if strings.Contains(r.stdout+r.stderr, token) {
			t.Errorf("%v printed the token", args)
		}
	}
}

func TestURLFromFlagEnvAndDefault(t *testing.T) {
	t.Parallel()
	h := newHarness(t, stacktest.Options{})
	h.env[EnvURL] = "http://127.0.0.1:1"
	r := h.run(t.Context(), nil, "agents", "--url", h.stk.URL)
	r.check(t, 0, []string{"mock"}, nil)
	r = h.run(t.Context(), nil, "agents")
	r.check(t, 1, nil, []string{"no agentbox daemon answers at tcp 127.0.0.1:1: start one with `agentbox serve`"})
	r = h.run(t.Context(), nil, "sessions", "list", "--url", "unix:///nonexistent/agentbox.sock")
	r.check(t, 1, nil, []string{"no agentbox daemon answers at unix /nonexistent/agentbox.sock: start one with `agentbox serve`"})
	// A daemon that answers, even with an error, gets no such hint.
	r = h.run(t.Context(), nil, "sessions", "show", "ses_nope", "--url", h.stk.URL)
	if r.code == 0 || strings.Contains(r.stderr, "agentbox serve") {
		t.Errorf("an answer was taken for no daemon: %d %q", r.code, r.stderr)
	}
	delete(h.env, EnvURL)
	r = h.run(t.Context(), nil, "version")
	r.check(t, 0, nil, []string{"daemon not reachable at " + DefaultURL})
}

func TestColor(t *testing.T) {
	t.Parallel()
	vars := map[string]string{}
	a := &app{env: env{getenv: func(k string) string { return vars[k] }, isTerminal: func(any) bool { return true }}}
	if !a.colorFor(io.Discard) {
		t.Fatal("no colour on a terminal")
	}
	vars["NO_COLOR"] = "1"
	if a.colorFor(io.Discard) {
		t.Fatal("colour despite NO_COLOR")
	}
	delete(vars, "NO_COLOR")
	vars["TERM"] = "dumb"
	if a.colorFor(io.Discard) {
		t.Fatal("colour on a dumb terminal")
	}
	a.env.isTerminal = func(any) bool { return false }
	if !a.interactive(strings.NewReader("")) || a.interactive(os.Stdin) {
		t.Fatal("interactive: a reader given on purpose is asked, a file that is no terminal is not")
	}
}

// TestTokenFile: without --token or AGENTBOX_TOKEN, the CLI sends the token
// a daemon on this machine keeps in its data directory; one others can
// read is refused; a 401 says where the token is.
func TestTokenFile(t *testing.T) {
	t.Parallel()
	const token = "file-t0ken"
	h := newHarness(t, withToken(token))
	r := h.run(t.Context(), nil, "agents")
	r.check(t, 1, nil, []string{"401", "--token or AGENTBOX_TOKEN", "DATA_DIR/token", "AGENTBOX_DATA_DIR"})

	dir := t.TempDir()
	path := filepath.Join(dir, client.TokenFileName)
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.env["AGENTBOX_DATA_DIR"] = dir
	r = h.run(t.Context(), nil, "agents")
	r.check(t, 0, []string{"mock"}, nil)
	// The default data dir, from HOME.
	delete(h.env, "AGENTBOX_DATA_DIR")
	home := t.TempDir()
	share := filepath.Join(home, ".local", "share", "agentbox")
	if err := os.MkdirAll(share, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(share, client.TokenFileName), []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	h.env["HOME"] = home
	r = h.run(t.Context(), nil, "agents")
	r.check(t, 0, []string{"mock"}, nil)
	// A flag or the environment wins over the file.
	r = h.run(t.Context(), nil, "agents", "--token", "wrong")
	r.check(t, 1, nil, []string{"401"})

	h.env["AGENTBOX_DATA_DIR"] = dir
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	r = h.run(t.Context(), nil, "agents")
	r.check(t, 1, nil, []string{"chmod 600"})
}

// TestRunRm: run --rm removes the session after its turn, also when the
// turn fails; without it, run says how to continue, resume or remove it.
func TestRunRm(t *testing.T) {
	t.Parallel()
	h := newHarness(t, stacktest.Options{})
	r := h.run(t.Context(), nil, "run", "--agent", "mock", "hello")
	kept := sessionOf(t, r)
	r.check(t, 0, nil, []string{
		"session " + kept + " is kept",
		`agentbox run --session ` + kept + ` "..."`,
		"agentbox sessions resume " + kept,
		"agentbox sessions rm --purge " + kept,
	})

	r = h.run(t.Context(), nil, "run", "--rm", "--agent", "mock", "hello")
	r.check(t, 0, []string{"You said: hello"}, nil)
	if strings.Contains(r.stderr, "is kept") {
		t.Errorf("run --rm says the session is kept:\n%s", r.stderr)
	}
	if _, err := h.client().GetSession(t.Context(), sessionOf(t, r)); !client.IsNotFound(err) {
		t.Fatalf("session after run --rm: %v", err)
	}

	// --rm on a continued session removes it too.
	r = h.run(t.Context(), nil, "run", "--rm", "--session", kept, "again")
	r.check(t, 0, []string{"You said: again"}, nil)
	if _, err := h.client().GetSession(t.Context(), kept); !client.IsNotFound(err) {
		t.Fatalf("continued session after run --rm: %v", err)
	}
}

// TestAgentShowAndSessionSet: agents show lists the agent's models with
// its default; sessions set switches a session's model, and says why not
// (unknown model, unknown agent).
func TestAgentShowAndSessionSet(t *testing.T) {
	t.Parallel()
	reg := agent.NewRegistry()
	reg.Register(mock.Name, stacktest.WithModels(mock.New(), []agent.Choice{{ID: "m1", Name: "Model one"}, {ID: "m2"}}))
	h := newHarness(t, stacktest.Options{Agents: reg})
	// The engine learns the agent's models from its first session.
	s, err := h.client().CreateSession(t.Context(), client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	r := h.run(t.Context(), nil, "agents", "show", "mock")
	r.check(t, 0, []string{"available", "model switch", "MODEL", "m1", "Model one", "yes", "m2"}, nil)
	r = h.run(t.Context(), nil, "agents", "show", "nope")
	r.check(t, 1, nil, []string{"not found"})

	r = h.run(t.Context(), nil, "sessions", "set", s.ID, "--model", "m2")
	r.check(t, 0, []string{"session " + s.ID + ": model m2"}, nil)
	r = h.run(t.Context(), nil, "sessions", "set", s.ID, "--model", "m9")
	r.check(t, 1, nil, []string{"does not offer"})
	r = h.run(t.Context(), nil, "sessions", "set", s.ID)
	r.check(t, 1, nil, []string{"give --model, --mode or both"})
}

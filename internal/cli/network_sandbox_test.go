package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/daemon/daemontest"
)

// The network commands need sessions with a sandbox, so these tests run a
// whole daemon (sandboxes, egress proxy, the operator's global policy)
// rather than the engine alone.

// sandboxAllow is the global policy's network allow list of the daemon
// sandboxedHarness serves.
var sandboxAllow = []string{"api.github.com:443", "registry.npmjs.org:443", "*.golang.org"}

// sandboxDaemon is the one daemon the tests of sandboxed sessions share
// (a daemon's start and stop cost more than the tests): started by the
// first of them, stopped by TestMain.
var sandboxDaemon struct {
	once sync.Once
	url  string
	skip string // why this host cannot run it
	err  error
	stop func()
}

// sandboxedHarness returns a harness of the shared daemon with the mock
// agent, whose global policy lets sessions reach sandboxAllow through the
// egress proxy; sessions created with a policy run in sandboxes of the
// process runtime. It skips when this host cannot run those sandboxes.
func sandboxedHarness(t *testing.T) *harness {
	t.Helper()
	d := &sandboxDaemon
	d.once.Do(func() { d.url, d.skip, d.stop, d.err = startSandboxDaemon() })
	switch {
	case d.skip != "":
		t.Skipf("this host cannot run sandboxes: %s", d.skip)
	case d.err != nil:
		t.Fatal(d.err)
	}
	return &harness{t: t, url: d.url, env: map[string]string{EnvURL: d.url}, signals: make(chan chan<- os.Signal, 1)}
}

// stopSandboxDaemon stops the shared daemon if it was started.
func stopSandboxDaemon() {
	if sandboxDaemon.stop != nil {
		sandboxDaemon.stop()
	}
}

func startSandboxDaemon() (url, skip string, stop func(), err error) {
	ctx := context.Background()
	if why := (&daemontest.Host{}).Probe(ctx); why != "" {
		return "", why, nil, nil
	}
	dir, err := os.MkdirTemp("", "agentbox-cli-test-")
	if err != nil {
		return "", "", nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	rules, err := json.Marshal(sandboxAllow)
	if err != nil {
		return "", "", nil, err
	}
	// The daemon's built-in global policy, with sandboxAllow for its
	// network allow rules.
	def, err := os.ReadFile(filepath.Join("..", "daemon", "default-global-policy.yaml"))
	if err != nil {
		return "", "", nil, err
	}
	const anyHost = `allow: ["*"]`
	if !bytes.Contains(def, []byte(anyHost)) {
		return "", "", nil, fmt.Errorf("the built-in global policy no longer says %s", anyHost)
	}
	global := filepath.Join(dir, "global-policy.yaml")
	if err := os.WriteFile(global, bytes.Replace(def, []byte(anyHost), []byte("allow: "+string(rules)), 1), 0o600); err != nil {
		return "", "", nil, err
	}
	reg := agent.NewRegistry()
	reg.Register(mock.Name, mock.New())
	d, err := daemon.New(ctx, daemon.Config{
		Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "data"), InsecureNoAuth: true, Agents: reg,
		GlobalPolicy: global, Log: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return "", "", nil, err
	}
	// The daemon lives until TestMain stops it, not a test's context.
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(sctx) }()
	return d.URL(), "", func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "the sandboxed sessions' daemon: %v\n", err)
		}
		_ = os.RemoveAll(dir)
	}, nil
}

// sandboxed creates a session of the mock agent with policy and returns
// its id ("" and an error on t when it cannot).
func (h *harness) sandboxed(t *testing.T, policy string) string {
	t.Helper()
	s, err := h.client().CreateSession(t.Context(), client.CreateSession{Agent: "mock", Policy: json.RawMessage(policy)})
	if err != nil {
		t.Error(err) // may run on another goroutine than the test's
	}
	return s.ID
}

func TestSessionsNetwork(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		args   []string // after "sessions network ID"
		json   bool
		code   int
		stdout []string
		stderr []string
		allow  []string // the stored rules afterwards
	}{
		{
			name: "show", code: 0, allow: []string{"api.github.com:443"},
			stdout: []string{"Mode:     proxy\n", "Default:  deny\n", "Allow:    api.github.com:443\n", "Deny:     10.0.0.0/8\n",
				"Live:     yes (the running sandbox's egress proxy enforces these rules)\n"},
		},
		{
			name: "replace", args: []string{"--allow", "registry.npmjs.org:443", "--allow", "*.golang.org"}, allow: []string{"registry.npmjs.org:443", "*.golang.org"},
			stdout: []string{"Allow:    registry.npmjs.org:443\n          *.golang.org\n", "Deny:     10.0.0.0/8\n", "Live:     yes"},
		},
		{
			name: "clear", args: []string{"--clear"}, allow: []string{},
			stdout: []string{"Allow:    (none)\n", "Default:  deny\n"},
		},
		{
			name: "rule beyond the global policy", args: []string{"--allow", "evil.example:443"}, code: 1, allow: []string{"api.github.com:443"},
			stderr: []string{"PUT /v1/sessions/", "/network: 422 Unprocessable Entity: sandbox policy refused: policy exceeds the global policy: network.allow[0]: \"evil.example:443\" is not covered by the global policy's allow rules"},
		},
		{
			name: "--allow and --clear", args: []string{"--allow", "a.example", "--clear"}, code: ExitUsage, allow: []string{"api.github.com:443"},
			stderr: []string{"give --allow rules or --clear, not both (see agentbox sessions network --help)"},
		},
		{
			name: "empty rule", args: []string{"--allow", " "}, code: ExitUsage, allow: []string{"api.github.com:443"},
			stderr: []string{"--allow: empty rule"},
		},
	}
	h := sandboxedHarness(t)
	// A session of its own for each subtest that changes the rules, one
	// for all the others; their sandboxes start at once (a start is mostly
	// waiting).
	const policy = `{"version": 1, "network": {"mode": "proxy", "default": "deny", "allow": ["api.github.com:443"], "deny": ["10.0.0.0/8"]}}`
	changes := func(tt int) bool { return tests[tt].code == 0 && len(tests[tt].args) > 0 }
	ids := make([][2]string, len(tests))
	var shared string
	var wg sync.WaitGroup
	wg.Go(func() { shared = h.sandboxed(t, policy) })
	for i := range tests {
		if changes(i) {
			for j := range 2 {
				wg.Go(func() { ids[i][j] = h.sandboxed(t, policy) })
			}
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for i, tt := range tests {
		for j, asJSON := range []bool{false, true} {
			id := shared
			if changes(i) {
				id = ids[i][j]
			}
			name := tt.name
			if asJSON {
				name += " json"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				args := []string{"sessions", "network", id}
				if asJSON {
					args = append([]string{"--json"}, args...)
				}
				r := h.run(t.Context(), nil, append(args, tt.args...)...)
				if asJSON {
					r.check(t, tt.code, nil, tt.stderr)
					if tt.code == 0 {
						var n client.SessionNetwork
						if err := json.Unmarshal([]byte(r.stdout), &n); err != nil || !slices.Equal(n.Allow, tt.allow) || n.Mode != "proxy" || !n.Live {
							t.Errorf("--json: %+v, %v\n%s", n, err, r.stdout)
						}
						if tt.allow != nil && len(tt.allow) == 0 && !strings.Contains(r.stdout, `"allow": []`) {
							t.Errorf("no rules should print \"allow\": []:\n%s", r.stdout)
						}
					}
				} else {
					r.check(t, tt.code, tt.stdout, tt.stderr)
				}
				if tt.code != 0 && r.stdout != "" {
					t.Errorf("stdout on failure: %q", r.stdout)
				}
				n, err := h.client().Network(t.Context(), id)
				if err != nil || !slices.Equal(n.Allow, tt.allow) {
					t.Errorf("stored rules %q, %v; want %q", n.Allow, err, tt.allow)
				}
			})
		}
	}
}

func TestSessionsNetworkErrors(t *testing.T) {
	t.Parallel()
	h := sandboxedHarness(t)
	ctx := t.Context()
	c := h.client()
	// Created without a policy, so without a sandbox.
	ps, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	plain := ps.ID
	// Created with a policy, so sandboxed; strict's mode none has no proxy.
	boxed, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock", Policy: json.RawMessage(`"strict"`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSession(ctx, boxed.ID, false); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args   []string
		code   int
		stdout []string
		stderr string
	}{
		{[]string{plain}, 1, nil, "GET /v1/sessions/" + plain + "/network: 409 Conflict: session has no sandbox: session " + plain + " has no sandbox, so no network rules (only a session created with a policy"},
		{[]string{plain, "--clear"}, 1, nil, "PUT /v1/sessions/" + plain + "/network: 409 Conflict"},
		{[]string{"--json", plain}, 1, nil, "409 Conflict"},
		{[]string{"ses_nope"}, 1, nil, "GET /v1/sessions/ses_nope/network: 404 Not Found"},
		{[]string{"ses_nope", "--allow", "a.example"}, 1, nil, "PUT /v1/sessions/ses_nope/network: 404 Not Found"},
		{[]string{boxed.ID}, 0, []string{"Mode:     none\n", "Default:  deny\n", "Allow:    (none)\n", "Deny:     (none)\n", "Live:     no (they apply from the session's next start: agentbox sessions resume " + boxed.ID + ")"}, ""},
		{[]string{boxed.ID, "--allow", "a.example"}, 1, nil, "422 Unprocessable Entity: sandbox policy refused: the session's network mode is none, which has no egress proxy"},
		{nil, ExitUsage, nil, "accepts 1 arg(s), received 0 (see agentbox sessions network --help)"},
		{[]string{"a", "b"}, ExitUsage, nil, "accepts 1 arg(s), received 2"},
	} {
		r := h.run(ctx, nil, append([]string{"sessions", "network"}, tt.args...)...)
		if r.code != tt.code || !strings.Contains(r.stderr, tt.stderr) {
			t.Errorf("%v: code %d, stderr %q; want %d and %q", tt.args, r.code, r.stderr, tt.code, tt.stderr)
		}
		for _, s := range tt.stdout {
			if !strings.Contains(r.stdout, s) {
				t.Errorf("%v: stdout lacks %q:\n%s", tt.args, s, r.stdout)
			}
		}
	}
	var p struct{ Mode string }
	r := h.run(ctx, nil, "--json", "sessions", "network", boxed.ID)
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || p.Mode != "none" || !strings.Contains(r.stdout, `"live": false`) {
		t.Errorf("--json of an ended session: %v\n%s", err, r.stdout)
	}
}

// TestSessionsShowSandboxed: sessions show says how a sandboxed session is
// confined (runtime, mechanisms, policy hash), as the daemon reports it.
func TestSessionsShowSandboxed(t *testing.T) {
	t.Parallel()
	h := sandboxedHarness(t)
	id := h.sandboxed(t, `{"version": 1}`)
	s, err := h.client().GetSession(t.Context(), id)
	if err != nil || !s.Sandboxed || s.Sandbox == nil || len(s.Sandbox.Mechanisms) == 0 || s.Sandbox.PolicyHash == "" {
		t.Fatalf("session %+v, %v", s, err)
	}
	r := h.run(t.Context(), nil, "sessions", "show", id)
	r.check(t, 0, []string{"Sandboxed:", "yes", "Sandbox runtime:", "process", "Sandbox mechanisms:", strings.Join(s.Sandbox.Mechanisms, ", "),
		"Policy hash:", s.Sandbox.PolicyHash}, nil)
}

// TestRunReportsLoweredLimits: a session whose policy asks for more than
// the global policy allows of a limit gets the global's, and run says so.
func TestRunReportsLoweredLimits(t *testing.T) {
	h := sandboxedHarness(t)
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, []byte("version: 1\nresources:\n  memory: 64Gi\n  pids: 100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := h.run(t.Context(), nil, "run", "--rm", "--agent", "mock", "--policy", big, "hi")
	r.check(t, 0, []string{"You said: hi"}, []string{"agentbox: resources.memory: asked 64Gi, applied 8Gi (lowered by the global policy)\n"})
	if strings.Contains(r.stderr, "pids") {
		t.Errorf("a limit applied as asked was reported: %q", r.stderr)
	}
	// The create's answer carries it; the session's later views do not
	// (they show the effective policy's hash).
	s, err := h.client().CreateSession(t.Context(), client.CreateSession{Agent: "mock", PolicySource: &client.PolicySource{Name: "big.yaml", Text: "version: 1\nresources:\n  memory: 64Gi\n"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.client().DeleteSession(context.Background(), s.ID, true) })
	want := []client.LimitAdjustment{{Field: "resources.memory", Requested: "64Gi", Applied: "8Gi", By: "global policy"}}
	if s.Sandbox == nil || !slices.Equal(s.Sandbox.Adjusted, want) {
		t.Errorf("create answer sandbox %+v, want adjusted %+v", s.Sandbox, want)
	}
}

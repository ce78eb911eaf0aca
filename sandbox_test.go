package agentbox_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent/install"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/fakellm"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
	"github.com/agentbox/agentbox/internal/sandbox/process"
)

// TestSessionInSandbox runs a mock agent session under the agent-default
// policy: its commands run as the sandbox user, its workspace changes reach
// the host at the end of the turn, and a protected file it creates does
// not, with a sandbox.violation event in the log.
func TestSessionInSandbox(t *testing.T) {
	requireSandbox(t)
	t.Setenv("AGENTBOX_TEST_SECRET", "hunter2") // must not reach the sandbox
	cwd := t.TempDir()
	srv := start(t, agentbox.Options{GlobalPolicy: globalPolicy(t, cwd)})
	c := srv.Client()
	if err := os.WriteFile(filepath.Join(cwd, "CLAUDE.md"), []byte("be nice\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Cwd: cwd, Policy: json.RawMessage(`"agent-default"`)})
	if err != nil {
		t.Fatal(err)
	}
	prompt := mock.ScriptPrompt(mock.Step{Kind: mock.KindCommand, Command: "id -u; env; echo made > out.txt; echo evil >> CLAUDE.md; " +
		"mkdir -p .git/hooks && echo x > .git/hooks/post-checkout; echo sneaky > AGENTS.md; true"})
	tc, evs := turn(t, c, s.ID, prompt)
	if tc.StopReason != event.StopEndTurn {
		t.Fatalf("turn: %+v", tc)
	}
	var out string
	var violations []event.SandboxViolation
	for _, e := range evs {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch d := p.(type) {
		case *event.ItemCompleted:
			if d.Item.Kind == event.ItemCommand {
				out = d.Item.Output
			}
		case *event.SandboxViolation:
			violations = append(violations, *d)
		}
	}
	if !strings.HasPrefix(out, "1000\n") {
		t.Errorf("command output %q, want uid 1000 first", out)
	}
	if strings.Contains(out, "hunter2") || strings.Contains(out, "AGENTBOX_TEST_SECRET") {
		t.Errorf("the daemon's environment leaked into the sandbox:\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(cwd, "out.txt")); err != nil || string(b) != "made\n" {
		t.Errorf("out.txt on the host: %q, %v; want the command's file after the turn", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(cwd, "CLAUDE.md")); string(b) != "be nice\n" {
		t.Errorf("CLAUDE.md on the host changed to %q", b)
	}
	for _, p := range []string{"AGENTS.md", ".git/hooks/post-checkout"} {
		if _, err := os.Lstat(filepath.Join(cwd, p)); err == nil {
			t.Errorf("protected %s was created on the host", p)
		}
	}
	if len(violations) < 3 {
		t.Errorf("%d sandbox.violation events, want one per protected change (3): %+v", len(violations), violations)
	}
	for _, v := range violations {
		if v.Kind != event.ViolationFilesystem || v.Action != event.ActionDropped || v.Path == "" || v.Rule == "" {
			t.Errorf("violation %+v, want a dropped filesystem change naming path and rule", v)
		}
	}
	// session.started says what isolation the agent runs under.
	page, err := c.Events(t.Context(), s.ID, 0, 1)
	if err != nil || len(page.Events) != 1 {
		t.Fatal(err)
	}
	p, _ := page.Events[0].Decode()
	st, ok := p.(*event.SessionStarted)
	if !ok || st.Sandbox == nil || st.Sandbox.Runtime != "process" || len(st.Sandbox.Mechanisms) == 0 {
		t.Errorf("session.started %+v, want the sandbox's runtime and mechanisms", p)
	}
}

// TestSessionPolicyRefused checks that a policy is refused with a problem
// naming the field, and that a daemon without sandboxing never accepts one.
func TestSessionPolicyRefused(t *testing.T) {
	srv := start(t, agentbox.Options{})
	c := srv.Client()
	_, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Policy: json.RawMessage(`{"version":1,"resources":{"pids":"many"}}`)})
	var pe *client.APIError
	if !errors.As(err, &pe) || pe.Type != client.ProblemPolicy || !strings.Contains(pe.Detail, "resources.pids") {
		t.Fatalf("create with a bad policy: %v, want a policy problem naming resources.pids", err)
	}
	_, err = c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", PolicySource: &client.PolicySource{
		Name: "team.yaml", Text: "version: 1\nresources:\n  memory: lots\n"}})
	if !errors.As(err, &pe) || pe.Type != client.ProblemPolicy || !strings.Contains(pe.Detail, "team.yaml:3") {
		t.Fatalf("create with a bad policy file: %v, want a policy problem at team.yaml:3", err)
	}
	_, err = c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Policy: json.RawMessage(`{"version":1,"network":{"mode":"host"}}`)})
	if !errors.As(err, &pe) || pe.Type != client.ProblemPolicy {
		t.Fatalf("create asking for host network without the operator's leave: %v, want a policy problem", err)
	}
}

// TestSandboxEnvCredentials checks the one checkpoint of a session's env
// (create and resume): a sandboxed session refuses a credential in env —
// by its name or by its value's shape — with a policy problem that names
// the variable and how to declare it, never the value; a variable the
// policy declares as a secret bound to a host is accepted, and the sandbox
// holds its placeholder, not the request's value.
func TestSandboxEnvCredentials(t *testing.T) {
	requireSandbox(t)
	ghToken := "ghp_" + randomHex(t, 18)
	jwt := "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0." + randomHex(t, 8)
	srv := start(t, agentbox.Options{})
	c := srv.Client()
	if _, err := c.PutSecret(t.Context(), "github", client.PutSecret{Value: ghToken, Host: "api.github.com", Header: "Authorization", Format: "Bearer {value}"}); err != nil {
		t.Fatal(err)
	}
	sandboxed := json.RawMessage(`"agent-default"`)
	declared := json.RawMessage(`{"version":1,"env":{"secrets":{"GITHUB_TOKEN":"github"}}}`)
	refused := func(t *testing.T, err error, names []string, values ...string) {
		t.Helper()
		var pe *client.APIError
		if !errors.As(err, &pe) || pe.Status != 422 || pe.Type != client.ProblemPolicy {
			t.Fatalf("%v, want a 422 policy problem", err)
		}
		for _, n := range names {
			if !strings.Contains(pe.Detail, n) {
				t.Errorf("the problem does not name %s: %s", n, pe.Detail)
			}
		}
		if !strings.Contains(pe.Detail, "env.secrets") || !strings.Contains(pe.Detail, "/v1/secrets") {
			t.Errorf("the problem does not say how to declare a secret: %s", pe.Detail)
		}
		for _, v := range values {
			if strings.Contains(pe.Detail, v) || strings.Contains(pe.Title, v) {
				t.Errorf("the problem echoes a value: %s", pe.Detail)
			}
		}
	}
	for _, tc := range []struct {
		name  string
		env   map[string]string
		names []string
	}{
		{"name", map[string]string{"GITHUB_TOKEN": ghToken, "TERM": "xterm"}, []string{"GITHUB_TOKEN"}},
		{"value", map[string]string{"NOTES": "use " + jwt}, []string{"NOTES"}},
		{"another agent's model key", map[string]string{"ANTHROPIC_API_KEY": "sk-ant-api03-" + randomHex(t, 16)}, []string{"ANTHROPIC_API_KEY"}},
		{"several", map[string]string{"DB_PASSWORD": "hunter2-" + randomHex(t, 4), "DATABASE_URL": "postgres://app:hunter2@db/app", "AWS_SECRET_ACCESS_KEY": randomHex(t, 20)},
			[]string{"AWS_SECRET_ACCESS_KEY", "DATABASE_URL", "DB_PASSWORD"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Policy: sandboxed, Env: tc.env})
			refused(t, err, tc.names, slices.Collect(maps.Values(tc.env))...)
		})
	}
	// Without a sandbox the env is the caller's business.
	if _, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Env: map[string]string{"GITHUB_TOKEN": ghToken}}); err != nil {
		t.Errorf("a session without a sandbox refused a token: %v", err)
	}
	// Declared as a secret bound to a host: accepted, and the sandbox
	// holds the placeholder whatever the request said.
	s, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Policy: declared, Env: map[string]string{"GITHUB_TOKEN": ghToken}})
	if err != nil {
		t.Fatal(err)
	}
	_, evs := turn(t, c, s.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindCommand, Command: "env"}))
	var out string
	for _, e := range evs {
		if p, _ := e.Decode(); p != nil {
			if d, ok := p.(*event.ItemCompleted); ok && d.Item.Kind == event.ItemCommand {
				out = d.Item.Output
			}
		}
	}
	if !strings.Contains(out, "GITHUB_TOKEN=agentbox-placeholder-github\n") || strings.Contains(out, ghToken) {
		t.Errorf("the sandbox's environment:\n%s\nwant GITHUB_TOKEN holding the placeholder", out)
	}
	// Resume passes the same checkpoint.
	if err := c.DeleteSession(t.Context(), s.ID, false); err != nil {
		t.Fatal(err)
	}
	_, err = c.Resume(t.Context(), s.ID, client.ResumeSession{Env: map[string]string{"NPM_TOKEN": "npm_" + randomHex(t, 18)}})
	refused(t, err, []string{"NPM_TOKEN"})
}

// requireSandbox skips on a host whose process runtime cannot run (the
// probe names what is missing); CI's machines can.
func requireSandbox(t *testing.T) {
	t.Helper()
	if pr := process.New(process.Options{}).Probe(t.Context()); !pr.Available {
		t.Skipf("this host cannot build sandboxes: %s", pr.Reason)
	}
}

// turn sends text and collects the turn's events until turn.completed.
func turn(t *testing.T, c *client.Client, sid, text string) (event.TurnCompleted, []event.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	after, err := c.LastSeq(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := c.Send(ctx, sid, text)
	if err != nil {
		t.Fatal(err)
	}
	var evs []event.Event
	tc, err := c.WaitTurn(ctx, sid, tr.TurnID, after, func(e event.Event) error { evs = append(evs, e); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return tc, evs
}

// TestAgentsInSandbox runs every agent that can run sandboxed, with its
// real CLI, in a session's sandbox against the fake LLM, its model traffic
// through the egress proxy. Each session is created with every credential
// its agent takes for its model (API keys, auth and OAuth tokens) and a
// GitHub token the policy declares as a secret bound to a host, all in the
// request's env. The fake LLM answers only the real credentials, each in
// its own header (the OAuth token only with Anthropic's OAuth beta
// header), so a turn completes only if the proxy's route put them back.
// The model's shell call runs inside and looks for every secret value in
// the environment and command line of every process and in the files of
// the workspace, the home and /tmp: it must find only the control file the
// test put there, and placeholders in the credential variables. No value
// is in the session's events, the audit log or any file the daemon keeps.
//
// Native codex and opencode run a server of their own inside the
// session's sandbox (opencode reached through relays on stdio).
func TestAgentsInSandbox(t *testing.T) {
	requireSandbox(t)
	const (
		apiKey  = "ANTHROPIC_API_KEY"
		auth    = "ANTHROPIC_AUTH_TOKEN"
		oauth   = "CLAUDE_CODE_OAUTH_TOKEN"
		openai  = "OPENAI_API_KEY"
		codex   = "CODEX_API_KEY"
		gemini  = "GEMINI_API_KEY"
		google  = "GOOGLE_API_KEY"
		github  = "GITHUB_TOKEN"
		ghName  = "test-github"
		control = "control.txt"
	)
	// Each variable's real value (shaped as the vendor's), and the secret
	// whose placeholder the sandbox holds instead.
	values := map[string]string{
		apiKey: "sk-ant-api03-" + randomHex(t, 16), auth: "sk-ant-gw-" + randomHex(t, 16), oauth: "sk-ant-oat01-" + randomHex(t, 16),
		openai: "sk-proj-" + randomHex(t, 16), codex: "sk-codex-" + randomHex(t, 16),
		gemini: "AIza" + randomHex(t, 18), google: "AIza" + randomHex(t, 18), github: "ghp_" + randomHex(t, 18),
	}
	secretOf := map[string]string{
		apiKey: "anthropic-api-key", auth: "anthropic-auth-token", oauth: "anthropic-oauth-token",
		openai: "openai-api-key", codex: "openai-codex-api-key", gemini: "gemini-api-key", google: "gemini-google-api-key",
		github: ghName,
	}
	names := slices.Sorted(maps.Keys(values))
	hexRev := func(s string) string {
		b := []byte(s)
		slices.Reverse(b)
		return hex.EncodeToString(b)
	}
	var hexes []string
	for _, n := range names {
		hexes = append(hexes, hexRev(values[n]))
	}
	// The command holds the values reversed and hex-encoded, so nothing
	// it shows in /proc is a value itself.
	scan := `python3 -c '
import glob, os, stat
secrets = [bytes.fromhex(h)[::-1] for h in "` + strings.Join(hexes, ",") + `".split(",")]
names = "` + strings.Join(names, ",") + `".split(",")
def read(p, regular=False):
    try:
        if regular and not stat.S_ISREG(os.lstat(p).st_mode):
            return b""  # a FIFO would block
        with open(p, "rb") as f:
            return f.read()
    except OSError:
        return b""
hits, seen, procs = set(), {}, 0
for p in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
    b = read(p)
    if any(s in b for s in secrets):
        hits.add(p)
    if p.endswith("/environ") and b:
        procs += 1
        for kv in b.split(b"\0"):
            k, _, v = kv.decode(errors="replace").partition("=")
            if k in names:
                seen.setdefault(k, set()).add(v)
for root in {os.getcwd(), os.environ.get("HOME", "/tmp"), "/tmp"}:
    for d, _, files in os.walk(root):
        hits.update(os.path.join(d, n) for n in files if any(s in read(os.path.join(d, n), True) for s in secrets))
print("procs:", procs)
print("leaks:", ",".join(sorted(hits)) or "none")
for k in sorted(seen):
    print("env:", k + "=" + "|".join(sorted(seen[k])))
open("hello.txt", "w").write("hi")
' > scan.txt`
	accept := []fakellm.Credential{
		{Header: "x-api-key", Value: values[apiKey]},
		{Header: "Authorization", Value: "Bearer " + values[auth]},
		{Header: "Authorization", Value: "Bearer " + values[oauth], Requires: map[string]string{"anthropic-beta": "oauth-2025-04-20"}},
		{Header: "Authorization", Value: "Bearer " + values[openai]},
		{Header: "Authorization", Value: "Bearer " + values[codex]},
		{Header: "x-goog-api-key", Value: values[gemini]},
		{Header: "x-goog-api-key", Value: values[google]},
	}
	type row struct {
		name, agent, install string
		// creds are the credential variables the session's env sets; used
		// is the one the model requests carry first (Authorization before
		// x-api-key); usedSecrets the secrets the proxy adds.
		creds       []string
		used        string
		usedSecrets []string
	}
	anthropicAll := []string{apiKey, auth, oauth}
	rows := []row{
		// Claude Code sends the API key and the auth token when both are
		// set, the OAuth token only without them.
		{"claude", "claude", "claude", anthropicAll, auth, []string{"anthropic-api-key", "anthropic-auth-token"}},
		{"claude/oauth", "claude", "claude", []string{oauth}, oauth, []string{"anthropic-oauth-token"}},
		{"claude-code-acp", "claude-code-acp", "claude-code-acp", anthropicAll, auth, []string{"anthropic-api-key", "anthropic-auth-token"}},
		{"claude-code-acp/oauth", "claude-code-acp", "claude-code-acp", []string{oauth}, oauth, []string{"anthropic-oauth-token"}},
		{"pi", "pi", "pi", []string{openai}, openai, []string{"openai-api-key"}},
		{"gemini", "gemini", "gemini", []string{gemini, google}, gemini, []string{"gemini-api-key"}},
		{"codex", "codex", "codex", []string{openai}, openai, []string{"openai-api-key"}},
		{"codex-acp", "codex-acp", "codex-acp", []string{openai, codex}, openai, []string{"openai-api-key"}},
		{"opencode", "opencode", "opencode", []string{openai}, openai, []string{"openai-api-key"}},
		{"opencode-acp", "opencode-acp", "opencode", []string{openai}, openai, []string{"openai-api-key"}},
		// An agent from the agents file: agentbox routes the well-known
		// model variables its environment sets.
		{"custom-acp", "custom-claude", "claude-code-acp", anthropicAll, auth, []string{"anthropic-api-key", "anthropic-auth-token"}},
	}
	// Without a model, native codex's request offered no tools here (the
	// fake LLM answered it as a title request); gpt-5.5 is the model the
	// codex package's own tests use.
	models := map[string]string{"codex": "gpt-5.5"}
	scenarios := map[string]*fakellm.Scenario{}
	for i := range rows {
		scenarios[fmt.Sprintf("scan%d", i)] = &fakellm.Scenario{Turns: []fakellm.Turn{
			{Calls: []fakellm.Call{{Kind: fakellm.KindShell, Command: scan}}}, {Text: "done"},
		}}
	}
	llm, err := fakellm.Start(t.Context(), fakellm.Options{TLS: true, Credentials: accept, Scenarios: scenarios})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = llm.Close() })
	dir := t.TempDir()
	caFile := filepath.Join(dir, "fakellm-ca.pem")
	if err := os.WriteFile(caFile, llm.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	agentsFile := filepath.Join(dir, "agents.yaml")
	if in, ok, _ := install.Lookup("claude-code-acp"); ok {
		if err := os.WriteFile(agentsFile, []byte(fmt.Sprintf("acp:\n  - name: custom-claude\n    command: %s\n"+
			"    env: {IS_SANDBOX: \"1\", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: \"1\", DISABLE_TELEMETRY: \"1\", DISABLE_AUTOUPDATER: \"1\"}\n",
			strconv.Quote(in.Binary))), 0o600); err != nil {
			t.Fatal(err)
		}
	} else {
		agentsFile = ""
	}
	// Outside /tmp, where codex-acp cannot make its own sandbox helper.
	dataDir, err := os.MkdirTemp("/var/tmp", "agentbox-test-agents-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dataDir) }) // after the daemon's Close
	// The built-in global policy: the egress proxy is the only way out.
	// The daemon's environment holds no credential: the sessions' env does.
	// The sessions' directories are in a workspace root.
	roots := t.TempDir()
	srv := start(t, agentbox.Options{DataDir: dataDir, EgressCAFile: caFile, AgentsFile: agentsFile, GlobalPolicy: globalPolicy(t, roots)})
	c := srv.Client()
	if _, err := c.PutSecret(t.Context(), ghName, client.PutSecret{Value: values[github], Host: "api.github.com", Header: "Authorization", Format: "Bearer {value}"}); err != nil {
		t.Fatal(err)
	}
	policy := json.RawMessage(`{"version":1,"filesystem":{"read_outside_workspace":true},"resources":{"memory":"2Gi","pids":512},"env":{"secrets":{"` + github + `":"` + ghName + `"}}}`)
	var cwds []string
	for i, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			agenttest.RequireInstalled(t, tc.install)
			cwd, err := os.MkdirTemp(roots, strings.ReplaceAll(tc.name, "/", "-")+"-")
			if err != nil {
				t.Fatal(err)
			}
			cwds = append(cwds, cwd)
			// The control: a file that does hold a value, which the scan
			// must find (and nothing else).
			if err := os.WriteFile(filepath.Join(cwd, control), []byte(values[tc.used]), 0o600); err != nil {
				t.Fatal(err)
			}
			base := llm.ScenarioURL(fmt.Sprintf("scan%d", i))
			env := map[string]string{
				"ANTHROPIC_BASE_URL": base, "OPENAI_BASE_URL": base + "/v1", "GOOGLE_GEMINI_BASE_URL": base,
				github: values[github], // declared in the policy: the sandbox gets the placeholder
			}
			for _, v := range tc.creds {
				env[v] = values[v]
			}
			s, err := c.CreateSession(t.Context(), client.CreateSession{
				Agent: tc.agent, Cwd: cwd, PermissionMode: client.PermissionBypass, Policy: policy, Env: env, Model: models[tc.agent],
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.DeleteSession(context.Background(), s.ID, false) }()
			done, evs := turn(t, c, s.ID, "make hello.txt")
			if done.StopReason != event.StopEndTurn {
				t.Fatalf("turn: %+v\n%s", done, agenttest.Dump(evs))
			}
			if b, err := os.ReadFile(filepath.Join(cwd, "hello.txt")); err != nil || string(b) != "hi" {
				t.Fatalf("hello.txt on the host: %q, %v; events:\n%s", b, err, agenttest.Dump(evs))
			}
			out, err := os.ReadFile(filepath.Join(cwd, "scan.txt"))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("the scan inside the sandbox:\n%s", out)
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if want := "leaks: " + filepath.Join(cwd, control); !slices.Contains(lines, want) {
				t.Errorf("inside the sandbox the scan found secret values elsewhere than the control file (want the line %q)", want)
			}
			var procs int
			if len(lines) == 0 || func() bool { _, err := fmt.Sscanf(lines[0], "procs: %d", &procs); return err != nil }() || procs < 2 {
				t.Errorf("the scan read the environment of %d processes, want the agent's and its own at least", procs)
			}
			for _, v := range append([]string{github}, tc.creds...) {
				if want := "env: " + v + "=" + egress.Placeholder(secretOf[v]); !slices.Contains(lines, want) {
					t.Errorf("inside the sandbox %s is not only its placeholder (want the line %q)", v, want)
				}
			}
			// The fake LLM saw the real credentials, put there by the proxy.
			want := sha256.Sum256([]byte(values[tc.used]))
			models := 0
			for _, r := range llm.Requests() {
				if r.Scenario != fmt.Sprintf("scan%d", i) {
					continue
				}
				if r.Status == 401 {
					t.Errorf("the fake LLM refused a request's credentials: %s %s: %s", r.Method, r.Path, r.Reply)
				}
				if r.API != fakellm.APIOther && r.API != fakellm.APIModels {
					models++
					if r.KeySHA256 != hex.EncodeToString(want[:]) {
						t.Errorf("%s %s carried another credential than %s's", r.Method, r.Path, tc.used)
					}
				}
			}
			if models == 0 {
				t.Error("no model request reached the fake LLM")
			}
			page, err := c.Events(t.Context(), s.ID, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			all, _ := json.Marshal(page.Events)
			for _, n := range names {
				if strings.Contains(string(all), values[n]) {
					t.Errorf("%s's value is in the session's events", n)
				}
			}
			var st *event.SessionStarted
			for _, e := range page.Events {
				if p, _ := e.Decode(); st == nil {
					st, _ = p.(*event.SessionStarted)
				}
			}
			if st == nil || st.Sandbox == nil || st.Sandbox.Runtime != "process" || !slices.ContainsFunc(st.Sandbox.Mechanisms, func(m string) bool { return strings.HasPrefix(m, "egress-proxy") }) {
				t.Errorf("session.started %+v, want the process sandbox with its egress proxy", st)
			}
			aud, err := os.ReadFile(filepath.Join(dataDir, "audit.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			used := map[string]bool{}
			for _, line := range strings.Split(string(aud), "\n") {
				var r struct{ Type, ID, Secret string }
				if json.Unmarshal([]byte(line), &r) == nil && r.Type == "secret" && r.ID == s.ID {
					used[r.Secret] = true
				}
			}
			if got := slices.Sorted(maps.Keys(used)); !slices.Equal(got, tc.usedSecrets) {
				t.Errorf("the audit log records the use of %v, want %v", got, tc.usedSecrets)
			}
		})
	}
	if n := llm.KeyMismatches(); n != 0 {
		t.Errorf("the fake LLM refused %d requests' credentials", n)
	}
	// No value in any file the daemon keeps (store, audit log, agent
	// homes) or in any workspace but the control files.
	for _, root := range append([]string{dataDir}, cwds...) {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() || d.Name() == control {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			for _, n := range names {
				if bytes.Contains(b, []byte(values[n])) {
					t.Errorf("%s's value is in %s", n, p)
				}
			}
			return nil
		})
	}
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestAgentHomeInSandboxLimits: a sandboxed agent's home is its own host
// directory (DATA_DIR/agents/...), but what the agent writes there counts
// in the sandbox's disk limit like the workspace: writing more than the
// limit fails inside and the host directory stays within it. The home
// survives the session's end (a resume finds it) and goes when the
// session is purged.
func TestAgentHomeInSandboxLimits(t *testing.T) {
	requireSandbox(t)
	const limit = 32 << 20
	fill := `head -c 64M /dev/zero > "$HOME/big.bin" 2> err.txt; echo "rc=$?" > fill.txt; cat err.txt >> fill.txt; echo "home=$HOME" >> fill.txt`
	llm, err := fakellm.Start(t.Context(), fakellm.Options{
		Scenarios: map[string]*fakellm.Scenario{"fill": {Turns: []fakellm.Turn{
			{Calls: []fakellm.Call{{Kind: fakellm.KindShell, Command: fill}}}, {Text: "done"},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = llm.Close() })
	base := llm.ScenarioURL("fill")
	t.Setenv("ANTHROPIC_BASE_URL", base)
	t.Setenv("ANTHROPIC_API_KEY", "sk-test")
	t.Setenv("OPENAI_BASE_URL", base+"/v1")
	t.Setenv("OPENAI_API_KEY", "sk-test")
	dataDir := t.TempDir()
	roots := t.TempDir() // the sessions' working directories
	srv := start(t, agentbox.Options{DataDir: dataDir, GlobalPolicy: globalPolicy(t, roots)})
	c := srv.Client()
	for _, name := range []string{"claude", "pi"} {
		t.Run(name, func(t *testing.T) {
			agenttest.RequireInstalled(t, name)
			cwd, err := os.MkdirTemp(roots, name+"-")
			if err != nil {
				t.Fatal(err)
			}
			s, err := c.CreateSession(t.Context(), client.CreateSession{
				Agent: name, Cwd: cwd, PermissionMode: client.PermissionBypass,
				Policy: json.RawMessage(fmt.Sprintf(`{"version":1,"filesystem":{"read_outside_workspace":true},"resources":{"memory":"2Gi","pids":512,"disk":%d}}`, limit)),
			})
			if err != nil {
				t.Fatal(err)
			}
			done, evs := turn(t, c, s.ID, "fill your home")
			if done.StopReason != event.StopEndTurn {
				t.Fatalf("turn: %+v\n%s", done, agenttest.Dump(evs))
			}
			out, err := os.ReadFile(filepath.Join(cwd, "fill.txt"))
			if err != nil {
				t.Fatalf("the command's report: %v\n%s", err, agenttest.Dump(evs))
			}
			t.Logf("inside the sandbox:\n%s", out)
			if strings.Contains(string(out), "rc=0") || !strings.Contains(string(out), "No space left") {
				t.Errorf("writing 64 MiB into the agent's home under a %d-byte disk limit: %s", limit, out)
			}
			home := sessionHome(t, dataDir, s.ID)
			// The fill went into the session's own home: the agent's
			// HOME inside is that directory, bound at its host path.
			if !slices.Contains(strings.Split(string(out), "\n"), "home="+home) {
				t.Errorf("the agent's HOME inside the sandbox is not the session's home %s: %s", home, out)
			}
			// The adapter's own files, written after the sandbox was
			// made (pi's run directory), are not the sandbox's; they are
			// a few KiB.
			const adapterFiles = 64 << 10
			if u, err := sandbox.UsageOf(home, 0, 0); err != nil || u.Bytes > limit+adapterFiles {
				t.Errorf("the agent's home %s holds %d bytes on the host (%v), more than the %d-byte limit", home, u.Bytes, err, limit)
			}
			if err := c.DeleteSession(t.Context(), s.ID, false); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(home); err != nil {
				t.Errorf("the home of an ended session (it can be resumed) is gone: %v", err)
			}
			if err := c.DeleteSession(t.Context(), s.ID, true); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(home); !os.IsNotExist(err) {
				t.Errorf("the home %s is still there after the session was purged (%v)", home, err)
			}
		})
	}
}

// sessionHome finds the host directory of a sandboxed session's home: the
// one directory named after the session under DATA_DIR/agents.
func sessionHome(t *testing.T, dataDir, id string) string {
	t.Helper()
	var found []string
	_ = filepath.WalkDir(filepath.Join(dataDir, "agents"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == id {
			found = append(found, p)
			return filepath.SkipDir
		}
		return nil
	})
	if len(found) != 1 {
		t.Fatalf("session %s has %d homes under %s/agents: %v", id, len(found), dataDir, found)
	}
	return found[0]
}

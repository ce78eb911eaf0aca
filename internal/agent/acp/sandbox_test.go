package acp_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/acp"
	"github.com/agentbox/agentbox/internal/agent/codex"
	"github.com/agentbox/agentbox/internal/agent/opencode"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/daemon/daemontest"
	"github.com/agentbox/agentbox/internal/fakellm"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
	"github.com/agentbox/agentbox/internal/sandbox/process"
)

// TestSandboxedModelRoute runs codex-acp, opencode-acp, native codex and
// native opencode, whose provider lives in a config file agentbox generates, in a session with the
// agent-default policy against the fake LLM. The daemon's environment
// holds the upstream and the key (acp.Config, as daemon.Agents fills it
// in); the session's env holds neither. The fake LLM answers only the real
// key, so a turn completes only if the proxy's route put it back. The
// model's shell call runs inside the sandbox and reads the environment and
// command line of every process and every file of the workspace, the
// agent's homes and /tmp: it must find the key only in the control file
// the test put there (the credential variable holds its placeholder), and
// the upstream's address there only too,
// so that the generated config names the in-sandbox route and nothing
// else: the model is reached only through the proxy.
func TestSandboxedModelRoute(t *testing.T) {
	if pr := process.New(process.Options{}).Probe(t.Context()); !pr.Available {
		t.Skipf("this host cannot build sandboxes: %s", pr.Reason)
	}
	for _, tc := range []struct {
		name, install string
		adapter       func(acp.Config) agent.Adapter
	}{
		{acp.NameCodex, acp.NameCodex, func(c acp.Config) agent.Adapter { c.CodexModel = "gpt-5.5"; return acp.Codex(c) }},
		{acp.NameOpenCode, "opencode", acp.OpenCode},
		// The native adapter, whose config.toml agentbox generates too:
		// a sandboxed session gets an app-server of its own.
		{codex.Name, codex.Name, func(c acp.Config) agent.Adapter {
			return codex.New(codex.Options{Binary: c.Binary(codex.Name), Home: filepath.Join(c.DataDir, "agents", codex.Name, "home"),
				BaseURL: c.OpenAIBaseURL, APIKey: c.OpenAIAPIKey, Model: "gpt-5.5"})
		}},
		// Native opencode, whose opencode.json agentbox generates too: a
		// sandboxed session gets an `opencode serve` of its own.
		{opencode.Name, opencode.Name, func(c acp.Config) agent.Adapter {
			return opencode.New(opencode.Options{Binary: c.Binary(opencode.Name), Home: filepath.Join(c.DataDir, "agents", opencode.Name, "home"),
				BaseURL: c.OpenAIBaseURL, APIKey: c.OpenAIAPIKey, MaxRetries: -1})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := agenttest.RequireInstalled(t, tc.install)
			key := "sk-proj-" + rand.Text()
			llm, base := routeLLM(t, key)
			// Outside /tmp, where Codex cannot make its sandbox helper.
			dataDir, err := os.MkdirTemp("/var/tmp", "agentbox-acp-route-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(dataDir) }) // after the daemon's shutdown
			reg := agent.NewRegistry()
			reg.Register(tc.name, tc.adapter(acp.Config{
				DataDir: dataDir, OpenAIBaseURL: base, OpenAIAPIKey: key,
				Binary: func(string) func() (string, string, error) {
					return func() (string, string, error) { return in.Binary, in.Version, nil }
				},
			}))
			c := daemontest.Start(t, dataDir, reg)
			// The control: a file of the workspace that does hold the key
			// and the upstream, which the scan must find (and nothing
			// else). The workspace is in the daemon's default root.
			cwd := filepath.Join(dataDir, "workspaces", "w")
			if err := os.MkdirAll(cwd, 0o700); err != nil {
				t.Fatal(err)
			}
			control := filepath.Join(cwd, "control.txt")
			if err := os.WriteFile(control, []byte(key+"\n"+base+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := c.CreateSession(t.Context(), client.CreateSession{
				Agent: tc.name, Cwd: cwd, PermissionMode: client.PermissionBypass, Policy: json.RawMessage(`"agent-default"`),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.DeleteSession(context.Background(), s.ID, false) }()
			done, evs := routeTurn(t, c, s.ID)
			if done.StopReason != event.StopEndTurn {
				t.Fatalf("turn: %+v\n%s", done, agenttest.Dump(evs))
			}
			out, err := os.ReadFile(filepath.Join(s.Cwd, "scan.txt"))
			if err != nil {
				t.Fatalf("no scan: %v\n%s", err, agenttest.Dump(evs))
			}
			t.Logf("the scan inside the sandbox:\n%s", out)
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			for _, want := range []string{
				"key: " + control, "upstream: " + control,
				"env: OPENAI_API_KEY=" + egress.Placeholder("openai-api-key"),
			} {
				if !slices.Contains(lines, want) {
					t.Errorf("inside the sandbox: want the line %q", want)
				}
			}
			if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "homes: ") && len(l) > len("homes: ") }) {
				t.Error("the scan found no agent home to read")
			}
			// The fake LLM saw the real key, put there by the proxy.
			want := sha256.Sum256([]byte(key))
			models := 0
			for _, r := range llm.Requests() {
				if r.Status == 401 {
					t.Errorf("the fake LLM refused a request's credentials: %s %s", r.Method, r.Path)
				}
				if r.API != fakellm.APIOther && r.API != fakellm.APIModels {
					models++
					if r.KeySHA256 != hex.EncodeToString(want[:]) {
						t.Errorf("%s %s carried another credential than the daemon's key", r.Method, r.Path)
					}
				}
			}
			if models == 0 {
				t.Error("no model request reached the fake LLM")
			}
		})
	}
}

// routeLLM starts a fake LLM that takes only key and plays the scan,
// behind a front server whose address (the upstream the daemon is given)
// the scan looks for; it returns the fake LLM and the base URL (ending in
// /v1).
func routeLLM(t *testing.T, key string) (*fakellm.Server, string) {
	t.Helper()
	var target atomic.Pointer[url.URL]
	front := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target.Load()) }})
	t.Cleanup(front.Close)
	u, err := url.Parse(front.URL)
	if err != nil {
		t.Fatal(err)
	}
	llm, err := fakellm.Start(t.Context(), fakellm.Options{
		Credentials: []fakellm.Credential{{Header: "Authorization", Value: "Bearer " + key}},
		Scenarios: map[string]*fakellm.Scenario{"scan": {Turns: []fakellm.Turn{
			{Calls: []fakellm.Call{{Kind: fakellm.KindShell, Command: scanCommand(key, u.Host)}}}, {Text: "done"},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = llm.Close() })
	to, err := url.Parse(llm.ScenarioURL("scan"))
	if err != nil {
		t.Fatal(err)
	}
	target.Store(to)
	return llm, front.URL + "/v1"
}

// scanCommand looks for key and upstream (host:port) in the environment
// and command line of every process and in the files of the workspace,
// the agents' homes (every HOME, CODEX_HOME, XDG_*_HOME and the directory
// of OPENCODE_CONFIG a process has) and /tmp, and writes what it found to
// scan.txt in the workspace.
func scanCommand(key, upstream string) string {
	enc := func(s string) string {
		b := []byte(s)
		slices.Reverse(b)
		return hex.EncodeToString(b)
	}
	return `python3 -c '
import glob, os, stat
def dec(h): return bytes.fromhex(h)[::-1]
key, up = dec("` + enc(key) + `"), dec("` + enc(upstream) + `")
def read(p, regular=False):
    try:
        if regular and not stat.S_ISREG(os.lstat(p).st_mode):
            return b""
        with open(p, "rb") as f:
            return f.read()
    except OSError:
        return b""
hits = {key: set(), up: set()}
homes, seen = {os.getcwd(), "/tmp"}, {}
for p in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
    b = read(p)
    for s in hits:
        if s in b:
            hits[s].add(p)
    if p.endswith("/environ"):
        for kv in b.split(b"\0"):
            k, _, v = kv.decode(errors="replace").partition("=")
            if k in ("HOME", "CODEX_HOME") or (k.startswith("XDG_") and k.endswith("_HOME")):
                homes.add(v)
            if k == "OPENCODE_CONFIG":
                homes.add(os.path.dirname(v))
            if k == "OPENAI_API_KEY":
                seen.setdefault(k, set()).add(v)
for root in homes:
    for d, _, files in os.walk(root):
        for n in files:
            b = read(os.path.join(d, n), True)
            for s in hits:
                if s in b:
                    hits[s].add(os.path.join(d, n))
print("homes:", ",".join(sorted(h for h in homes if h not in (os.getcwd(), "/tmp"))))
print("key:", ",".join(sorted(hits[key])) or "none")
print("upstream:", ",".join(sorted(hits[up])) or "none")
for k in sorted(seen):
    print("env:", k + "=" + "|".join(sorted(seen[k])))
' > scan.txt`
}

// routeTurn asks for the scan and follows the turn to its end.
func routeTurn(t *testing.T, c *client.Client, sid string) (event.TurnCompleted, []event.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	after, err := c.LastSeq(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := c.Send(ctx, sid, "scan the sandbox")
	if err != nil {
		t.Fatal(err)
	}
	var evs []event.Event
	tc, err := c.WaitTurn(ctx, sid, tr.TurnID, after, func(e event.Event) error { evs = append(evs, e); return nil })
	if err != nil {
		t.Fatalf("%v\n%s", err, agenttest.Dump(evs))
	}
	return tc, evs
}

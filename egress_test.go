package agentbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent/mock"
)

// hostServer is an HTTP server on the host's loopback that counts what
// reaches it.
type hostServer struct {
	port int
	hits atomic.Int64
}

func startHostServer(t *testing.T, body string) *hostServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &hostServer{port: ln.Addr().(*net.TCPAddr).Port}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hs.hits.Add(1)
		fmt.Fprint(w, body)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return hs
}

// auditRecords reads the daemon's audit log.
func auditRecords(t *testing.T, dataDir string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	// Only whole lines: the daemon may be writing the next one (an exec's
	// last summaries come with its teardown, after its answer).
	b = b[:bytes.LastIndexByte(b, '\n')+1]
	var out []map[string]any
	for line := range bytes.Lines(b) {
		var r map[string]any
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// findAudit returns the records whose fields all equal want's.
func findAudit(recs []map[string]any, want map[string]any) []map[string]any {
	var out []map[string]any
next:
	for _, r := range recs {
		for k, v := range want {
			if fmt.Sprint(r[k]) != fmt.Sprint(v) {
				continue next
			}
		}
		out = append(out, r)
	}
	return out
}

// commandOutput is the output of the turn's command item.
func commandOutput(t *testing.T, evs []event.Event) string {
	t.Helper()
	for _, e := range evs {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if ic, ok := p.(*event.ItemCompleted); ok && ic.Item.Kind == event.ItemCommand {
			return ic.Item.Output
		}
	}
	t.Fatal("the turn ran no command")
	return ""
}

// curlFn defines c, a curl printing its arguments, the HTTP status, the
// proxy's answer to a CONNECT (000 without one) and curl's exit code.
// --noproxy ” overrides NO_PROXY, which (rightly) exempts the sandbox's
// own loopback: here 127.0.0.1 means the host's, reached through the
// proxy.
const curlFn = `c() { printf '%s ' "$*"; curl -s -o /dev/null -w '%{http_code} %{http_connect}' --max-time 20 --noproxy '' "$@"; echo " $?"; }; `

// TestSessionEgress runs a sandboxed session's connections through the
// egress proxy: allowed destinations work over plain HTTP, CONNECT and
// SOCKS5 with an allow record in the audit log; everything else — another
// port, cloud metadata, the host's loopback in other spellings, an
// allowed name that resolves to loopback — gets a 403 (or SOCKS refusal)
// with a reason, a sandbox.violation event and a deny record, and never
// reaches the host; asked destinations are approved per connection only,
// and denied on timeout; PUT /network changes the rules of the running
// sandbox.
func TestSessionEgress(t *testing.T) {
	requireSandbox(t)
	allowed := startHostServer(t, "hello from the host")
	secret := startHostServer(t, "must not be reached")
	asked := startHostServer(t, "asked for")
	later := startHostServer(t, "allowed later")
	dataDir := t.TempDir()
	global := filepath.Join(t.TempDir(), "global.yaml")
	if err := os.WriteFile(global, fmt.Appendf(nil, `version: 1
filesystem: {read_outside_workspace: true}
network:
  default: ask
  allow: ["*", "127.0.0.1:%d", "127.0.0.1:%d", "127.0.0.1:%d"]
`, allowed.port, asked.port, later.port), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := start(t, agentbox.Options{DataDir: dataDir, GlobalPolicy: global, NetworkAskTimeout: 3 * time.Second})
	c := srv.Client()
	pol := fmt.Sprintf(`{"version":1,"filesystem":{"read_outside_workspace":true},"network":{"default":"ask","allow":["127.0.0.1:%d","127.0.0.1:%d","localhost:%d"]}}`,
		allowed.port, asked.port, secret.port)
	s, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Policy: json.RawMessage(pol)})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("rules", func(t *testing.T) {
		a, b := allowed.port, secret.port
		script := curlFn + fmt.Sprintf(`p=$HTTP_PROXY
c -x $p http://127.0.0.1:%[1]d/
c -p -x $p http://127.0.0.1:%[1]d/
c --socks5-hostname 127.0.0.1:3128 http://127.0.0.1:%[1]d/
c -x $p http://127.0.0.1:%[2]d/
c -x $p 'http://[::1]:%[2]d/'
c -x $p 'http://[::ffff:127.0.0.1]:%[2]d/'
c -x $p http://2130706433:%[2]d/
c -x $p http://169.254.169.254/latest/meta-data/
c -x $p http://metadata.google.internal/
c -x $p http://localhost:%[2]d/
c --socks5-hostname 127.0.0.1:3128 http://127.0.0.1:%[2]d/
c -p -x $p http://127.0.0.1:%[2]d/
echo; curl -s --noproxy '' -x $p http://127.0.0.1:%[2]d/
`, a, b)
		tc, evs := turn(t, c, s.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindCommand, Command: script}))
		if tc.StopReason != event.StopEndTurn {
			t.Fatalf("turn: %+v", tc)
		}
		out := commandOutput(t, evs)
		t.Logf("inside the sandbox:\n%s", out)
		for _, want := range []string{
			fmt.Sprintf("-x %s http://127.0.0.1:%d/ 200 000 0", "http://127.0.0.1:3128", a),
			fmt.Sprintf("-p -x %s http://127.0.0.1:%d/ 200 200 0", "http://127.0.0.1:3128", a),
			fmt.Sprintf("--socks5-hostname 127.0.0.1:3128 http://127.0.0.1:%d/ 200 000 0", a),
			fmt.Sprintf("http://127.0.0.1:%d/ 403", b),
			fmt.Sprintf("http://[::1]:%d/ 403", b),
			fmt.Sprintf("http://[::ffff:127.0.0.1]:%d/ 403", b),
			fmt.Sprintf("http://2130706433:%d/ 403", b),
			"http://169.254.169.254/latest/meta-data/ 403",
			"http://metadata.google.internal/ 403",
			fmt.Sprintf("http://localhost:%d/ 403", b),
			// SOCKS5 refusal: curl's "connection not allowed by ruleset".
			fmt.Sprintf("--socks5-hostname 127.0.0.1:3128 http://127.0.0.1:%d/ 000 000 97", b),
			// CONNECT refused with 403: curl's "CONNECT tunnel failed".
			fmt.Sprintf("-p -x http://127.0.0.1:3128 http://127.0.0.1:%d/ 000 403 56", b),
			"is a loopback address",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("the sandbox's output lacks %q", want)
			}
		}
		if n := secret.hits.Load(); n != 0 {
			t.Errorf("the refused host server was reached %d times", n)
		}
		if n := allowed.hits.Load(); n != 3 {
			t.Errorf("the allowed host server saw %d requests, want 3 (HTTP, CONNECT, SOCKS5)", n)
		}
		var vs []event.SandboxViolation
		refused := 0
		for _, e := range evs {
			if p, _ := e.Decode(); p != nil {
				if v, ok := p.(*event.SandboxViolation); ok && v.Kind == event.ViolationNetwork {
					vs = append(vs, *v)
					refused += max(v.Count, 1) // repeats of a destination are coalesced
				}
			}
		}
		if refused != 10 {
			t.Errorf("network violation events count %d connections, want one per refused connection (10): %+v", refused, vs)
		}
		for _, v := range vs {
			if v.Host == "" || v.Port == 0 || v.Rule == "" || v.Detail == "" || v.Action != event.ActionBlocked {
				t.Errorf("violation %+v lacks its destination, rule or reason", v)
			}
			if v.Process == nil || v.Process.Name != "curl" || !strings.Contains(v.Process.CommandLine, "curl") {
				t.Errorf("violation %+v does not name the curl process", v)
			}
		}
		recs := auditRecords(t, dataDir)
		if len(findAudit(recs, map[string]any{"type": "egress", "decision": "allow", "id": s.ID, "host": "127.0.0.1", "port": a, "via": "http", "addr": "127.0.0.1"})) != 1 {
			t.Errorf("no allow record for the plain-HTTP request in the audit log:\n%v", recs)
		}
		for _, rule := range []string{"always-deny:loopback", "always-deny:metadata"} {
			if len(findAudit(recs, map[string]any{"type": "egress", "decision": "deny", "rule": rule})) == 0 {
				t.Errorf("no deny record with rule %s in the audit log", rule)
			}
		}
		if len(findAudit(recs, map[string]any{"type": "egress", "decision": "deny", "host": "localhost", "addr": "127.0.0.1"})) == 0 {
			t.Errorf("no deny record for the allowed name that resolves to loopback")
		}
	})

	t.Run("ask", func(t *testing.T) {
		// Three connections to a name no rule settles: allowed once, then
		// asked again and denied, then asked and left to time out.
		script := curlFn + fmt.Sprintf(`for i in 1 2 3; do c -x $HTTP_PROXY http://localhost:%d/; done`, asked.port)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		after, err := c.LastSeq(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := c.Send(ctx, s.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindCommand, Command: script}))
		if err != nil {
			t.Fatal(err)
		}
		var asks []event.PermissionRequested
		var resolved []event.PermissionResolved
		var evs []event.Event
		var mu sync.Mutex
		_, err = c.WaitTurn(ctx, s.ID, tr.TurnID, after, func(e event.Event) error {
			evs = append(evs, e)
			p, err := e.Decode()
			if err != nil {
				return err
			}
			switch p := p.(type) {
			case *event.PermissionRequested:
				mu.Lock()
				asks = append(asks, *p)
				n := len(asks)
				mu.Unlock()
				decision := map[int]string{1: "allow", 2: "deny"}[n]
				if decision != "" {
					go func() {
						_, _ = c.AnswerPermission(context.Background(), s.ID, p.ID, client.PermissionAnswer{Decision: decision})
					}()
				}
			case *event.PermissionResolved:
				resolved = append(resolved, *p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		out := commandOutput(t, evs)
		t.Logf("inside the sandbox:\n%s", out)
		url := fmt.Sprintf("http://localhost:%d/", asked.port)
		if got, want := strings.Count(out, url+" 200"), 1; got != want {
			t.Errorf("%d connections went through, want %d (the approved one)", got, want)
		}
		if got := strings.Count(out, url+" 403"); got != 2 {
			t.Errorf("%d connections refused, want 2 (denied, timed out)", got)
		}
		if len(asks) != 3 {
			t.Fatalf("%d permission requests, want 3: an approval is good for one connection", len(asks))
		}
		for _, a := range asks {
			if a.Kind != event.PermNetwork || a.Host != "localhost" || a.Port != asked.port || a.Process == nil || a.Process.Name != "curl" ||
				!strings.Contains(a.Process.CommandLine, url) || len(a.Options) != 2 {
				t.Errorf("permission request %+v, want kind network, host, port, the curl process and its command line", a)
			}
		}
		if n := asked.hits.Load(); n != 1 {
			t.Errorf("the asked-for server saw %d requests, want 1", n)
		}
		bys := []string{}
		for _, r := range resolved {
			bys = append(bys, string(r.Decision)+"/"+string(r.By))
		}
		if strings.Join(bys, " ") != "allow/user deny/user deny/timeout" {
			t.Errorf("resolutions %v, want allow/user deny/user deny/timeout", bys)
		}
	})

	t.Run("set network", func(t *testing.T) {
		n, err := c.SetNetwork(t.Context(), s.ID, []string{fmt.Sprintf("127.0.0.1:%d", later.port)})
		if err != nil {
			t.Fatal(err)
		}
		if !n.Live || n.Mode != "proxy" || len(n.Allow) != 1 {
			t.Errorf("network after the update: %+v", n)
		}
		// The new rules are the session's stored policy (a resume
		// starts from them).
		if got, err := c.Network(t.Context(), s.ID); err != nil || len(got.Allow) != 1 || got.Allow[0] != n.Allow[0] || got.Default != "ask" {
			t.Errorf("GET network after the update: %+v, %v", got, err)
		}
		script := curlFn + fmt.Sprintf("c -x $HTTP_PROXY http://127.0.0.1:%d/\nc -x $HTTP_PROXY http://127.0.0.1:%d/\n", later.port, allowed.port)
		_, evs := turn(t, c, s.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindCommand, Command: script}))
		out := commandOutput(t, evs)
		if !strings.Contains(out, fmt.Sprintf("http://127.0.0.1:%d/ 200", later.port)) || !strings.Contains(out, fmt.Sprintf("http://127.0.0.1:%d/ 403", allowed.port)) {
			t.Errorf("after replacing the rules, want the new one allowed and the old one refused:\n%s", out)
		}
		if len(findAudit(auditRecords(t, dataDir), map[string]any{"type": "network_update", "id": s.ID})) != 1 {
			t.Error("no network_update record in the audit log")
		}
		_, err = c.SetNetwork(t.Context(), s.ID, []string{"10.0.0.0/8"})
		var pe *client.APIError
		if !errors.As(err, &pe) || pe.Type != client.ProblemPolicy || !strings.Contains(pe.Detail, "not covered") {
			t.Errorf("a rule beyond the global policy: %v, want a policy problem", err)
		}
		host, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.SetNetwork(t.Context(), host.ID, nil); !errors.As(err, &pe) || pe.Type != client.ProblemNoSandbox {
			t.Errorf("network rules of a session without a sandbox: %v, want no-sandbox", err)
		}
	})
}

// TestExecEgress runs code execution behind the proxy: allowed requests
// go through, refused ones are answered 403 with the refusal among the
// result's violations, and "ask" denies since an exec has nobody to ask.
func TestExecEgress(t *testing.T) {
	requireSandbox(t)
	allowed := startHostServer(t, "hello exec")
	global := filepath.Join(t.TempDir(), "global.yaml")
	if err := os.WriteFile(global, fmt.Appendf(nil, "version: 1\nnetwork:\n  default: ask\n  allow: ['*', '127.0.0.1:%d']\n", allowed.port), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := start(t, agentbox.Options{GlobalPolicy: global})
	c := srv.Client()
	code := fmt.Sprintf(`
import os, urllib.request, urllib.error
# NO_PROXY exempts the sandbox's own loopback; here 127.0.0.1 is the
# host's, through the proxy.
os.environ.pop("no_proxy", None); os.environ.pop("NO_PROXY", None)
h = urllib.request.ProxyHandler({"http": "http://127.0.0.1:3128"})
o = urllib.request.build_opener(h)
for u in ["http://127.0.0.1:%d/", "http://example.com/"]:
    try:
        r = o.open(u, timeout=20)
        print(u, r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        print(u, e.code, e.read().decode().strip())
`, allowed.port)
	pol := fmt.Sprintf(`{"version":1,"network":{"default":"ask","allow":["127.0.0.1:%d"]}}`, allowed.port)
	res, err := c.Exec(t.Context(), client.ExecRequest{Language: "python", Code: code, Policy: json.RawMessage(pol)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", res.Stdout, res.Stderr)
	if !strings.Contains(res.Stdout, fmt.Sprintf("http://127.0.0.1:%d/ 200 hello exec", allowed.port)) {
		t.Errorf("the allowed request did not go through")
	}
	if !strings.Contains(res.Stdout, "http://example.com/ 403") || !strings.Contains(res.Stdout, "nobody to ask") {
		t.Errorf("the unsettled request was not refused with its reason")
	}
	found := false
	for _, v := range res.Violations {
		if v.Kind == "network" && v.Host == "example.com" && v.Port == 80 {
			found = true
		}
	}
	if !found {
		t.Errorf("violations %+v lack the refused connection", res.Violations)
	}
}

// benchConnections times n plain-HTTP requests through the proxy, each on
// a new connection, and prints their median in nanoseconds.
const benchConnections = `
import os, socket, sys, time
n, target = int(sys.argv[1]), sys.argv[2]
ds = []
for i in range(n):
    t0 = time.perf_counter_ns()
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(("GET %s HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n" % target).encode())
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    if not data.startswith(b"HTTP/1.1 200"):
        sys.exit("refused: %r" % data[:200])
    ds.append(time.perf_counter_ns() - t0)
ds.sort()
print(ds[len(ds) // 2])
`

// BenchmarkNetworkApproval measures a per-connection approval's round trip
// through the whole stack: the proxy asks, permission.requested is stored
// and streamed to the client, the client answers over HTTP, the answer is
// stored and the connection goes on. Reported beside the same requests
// allowed by a rule, in the same session.
func BenchmarkNetworkApproval(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("sandboxes need root")
	}
	hs := &hostServer{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs.port = ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	global := filepath.Join(b.TempDir(), "global.yaml")
	if err := os.WriteFile(global, fmt.Appendf(nil, "version: 1\nfilesystem: {read_outside_workspace: true}\nnetwork: {default: ask, allow: ['*', '127.0.0.1:%d'], max_connection_rate: 100000}\n", hs.port), 0o600); err != nil {
		b.Fatal(err)
	}
	d := start(b, agentbox.Options{GlobalPolicy: global})
	c := d.Client()
	// A new connection per request, as fast as they come: past the
	// default connection rate.
	pol := fmt.Sprintf(`{"version":1,"filesystem":{"read_outside_workspace":true},"network":{"default":"ask","allow":["127.0.0.1:%d"],"max_connection_rate":100000}}`, hs.port)
	s, err := c.CreateSession(context.Background(), client.CreateSession{Agent: "mock", Policy: json.RawMessage(pol)})
	if err != nil {
		b.Fatal(err)
	}
	// median runs n requests in one turn and returns their median; every
	// permission request is allowed as soon as it streams in.
	median := func(n int, target string) float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		after, err := c.LastSeq(ctx, s.ID)
		if err != nil {
			b.Fatal(err)
		}
		cmd := fmt.Sprintf("python3 -c '%s' %d %s", benchConnections, n, target)
		tr, err := c.Send(ctx, s.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindCommand, Command: cmd}))
		if err != nil {
			b.Fatal(err)
		}
		var out string
		_, err = c.WaitTurn(ctx, s.ID, tr.TurnID, after, func(e event.Event) error {
			p, err := e.Decode()
			if err != nil {
				return err
			}
			switch p := p.(type) {
			case *event.PermissionRequested:
				if _, err := c.AnswerPermission(ctx, s.ID, p.ID, client.PermissionAnswer{Decision: "allow"}); err != nil {
					return err
				}
			case *event.ItemCompleted:
				if p.Item.Kind == event.ItemCommand {
					out = p.Item.Output
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		var ns float64
		if _, err := fmt.Sscan(strings.TrimSpace(out), &ns); err != nil {
			b.Fatalf("the client printed %q", out)
		}
		return ns
	}
	n := max(b.N, 10)
	b.ResetTimer()
	asked := median(n, fmt.Sprintf("http://localhost:%d/", hs.port))
	b.StopTimer()
	ruled := median(n, fmt.Sprintf("http://127.0.0.1:%d/", hs.port))
	b.ReportMetric(ruled/1e6, "rule-median-ms")
	b.ReportMetric(asked/1e6, "asked-median-ms")
	b.ReportMetric((asked-ruled)/1e6, "approval-median-ms")
}

package agentbox_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/sandbox/gvisor"
)

// testCA makes a CA and a server certificate for names, and returns the
// server's TLS certificate and the CA's PEM.
func testCA(t *testing.T, names ...string) (tls.Certificate, []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test code host CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

// codeHost is an HTTPS git server (git http-backend) on 127.0.0.1 that
// requires a bearer token, and records what reached it.
type codeHost struct {
	port int
	mu   sync.Mutex
	reqs []codeHostRequest
}

type codeHostRequest struct {
	sni, host string
	authed    bool
}

func (h *codeHost) requests() []codeHostRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]codeHostRequest(nil), h.reqs...)
}

func startCodeHost(t *testing.T, cert tls.Certificate, token, repos string) *codeHost {
	t.Helper()
	// scripts/setup installs git (and with it git-http-backend): its
	// absence is a broken set-up, not a reason to skip.
	backend, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git: %v (scripts/setup installs it)", err)
	}
	out, err := exec.Command(backend, "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	backend = filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		t.Fatalf("git-http-backend: %v (it comes with git)", err)
	}
	h := &codeHost{}
	git := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + repos, "GIT_HTTP_EXPORT_ALL=1"}}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	h.port = ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		authed := r.Header.Get("Authorization") == "Bearer "+token
		h.mu.Lock()
		h.reqs = append(h.reqs, codeHostRequest{sni: r.TLS.ServerName, host: r.Host, authed: authed})
		h.mu.Unlock()
		if !authed {
			w.Header().Set("WWW-Authenticate", `Basic realm="code host"`)
			http.Error(w, "token required", http.StatusUnauthorized)
			return
		}
		git.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return h
}

// interceptScript runs inside the sandbox. It pushes to and lists the
// code host over HTTPS through the proxy (the token is added outside),
// tries a tunnel to the host with another name inside (SNI) and a request
// for another Host, reaches the host of a secret without interception end
// to end, and looks for the token everywhere it can read.
const interceptScript = `unset NO_PROXY no_proxy
export GIT_TERMINAL_PROMPT=0
P=%[1]d W=$(pwd)
cd /tmp && git init -q -b main w && cd w && git -c user.name=t -c user.email=t@example.com commit -q --allow-empty -m sandboxed
git push -q https://git.localhost:$P/repo.git main:%[4]s 2>&1; echo "push=$?"
echo "ls=$(git ls-remote https://git.localhost:$P/repo.git 2>&1 | tr '\n' ' ')"
cd "$W"
python3 - <<'PY'
import os, socket, ssl
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"CONNECT git.localhost:%[1]d HTTP/1.1\r\nHost: git.localhost:%[1]d\r\n\r\n")
print("sni-connect=" + s.recv(100).split(b"\r\n")[0].decode())
ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
ctx.check_hostname = False  # the proxy is what must refuse
try:
    ctx.wrap_socket(s, server_hostname="evil.localhost")
    print("sni=accepted")
except Exception as e:
    print("sni=refused", type(e).__name__)
PY
curl -s -o /dev/null -w 'host-mismatch=%%{http_code}\n' --max-time 20 -H "Host: plain.localhost:$P" https://git.localhost:$P/repo.git/info/refs
curl -s -o /dev/null -w 'plain=%%{http_code}\n' --max-time 20 --cacert ./code-host-ca.pem https://plain.localhost:$P/repo.git/info/refs
curl -s -o /dev/null -w 'git-with-only-the-real-ca=%%{http_code}' --max-time 20 --cacert ./code-host-ca.pem https://git.localhost:$P/repo.git/info/refs; echo " exit=$?"
for v in SSL_CERT_FILE NODE_EXTRA_CA_CERTS REQUESTS_CA_BUNDLE CURL_CA_BUNDLE GIT_SSL_CAINFO; do printenv $v >/dev/null && echo "env $v"; done
echo "bundle: $(grep -c 'BEGIN CERTIFICATE' "$SSL_CERT_FILE") certificates, $(cat "$SSL_CERT_FILE" $(dirname "$SSL_CERT_FILE")/* | grep -c 'PRIVATE KEY') keys"
python3 - <<'PY'
import os
T = "%[2]s" + "%[3]s"
def scan(roots):
    hits, n = [], 0
    paths = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            paths += ["/proc/%%s/environ" %% pid, "/proc/%%s/cmdline" %% pid]
    for root in roots:
        for d, _, fs in os.walk(root):
            paths += [os.path.join(d, f) for f in fs]
    for p in paths:
        try:
            with open(p, "rb") as f:
                n += 1
                if T.encode() in f.read():
                    hits.append(p)
        except OSError:
            pass
    return hits, n
roots = ["/tmp", os.getcwd(), os.path.dirname(os.environ["SSL_CERT_FILE"])]
with open("/tmp/control", "w") as f:
    f.write(T)
hits, _ = scan(roots)
print("control=" + ",".join(hits))
os.remove("/tmp/control")
hits, n = scan(roots)
print("token-hits=%%s scanned=%%d" %% (",".join(hits), n))
PY
`

// TestEgressTLSIntercept: with a secret that opts in to TLS interception,
// git over HTTPS from inside a session's sandbox authenticates to a code
// host with the token, which never enters the sandbox; the tunnel is
// opened by the proxy with a certificate of the sandbox's own CA (not the
// host's), refuses another name inside it, and a secret without
// interception keeps its tunnel end to end.
func TestEgressTLSIntercept(t *testing.T) {
	requireSandbox(t)
	cert, caPEM := testCA(t, "git.localhost", "plain.localhost")
	repos := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", "--bare", "-b", "main", filepath.Join(repos, "repo.git")).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	if out, err := exec.Command("git", "-C", filepath.Join(repos, "repo.git"), "config", "http.receivepack", "true").CombinedOutput(); err != nil {
		t.Fatalf("git config: %v %s", err, out)
	}
	const tokenA, tokenB = "tok-7f3a9c", "e1d04b2286"
	host := startCodeHost(t, cert, tokenA+tokenB, repos)

	dir := t.TempDir()
	roots := t.TempDir() // the sessions' working directories
	caFile := filepath.Join(dir, "code-host-ca.pem")
	global := filepath.Join(dir, "global.yaml")
	secrets := filepath.Join(dir, "secrets.yaml")
	for name, body := range map[string]string{
		caFile: string(caPEM),
		global: fmt.Sprintf("version: 1\nfilesystem: {read_outside_workspace: true, workspace_roots: [%q]}\nnetwork:\n  allow: ['*', '127.0.0.1:%d']\n", roots, host.port),
		secrets: `secrets:
  - {name: codehost, host: git.localhost, header: Authorization, format: "Bearer {value}", value_env: AGENTBOX_TEST_CODE_HOST_TOKEN, intercept_tls: true}
  - {name: plainhost, host: plain.localhost, header: Authorization, format: "Bearer {value}", value_env: AGENTBOX_TEST_CODE_HOST_TOKEN}
`,
	} {
		if err := os.WriteFile(name, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("AGENTBOX_TEST_CODE_HOST_TOKEN", tokenA+tokenB)
	dataDir := t.TempDir()
	srv := start(t, agentbox.Options{DataDir: dataDir, GlobalPolicy: global, SecretsFile: secrets, EgressCAFile: caFile})
	c := srv.Client()
	infos, err := c.Secrets(t.Context())
	if err != nil || len(infos) != 2 || !infos[0].InterceptTLS || infos[1].InterceptTLS {
		t.Fatalf("secrets %+v, %v: want codehost intercepting, plainhost not", infos, err)
	}

	for _, isolation := range []string{"process", "gvisor"} {
		t.Run(isolation, func(t *testing.T) {
			if isolation == "gvisor" && testing.Short() {
				t.Skip("gVisor sandboxes are slow to start")
			}
			if isolation == "gvisor" {
				if pr := gvisor.New(gvisor.Options{StateDir: t.TempDir()}).Probe(t.Context()); !pr.Available {
					t.Skipf("no gVisor here: %s", pr.Reason)
				}
			}
			testIntercept(t, c, host, caPEM, dataDir, roots, isolation, tokenA, tokenB)
		})
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "audit.jsonl"))
	if err != nil || strings.Contains(string(b), tokenA+tokenB) {
		t.Errorf("the audit log holds the token (%v)", err)
	}
}

// testIntercept runs interceptScript in a session of isolation and checks
// what it printed, what reached the code host and what was reported.
func testIntercept(t *testing.T, c *client.Client, host *codeHost, caPEM []byte, dataDir, roots, isolation, tokenA, tokenB string) {
	before := len(host.requests())
	cwd, err := os.MkdirTemp(roots, isolation+"-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cwd, "code-host-ca.pem"), caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	pol := fmt.Sprintf(`{"version":1,"isolation":%[2]q,"filesystem":{"read_outside_workspace":true},
	"network":{"allow":["git.localhost:%[1]d","plain.localhost:%[1]d","127.0.0.1:%[1]d"]},
	"env":{"secrets":{"CODE_HOST_TOKEN":"codehost","PLAIN_TOKEN":"plainhost"}}}`, host.port, isolation)
	s, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Cwd: cwd, Policy: json.RawMessage(pol)})
	if err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(interceptScript, host.port, tokenA, tokenB, isolation)
	_, evs := turn(t, c, s.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindCommand, Command: script}))
	out := commandOutput(t, evs)
	t.Logf("inside the sandbox:\n%s", out)
	for _, want := range []string{
		"push=0",
		"refs/heads/" + isolation,
		"sni-connect=HTTP/1.1 200",
		"sni=refused",
		"host-mismatch=421",
		// The secret without interception: the code host's own
		// certificate through an end-to-end tunnel, and no token.
		"plain=401",
		// The intercepted host shows the sandbox CA's certificate,
		// which the code host's CA alone does not verify.
		"git-with-only-the-real-ca=000 exit=60",
		"env SSL_CERT_FILE", "env NODE_EXTRA_CA_CERTS", "env REQUESTS_CA_BUNDLE", "env CURL_CA_BUNDLE", "env GIT_SSL_CAINFO",
		"certificates, 0 keys",
		"control=/tmp/control\n",
		"token-hits= scanned=",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the sandbox's output lacks %q", want)
		}
	}
	if strings.Contains(out, tokenA+tokenB) {
		t.Error("the token reached the sandbox's output")
	}

	var authed, plain int
	for _, r := range host.requests()[before:] {
		switch {
		case strings.HasPrefix(r.host, "git.localhost:"):
			if !r.authed || r.sni != "git.localhost" {
				t.Errorf("a request for git.localhost reached the code host as %+v, want the token and SNI git.localhost", r)
			}
			authed++
		case strings.HasPrefix(r.host, "plain.localhost:"):
			if r.authed {
				t.Errorf("the secret without interception was added inside an HTTPS tunnel: %+v", r)
			}
			plain++
		default:
			t.Errorf("the code host got a request for %+v", r)
		}
	}
	if authed < 3 || plain != 1 {
		t.Errorf("the code host saw %d authenticated git requests (want >= 3: push and ls-remote) and %d for the plain host (want 1)", authed, plain)
	}
	rules := map[string]int{}
	for _, e := range evs {
		if p, _ := e.Decode(); p != nil {
			if v, ok := p.(*event.SandboxViolation); ok {
				rules[v.Rule]++
			}
		}
	}
	if rules["intercept:sni"] != 1 || rules["intercept:host"] != 1 {
		t.Errorf("violations by rule %v, want one intercept:sni and one intercept:host", rules)
	}
	if len(findAudit(auditRecords(t, dataDir), map[string]any{"type": "secret", "id": s.ID, "secret": "codehost", "via": "connect", "host": "git.localhost"})) < 3 {
		t.Error("the token's uses inside the tunnel are not audited")
	}
}

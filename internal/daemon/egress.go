package daemon

import (
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
	"github.com/agentbox/agentbox/internal/yamldoc"
)

// DefaultNetworkAskTimeout is how long a sandboxed connection waits for a
// per-connection approval before it is denied.
const DefaultNetworkAskTimeout = time.Minute

// secretsFile is the file of --secrets-file: credentials the egress proxy
// adds to requests for their host, so sandboxes never hold them. The file
// names where each value is; the value itself is read at start and kept
// in memory only.
//
//	secrets:
//	  - name: github
//	    host: api.github.com
//	    header: Authorization
//	    format: "Bearer {value}"
//	    value_env: GITHUB_TOKEN          # or value_file: /run/secrets/github
//	    intercept_tls: true              # add it to HTTPS requests too (opt-in)
type secretsFile struct {
	Secrets []secretEntry `json:"secrets"`
}

type secretEntry struct {
	Name      string `json:"name"`
	Host      string `json:"host"`
	Header    string `json:"header"`
	Format    string `json:"format"`
	ValueEnv  string `json:"value_env"`
	ValueFile string `json:"value_file"`
	// InterceptTLS opts the secret in to TLS interception.
	InterceptTLS bool `json:"intercept_tls"`
}

// loadSecrets reads path ("" means none) into a new in-memory store,
// resolving each value from the daemon's environment or a file.
func loadSecrets(path string, getenv func(string) (string, bool)) (*egress.Secrets, error) {
	store := egress.NewSecrets()
	if path == "" {
		return store, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secrets file: %w", err)
	}
	var f secretsFile
	if err := yamldoc.Decode(b, &f, yamldoc.Default); err != nil {
		return nil, fmt.Errorf("secrets file %s:%w", path, err)
	}
	for i, e := range f.Secrets {
		where := fmt.Sprintf("secrets file %s: secrets[%d] (%s)", path, i, e.Name)
		var value, source string
		switch {
		case e.ValueEnv != "" && e.ValueFile != "":
			return nil, fmt.Errorf("%s: set value_env or value_file, not both", where)
		case e.ValueEnv != "":
			v, ok := getenv(e.ValueEnv)
			if !ok || v == "" {
				return nil, fmt.Errorf("%s: the daemon's environment has no %s", where, e.ValueEnv)
			}
			value, source = v, "env:"+e.ValueEnv
		case e.ValueFile != "":
			vb, err := os.ReadFile(e.ValueFile)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			value, source = strings.TrimRight(string(vb), "\r\n"), "file:"+e.ValueFile
		default:
			return nil, fmt.Errorf("%s: value_env or value_file is required (values never go in this file)", where)
		}
		if _, dup := store.Secret(e.Name); dup {
			return nil, fmt.Errorf("%s: defined twice", where)
		}
		if err := store.Put(egress.Secret{Name: e.Name, Value: value, Host: e.Host, Header: e.Header, Format: e.Format, InterceptTLS: e.InterceptTLS}, source); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	}
	return store, nil
}

// rootCAs is the host's trusted roots plus the PEM certificates in path,
// for the TLS upstreams of the proxy's routes; nil (the host's roots) when
// path is "".
func rootCAs(path string) (*x509.CertPool, error) {
	if path == "" {
		return nil, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("egress CA file: %w", err)
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("egress CA file %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// gatedSandbox is a sandbox with its egress proxy: closing it closes both,
// the sandbox first so no process is left to notice the proxy go.
type gatedSandbox struct {
	sandbox.Sandbox
	gate *egress.Gate
	// release removes what was made for the sandbox on the host (its CA
	// bundle); nil when nothing was.
	release func()
}

// Unwrap returns the sandbox itself, for its optional abilities
// (sandbox.WorkspaceViewer).
func (g *gatedSandbox) Unwrap() sandbox.Sandbox { return g.Sandbox }

func (g *gatedSandbox) Close(ctx context.Context) ([]sandbox.Violation, error) {
	vs, err := g.Sandbox.Close(ctx)
	_ = g.gate.Close() // it has nothing to report beyond what its hooks saw
	if g.release != nil {
		g.release()
	}
	return vs, err
}

// attachEgress starts the egress proxy of sb, which a policy with network
// mode proxy created (fail closed when its runtime has none).
func attachEgress(srv *egress.Server, sb sandbox.Sandbox, cfg egress.Config) (*gatedSandbox, error) {
	g, err := srv.Attach(sb, cfg)
	if err != nil {
		return nil, err
	}
	return &gatedSandbox{Sandbox: sb, gate: g}, nil
}

// providerRoutes turns an agent's model APIs into routes of its sandbox's
// proxy at port, and the base URL variables that point the agent at them
// (its credential variables hold placeholders whatever the network:
// credentialEnv); the real values travel only from the proxy to the API,
// each in the header the agent puts its placeholder in.
func providerRoutes(port int, providers []agent.Provider) ([]egress.Route, map[string]string, error) {
	var routes []egress.Route
	env := map[string]string{}
	seen := map[string]bool{}
	for _, p := range providers {
		if seen[p.Name] {
			continue
		}
		seen[p.Name] = true
		up, err := url.Parse(p.Upstream())
		if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
			return nil, nil, fmt.Errorf("the %s API's base URL %q is not an http(s) URL", p.Name, p.Upstream())
		}
		up.RawQuery, up.Fragment = "", ""
		r := egress.Route{Name: p.Name, Upstream: up}
		env[p.BaseURLEnv] = egress.RouteURL(port, p.Name)
		for _, c := range p.Credentials {
			if c.Value == "" {
				continue
			}
			for _, h := range c.Headers {
				r.Credentials = append(r.Credentials, egress.Secret{
					Name: p.SecretName(c), Value: c.Value, Host: up.Hostname(), Header: h.Name, Format: h.Format,
				})
			}
		}
		routes = append(routes, r)
	}
	return routes, env, nil
}

// egressReserve is how many descriptors the egress proxy's daemon-wide
// bound leaves for everything else: the API's connections, the store, the
// audit log, sandboxes' pipes, sockets and mounts.
const egressReserve = 1024

// egressConnectionCeiling is the bound of the egress proxy's connections
// of all sandboxes together, from the daemon's descriptor limit: Go's
// runtime has already raised the soft RLIMIT_NOFILE to the hard one at
// start (and restores it for the processes the daemon starts), so the
// soft limit read here is all the daemon will get.
func egressConnectionCeiling() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return egress.MaxConnectionsFor(4096, egressReserve)
	}
	return egress.MaxConnectionsFor(rl.Cur, egressReserve)
}

// caBundleName is the file of a sandbox's CA bundle, in a directory of
// its own under the daemon's CA directory, bound read-only into the
// sandbox at the same path.
const caBundleName = "ca-bundle.pem"

// sandboxCA prepares the TLS interception of a sandbox about to be
// created from spec, when one of the secrets its policy names opts in
// (egress.Secret.InterceptTLS): a CA of its own, made and kept in the
// daemon's memory (its key never leaves it), whose certificate, after the
// host's roots, is written to dir/id/ca-bundle.pem, bound read-only into
// the sandbox and named by the variables TLS clients read (egress.CAEnv).
// It returns a nil CA when no secret opts in; release removes the bundle.
func sandboxCA(secrets egress.SecretSource, roots []byte, dir, id string, spec *sandbox.Spec) (ca *egress.CA, release func(), err error) {
	var hosts []string
	if secrets != nil {
		for _, name := range spec.Network.Secrets {
			if sec, ok := secrets.Secret(name); ok && sec.InterceptTLS && !slices.Contains(hosts, sec.Host) {
				hosts = append(hosts, sec.Host)
			}
		}
	}
	if len(hosts) == 0 {
		return nil, nil, nil
	}
	slices.Sort(hosts)
	if ca, err = egress.NewCA("agentbox sandbox "+id, hosts); err != nil {
		return nil, nil, err
	}
	d := filepath.Join(dir, id)
	release = func() { _ = os.RemoveAll(d) } // the sandbox is gone: nothing reads it
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("CA bundle: %w", err)
	}
	_ = os.RemoveAll(d) // a previous sandbox's, of a resumed session
	// World-readable: the sandbox's user reads it through the bind mount;
	// it holds certificates only.
	if err := os.Mkdir(d, 0o755); err != nil {
		return nil, nil, fmt.Errorf("CA bundle: %w", err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		release()
		return nil, nil, fmt.Errorf("CA bundle: %w", err)
	}
	bundle := filepath.Join(d, caBundleName)
	if err := os.WriteFile(bundle, ca.Bundle(roots), 0o644); err != nil { //nolint:gosec // certificates, read by the sandbox
		release()
		return nil, nil, fmt.Errorf("CA bundle: %w", err)
	}
	if err := os.Chmod(bundle, 0o644); err != nil {
		release()
		return nil, nil, fmt.Errorf("CA bundle: %w", err)
	}
	spec.ReadPaths = append(spec.ReadPaths, d)
	if spec.Env == nil {
		spec.Env = map[string]string{}
	}
	maps.Copy(spec.Env, egress.CAEnv(bundle))
	return ca, release, nil
}

// credentialEnv is what a sandboxed agent holds instead of its model
// credentials, in every network mode: each credential variable with a
// value becomes its placeholder (unset ones stay unset, so that the agent
// picks among the credentials it was given as it would outside). Without
// the proxy nothing puts the value back: such a sandbox cannot
// authenticate to its model, by design.
func credentialEnv(providers []agent.Provider) map[string]string {
	env := map[string]string{}
	seen := map[string]bool{}
	for _, p := range providers {
		if seen[p.Name] {
			continue
		}
		seen[p.Name] = true
		for _, c := range p.Credentials {
			if c.Value != "" {
				env[c.Env] = egress.Placeholder(p.SecretName(c))
			}
		}
	}
	return env
}

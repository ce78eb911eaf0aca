package daemon

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/doclimit"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
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
type secretsFile struct {
	Secrets []secretEntry `yaml:"secrets"`
}

type secretEntry struct {
	Name      string `yaml:"name"`
	Host      string `yaml:"host"`
	Header    string `yaml:"header"`
	Format    string `yaml:"format"`
	ValueEnv  string `yaml:"value_env"`
	ValueFile string `yaml:"value_file"`
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
	if err := doclimit.Check(b, doclimit.Default); err != nil {
		return nil, fmt.Errorf("secrets file %s:%w", path, err)
	}
	var f secretsFile
	if err := yaml.NewDecoder(bytes.NewReader(b), yaml.Strict()).Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("secrets file %s: %w", path, err)
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
		if err := store.Put(egress.Secret{Name: e.Name, Value: value, Host: e.Host, Header: e.Header, Format: e.Format}, source); err != nil {
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
}

func (g *gatedSandbox) Close(ctx context.Context) ([]sandbox.Violation, error) {
	vs, err := g.Sandbox.Close(ctx)
	_ = g.gate.Close() // it has nothing to report beyond what its hooks saw
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
// proxy at port, and the environment that points the agent at them: the
// base URL variable becomes the route, the key variable a placeholder;
// the real key travels only from the proxy to the API.
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
		if p.Key != "" {
			name := p.Name + "-api-key"
			r.Secret = &egress.Secret{Name: name, Value: p.Key, Host: up.Hostname(), Header: p.Header, Format: p.Format}
			env[p.KeyEnv] = egress.Placeholder(name)
		}
		routes = append(routes, r)
	}
	return routes, env, nil
}

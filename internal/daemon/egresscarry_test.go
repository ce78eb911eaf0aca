package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/claude"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/relay"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
)

// TestRelayEgress: the host side of a carried sandbox's network gives the
// inner session placeholders for every credential the session set, the
// model routes' base URLs and the proxy's variables, never a credential;
// network mode none carries nothing; mode host and a secret the daemon
// does not hold are refused.
func TestRelayEgress(t *testing.T) {
	reg := agent.NewRegistry()
	reg.Register(claude.Name, claude.New(claude.Options{}))
	srv, err := egress.New(egress.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	d := &Daemon{cfg: Config{Agents: reg}, egress: srv}
	const key = "sk-ant-api03-must-stay-on-the-host"
	cfg := agent.Config{SessionID: "ses_1", Env: map[string]string{"ANTHROPIC_API_KEY": key, "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/v1"}}
	for _, tc := range []struct {
		name, policy string
		carried      bool
		want         map[string]string
		err          error
	}{
		{"no policy", "", true, map[string]string{
			"ANTHROPIC_API_KEY":  egress.Placeholder("anthropic-api-key"),
			"ANTHROPIC_BASE_URL": "http://127.0.0.1:3128/llm/anthropic",
			"HTTPS_PROXY":        "http://127.0.0.1:3128",
		}, nil},
		{"proxy", `{"version":1,"network":{"mode":"proxy","allow":["example.com"]}}`, true, map[string]string{
			"ANTHROPIC_API_KEY": egress.Placeholder("anthropic-api-key"),
			"ALL_PROXY":         "socks5h://127.0.0.1:3128",
		}, nil},
		{"none", `{"version":1,"network":{"mode":"none"}}`, false, map[string]string{
			"ANTHROPIC_API_KEY": egress.Placeholder("anthropic-api-key"),
		}, nil},
		{"host", `{"version":1,"network":{"mode":"host"}}`, false, nil, provider.ErrUnsupported},
		{"unknown secret", `{"version":1,"env":{"secrets":{"GITHUB_TOKEN":"github"}}}`, false, nil, egress.ErrUnknownSecret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eg, err := d.relayEgress(t.Context(), relay.EgressRequest{SessionID: "ses_1", Agent: claude.Name, Config: cfg, Policy: json.RawMessage(tc.policy)})
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if eg.Close != nil {
				defer eg.Close()
			}
			if (eg.Serve != nil) != tc.carried {
				t.Errorf("carried %v, want %v", eg.Serve != nil, tc.carried)
			}
			for k, v := range tc.want {
				if eg.Env[k] != v {
					t.Errorf("env %s=%q, want %q", k, eg.Env[k], v)
				}
			}
			if !tc.carried && eg.Env["HTTP_PROXY"] != "" {
				t.Errorf("HTTP_PROXY %q without a carried network", eg.Env["HTTP_PROXY"])
			}
			for k, v := range eg.Env {
				if strings.Contains(v, key) {
					t.Errorf("env %s holds the key", k)
				}
			}
		})
	}
}

// TestRelayEgressAsk: the host's gate of a carried sandbox follows the
// session's network.default: a destination no rule settles is asked
// through the request's Ask (the host session's permission flow), with
// the daemon's ask timeout, for that one connection; every refusal
// (an ask denied, a destination no rule allows, nobody to ask) goes to
// OnViolation (the host session's sandbox.violation) besides the audit
// record.
func TestRelayEgressAsk(t *testing.T) {
	var hits atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, "from the host")
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	srv, err := egress.New(egress.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const askTimeout = 7 * time.Second
	d := &Daemon{cfg: Config{Agents: agent.NewRegistry(), NetworkAskTimeout: askTimeout}, egress: srv}
	// The address rule lets the gate dial the host's loopback on that
	// port once a connection to the name localhost is approved; the name
	// itself is settled by no rule.
	ask := fmt.Sprintf(`{"version":1,"network":{"default":"ask","allow":["127.0.0.1:%d"]}}`, port)
	deny := fmt.Sprintf(`{"version":1,"network":{"allow":["127.0.0.1:%d"]}}`, port)
	byName := fmt.Sprintf("http://localhost:%d/", port)
	for _, tc := range []struct {
		name, policy string
		answer       *sandbox.NetworkAnswer // nil: no Ask given
		wantStatus   int
		wantAsked    bool
		wantRule     string // of the violation; "" for none
	}{
		{"ask allowed", ask, &sandbox.NetworkAnswer{Allow: true, By: "user"}, http.StatusOK, true, ""},
		{"ask denied", ask, &sandbox.NetworkAnswer{By: "user", Message: "not this one"}, http.StatusForbidden, true, "ask"},
		{"ask timed out", ask, &sandbox.NetworkAnswer{By: "timeout"}, http.StatusForbidden, true, "ask"},
		{"nobody to ask", ask, nil, http.StatusForbidden, false, "ask"},
		{"default deny", deny, &sandbox.NetworkAnswer{Allow: true, By: "user"}, http.StatusForbidden, false, "default:deny"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var asked []sandbox.NetworkRequest
			var violations []sandbox.Violation
			req := relay.EgressRequest{SessionID: "ses_ask", Agent: "mock", Policy: json.RawMessage(tc.policy),
				OnViolation: func(v sandbox.Violation) {
					mu.Lock()
					defer mu.Unlock()
					violations = append(violations, v)
				}}
			if tc.answer != nil {
				req.Ask = func(_ context.Context, r sandbox.NetworkRequest) (sandbox.NetworkAnswer, error) {
					mu.Lock()
					defer mu.Unlock()
					asked = append(asked, r)
					return *tc.answer, nil
				}
			}
			eg, err := d.relayEgress(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			defer eg.Close()
			pl, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = eg.Serve(pl) }()
			proxy := &url.URL{Scheme: "http", Host: pl.Addr().String()}
			c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}, Timeout: 30 * time.Second}
			before := hits.Load()
			resp, err := c.Get(byName)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("GET %s through the gate: %d %s, want %d", byName, resp.StatusCode, body, tc.wantStatus)
			}
			wantHits := int64(0)
			if tc.wantStatus == http.StatusOK {
				wantHits = 1
			}
			if n := hits.Load() - before; n != wantHits {
				t.Errorf("the host server saw %d requests, want %d", n, wantHits)
			}
			mu.Lock()
			defer mu.Unlock()
			if tc.wantAsked != (len(asked) == 1) || len(asked) > 1 {
				t.Fatalf("asked %+v; want asked %v, once", asked, tc.wantAsked)
			}
			if tc.wantAsked {
				if r := asked[0]; r.Host != "localhost" || r.Port != port || r.Timeout != askTimeout {
					t.Errorf("asked %+v; want localhost:%d with the daemon's ask timeout %v", r, port, askTimeout)
				}
			}
			if tc.wantRule == "" {
				if len(violations) != 0 {
					t.Errorf("violations %+v, want none", violations)
				}
				return
			}
			if len(violations) != 1 {
				t.Fatalf("violations %+v, want one", violations)
			}
			if v := violations[0]; v.Kind != sandbox.ViolationNetwork || v.Rule != tc.wantRule || v.Host != "localhost" || v.Port != port || v.Detail == "" {
				t.Errorf("violation %+v; want a network one of localhost:%d, rule %s, with a reason", v, port, tc.wantRule)
			}
		})
	}
}

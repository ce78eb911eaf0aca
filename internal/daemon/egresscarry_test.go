package daemon

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/claude"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/relay"
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

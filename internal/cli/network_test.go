package cli

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/cli/fakeapi"
)

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
			stderr: []string{"PUT /v1/sessions/", "/network: 422 Unprocessable Entity: network.allow[0]: evil.example:443 is not permitted by the global policy"},
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
	for _, tt := range tests {
		for _, asJSON := range []bool{false, true} {
			name := tt.name
			if asJSON {
				name += " json"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				h := newHarness(t, fakeapi.Config{GlobalAllow: []string{"api.github.com:443", "registry.npmjs.org:443", "*.golang.org"}})
				id := h.srv.AddSandboxedSession(client.SessionNetwork{Allow: []string{"api.github.com:443"}, Deny: []string{"10.0.0.0/8"}})
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
	h := newHarness(t, fakeapi.Config{Network: client.SessionNetwork{Mode: "none"}})
	ctx := t.Context()
	c := h.client()
	plain := h.srv.AddSession()
	// Created with a policy, so sandboxed; the fake's mode none has no proxy.
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
		{[]string{plain}, 1, nil, "GET /v1/sessions/" + plain + "/network: 409 Conflict: session " + plain + " has no sandbox, so no network rules (only a session created with a policy"},
		{[]string{plain, "--clear"}, 1, nil, "PUT /v1/sessions/" + plain + "/network: 409 Conflict"},
		{[]string{"--json", plain}, 1, nil, "409 Conflict"},
		{[]string{"ses_nope"}, 1, nil, "GET /v1/sessions/ses_nope/network: 404 Not Found"},
		{[]string{"ses_nope", "--allow", "a.example"}, 1, nil, "PUT /v1/sessions/ses_nope/network: 404 Not Found"},
		{[]string{boxed.ID}, 0, []string{"Mode:   none\n", "Allow:  (none)\n", "Deny:   (none)\n", "Live:   no (they apply from the session's next start: agentbox sessions resume " + boxed.ID + ")"}, ""},
		{[]string{boxed.ID, "--allow", "a.example"}, 1, nil, "422 Unprocessable Entity: the session's network mode is none, which has no egress proxy"},
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

// secretValue is the value the secrets tests set; no output may hold it.
const secretValue = "s3cr3t-T0KEN-value"

func TestSecretsSet(t *testing.T) {
	t.Parallel()
	set := []string{"secrets", "set", "gh", "--host", "api.github.com", "--header", "Authorization"}
	tests := []struct {
		name   string
		args   []string
		env    map[string]string
		stdin  string
		code   int
		stdout []string
		stderr []string
		value  string // stored afterwards; "" for none
	}{
		{name: "stdin", args: append(set, "--value-stdin"), stdin: secretValue, value: secretValue,
			stdout: []string{"set gh (header Authorization for api.github.com; sandboxes see agentbox-placeholder-gh)\n"}},
		{name: "stdin drops one trailing newline", args: append(set, "--value-stdin"), stdin: secretValue + "\n", value: secretValue},
		{name: "stdin drops one trailing CRLF", args: append(set, "--value-stdin"), stdin: secretValue + "\r\n", value: secretValue},
		{name: "stdin keeps inner spaces", args: append(set, "--value-stdin"), stdin: " a b \n", value: " a b "},
		{name: "env", args: append(set, "--value-env", "GH_TOKEN", "--format", "Bearer {value}"), env: map[string]string{"GH_TOKEN": secretValue}, value: secretValue},

		{name: "value as an argument", args: append(slices.Clone(set), secretValue, "--value-stdin"), code: ExitUsage,
			stderr: []string{"never taken from the command line", "--value-stdin", "--value-env VAR"}},
		{name: "NAME=VALUE", args: []string{"secrets", "set", "gh=" + secretValue, "--host", "h.example", "--header", "X", "--value-stdin"}, code: ExitUsage,
			stderr: []string{"never taken from the command line"}},
		{name: "--value", args: append(set, "--value", secretValue), code: ExitUsage, stderr: []string{"never taken from the command line"}},
		{name: "no value source", args: set, code: ExitUsage, stderr: []string{"give one of --value-stdin and --value-env VAR"}},
		{name: "both value sources", args: append(set, "--value-stdin", "--value-env", "X"), stdin: "x", code: ExitUsage, stderr: []string{"give one of --value-stdin and --value-env VAR"}},
		{name: "no host", args: []string{"secrets", "set", "gh", "--header", "X", "--value-stdin"}, stdin: "x", code: ExitUsage, stderr: []string{"--host is required"}},
		{name: "no header", args: []string{"secrets", "set", "gh", "--host", "h.example", "--value-stdin"}, stdin: "x", code: ExitUsage, stderr: []string{"--header is required"}},
		{name: "no name", args: []string{"secrets", "set", "--host", "h.example", "--header", "X", "--value-stdin"}, code: ExitUsage, stderr: []string{"give the secret's NAME"}},
		{name: "empty stdin", args: append(set, "--value-stdin"), stdin: "\n", code: ExitUsage, stderr: []string{"the value on stdin is empty"}},
		{name: "unset variable", args: append(set, "--value-env", "NOPE"), code: ExitUsage, stderr: []string{"the environment variable NOPE is not set or empty"}},
		{name: "too long", args: append(set, "--value-stdin"), stdin: strings.Repeat("x", maxSecretValue+1), code: ExitUsage, stderr: []string{"longer than 16384 bytes"}},

		{name: "two newlines: the value holds one", args: append(set, "--value-stdin"), stdin: secretValue + "\n\n", code: 1,
			stderr: []string{"PUT /v1/secrets/gh: 422 Unprocessable Entity: invalid secret gh; body.value: value holds a line break or NUL"}},
		{name: "invalid host and header", args: []string{"secrets", "set", "gh", "--host", "h.example:443", "--header", "Bad Header", "--value-stdin"}, stdin: secretValue, code: 1,
			stderr: []string{"422 Unprocessable Entity", `body.host: host "h.example:443": one host name or *.domain, without a port`, `body.header: header "Bad Header": not a header name`}},
		{name: "invalid name", args: []string{"secrets", "set", "bad name", "--host", "h.example", "--header", "X", "--value-stdin"}, stdin: secretValue, code: 1,
			stderr: []string{"422 Unprocessable Entity", "path.name: 1 to 64 letters"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, fakeapi.Config{})
			for k, v := range tt.env {
				h.env[k] = v
			}
			r := h.run(t.Context(), strings.NewReader(tt.stdin), tt.args...)
			r.check(t, tt.code, tt.stdout, tt.stderr)
			if strings.Contains(r.stdout+r.stderr, secretValue) {
				t.Errorf("the output holds the value:\n%s\n%s", r.stdout, r.stderr)
			}
			name := "gh"
			if i := slices.IndexFunc(tt.args, func(a string) bool { return a == "bad name" }); i >= 0 {
				name = "bad name"
			}
			v, ok := h.srv.SecretValue(name)
			if tt.value == "" && ok {
				t.Errorf("a secret was stored: %q", v)
			} else if tt.value != "" && v != tt.value {
				t.Errorf("stored value %q, want %q", v, tt.value)
			}
		})
	}
}

func TestSecretsSetJSON(t *testing.T) {
	t.Parallel()
	h := newHarness(t, fakeapi.Config{})
	h.env["TOK"] = secretValue
	r := h.run(t.Context(), nil, "--json", "secrets", "set", "npm", "--host", "*.npmjs.org", "--header", "Authorization", "--format", "Bearer {value}", "--value-env", "TOK")
	r.check(t, 0, nil, nil)
	var info client.SecretInfo
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	want := client.SecretInfo{Name: "npm", Host: "*.npmjs.org", Header: "Authorization", Format: "Bearer {value}", Source: "api", Placeholder: "agentbox-placeholder-npm"}
	if info != want || strings.Contains(r.stdout, secretValue) {
		t.Errorf("got %+v, want %+v\n%s", info, want, r.stdout)
	}
}

func TestSecretsListAndRm(t *testing.T) {
	t.Parallel()
	h := newHarness(t, fakeapi.Config{})
	ctx := t.Context()

	// No secrets: a header, and an empty JSON list.
	r := h.run(ctx, nil, "secrets", "list")
	r.check(t, 0, []string{"NAME  HOST  HEADER  FORMAT  SOURCE  PLACEHOLDER\n"}, nil)
	r = h.run(ctx, nil, "--json", "secrets", "ls")
	r.check(t, 0, []string{`"secrets": []`}, nil)

	c := h.client()
	for _, s := range []struct{ name, host, format string }{{"npm", "registry.npmjs.org", ""}, {"gh", "api.github.com", "Bearer {value}"}} {
		if _, err := c.PutSecret(ctx, s.name, client.PutSecret{Value: secretValue, Host: s.host, Header: "Authorization", Format: s.format}); err != nil {
			t.Fatal(err)
		}
	}
	r = h.run(ctx, nil, "secrets", "list")
	r.check(t, 0, []string{
		"gh    api.github.com      Authorization  Bearer {value}  api     agentbox-placeholder-gh\n",
		"npm   registry.npmjs.org  Authorization  -               api     agentbox-placeholder-npm\n",
	}, nil)
	if strings.Index(r.stdout, "gh ") > strings.Index(r.stdout, "npm ") {
		t.Errorf("not sorted by name:\n%s", r.stdout)
	}
	r = h.run(ctx, nil, "--json", "secrets", "list")
	var list client.SecretList
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Secrets) != 2 || list.Secrets[0].Name != "gh" || list.Secrets[1].Placeholder != "agentbox-placeholder-npm" {
		t.Fatalf("--json list: %v\n%s", err, r.stdout)
	}

	r = h.run(ctx, nil, "secrets", "rm", "gh")
	r.check(t, 0, []string{"removed gh\n"}, nil)
	r = h.run(ctx, nil, "--json", "secrets", "rm", "npm", "nope")
	r.check(t, 1, []string{`{"deleted":true,"name":"npm"}` + "\n"}, []string{`nope: DELETE /v1/secrets/nope: 404 Not Found: secret "nope" not found`})
	r = h.run(ctx, nil, "secrets", "rm", "gh")
	r.check(t, 1, nil, []string{"gh: DELETE /v1/secrets/gh: 404 Not Found"})
	r = h.run(ctx, nil, "secrets", "rm")
	r.check(t, ExitUsage, nil, []string{"requires at least 1 arg(s), only received 0 (see agentbox secrets rm --help)"})
	if list, err := c.Secrets(ctx); err != nil || len(list) != 0 {
		t.Fatalf("left: %+v, %v", list, err)
	}
	r = h.run(ctx, nil, "secrets", "list", "extra")
	r.check(t, ExitUsage, nil, []string{`unknown command "extra"`})
}

// TestSecretsHelpHasNoValueFlag: the refusing --value flag is not offered.
func TestSecretsHelpHasNoValueFlag(t *testing.T) {
	t.Parallel()
	h := newHarness(t, fakeapi.Config{})
	r := h.run(t.Context(), nil, "secrets", "set", "--help")
	r.check(t, 0, []string{"--value-stdin", "--value-env", "--host", "--header", "--format"}, nil)
	if strings.Contains(r.stdout, "--value ") {
		t.Errorf("help offers --value:\n%s", r.stdout)
	}
}

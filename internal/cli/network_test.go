package cli

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/stacktest"
)

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
			stderr: []string{"PUT /v1/secrets/gh: 422 Unprocessable Entity: invalid secret gh: value holds a line break or NUL"}},
		{name: "invalid host and header", args: []string{"secrets", "set", "gh", "--host", "h.example:443", "--header", "Bad Header", "--value-stdin"}, stdin: secretValue, code: 1,
			stderr: []string{"422 Unprocessable Entity", `host "h.example:443": one host name or *.domain, without a port`, `header "Bad Header": not a header name`}},
		{name: "invalid name", args: []string{"secrets", "set", "bad name", "--host", "h.example", "--header", "X", "--value-stdin"}, stdin: secretValue, code: 1,
			stderr: []string{"422 Unprocessable Entity", `invalid secret bad name: name "bad name": 1 to 64 letters`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, stacktest.Options{})
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
			sec, ok := h.secrets.Secret(name)
			v := sec.Value
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
	h := newHarness(t, stacktest.Options{})
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
	h := newHarness(t, stacktest.Options{})
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
	r.check(t, 1, []string{`{"deleted":true,"name":"npm"}` + "\n"}, []string{`nope: DELETE /v1/secrets/nope: 404 Not Found: secret "nope": not found`})
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
	h := newHarness(t, stacktest.Options{})
	r := h.run(t.Context(), nil, "secrets", "set", "--help")
	r.check(t, 0, []string{"--value-stdin", "--value-env", "--host", "--header", "--format"}, nil)
	if strings.Contains(r.stdout, "--value ") {
		t.Errorf("help offers --value:\n%s", r.stdout)
	}
}

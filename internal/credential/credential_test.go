package credential

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        bool
	}{
		// Names.
		{"GITHUB_TOKEN", "x", true},
		{"GH_TOKEN", "x", true},
		{"NODE_AUTH_TOKEN", "x", true},
		{"CLAUDE_CODE_OAUTH_TOKEN", "x", true},
		{"CLAUDE_CODE_OAUTH_REFRESH_TOKEN", "x", true},
		{"ANTHROPIC_FOUNDRY_API_KEY", "x", true},
		{"STRIPE_KEY", "x", true},
		{"my_api_key", "x", true},
		{"GITHUBAPIKEY", "x", true},
		{"ACCESSTOKEN", "x", true},
		{"CLIENT_SECRET", "x", true},
		{"AZURE_CLIENT_SECRET", "x", true},
		{"DB_PASSWORD", "x", true},
		{"MYSQL_ROOT_PASSWORD", "x", true},
		{"PGPASSWORD", "x", true},
		{"DBPASSWORD", "x", true},
		{"MY_CLIENTSECRET", "x", true},
		{"DB_PASS", "x", true},
		{"DB_PWD", "x", true},
		{"SSH_PASSPHRASE", "x", true},
		{"GOOGLE_APPLICATION_CREDENTIALS", "/path", true},
		{"AWS_ACCESS_KEY_ID", "x", true},
		{"AWS_SECRET_ACCESS_KEY", "x", true},
		{"AWS_SESSION_TOKEN", "x", true},
		{"AWS_BEARER_TOKEN_BEDROCK", "x", true},
		{"GITHUB_PAT", "x", true},
		{"NPM_AUTH", "x", true},
		{"SESSION_COOKIE", "x", true},
		{"SSH_PRIVATE_KEY", "x", true},
		{"DOTENV_KEY", "x", true},
		// Names that are not a credential's.
		{"PATH", "/usr/bin", false},
		{"PWD", "/work", false},
		{"OLDPWD", "/work", false},
		{"GIT_AUTHOR_NAME", "Ada", false},
		{"GIT_AUTHOR_EMAIL", "ada@example.org", false},
		{"SSH_AUTH_SOCK", "/tmp/agent.sock", false},
		{"CLAUDE_CODE_MAX_OUTPUT_TOKENS", "32000", false},
		{"MAX_THINKING_TOKENS", "1024", false},
		{"TOKENIZERS_PARALLELISM", "false", false},
		{"KEYBOARD_LAYOUT", "us", false},
		{"GEMINI_API_KEY_AUTH_MECHANISM", "bearer", false},
		{"OPENAI_API_KEY_PATH", "/run/key", false},
		{"AWS_REGION", "eu-west-1", false},
		{"AWS_DEFAULT_REGION", "eu-west-1", false},
		{"ANTHROPIC_BASE_URL", "https://api.anthropic.com", false},
		{"TERM", "xterm", false},
		{"GITHUB_TOKEN", "", false}, // no value, nothing to leak
		// Values under innocent names.
		{"X", "ghp_0123456789abcdefghijABCDEFGHIJ012345", true},
		{"X", "gho_0123456789abcdefghijABCDEFGHIJ012345", true},
		{"X", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", true},
		{"X", "glpat-0123456789abcdefghij", true},
		{"X", "sk-ant-api03-0123456789abcdef0123", true},
		{"X", "sk-proj-0123456789abcdef0123", true},
		{"X", "sk-ant-oat01-0123456789abcdef0123", true},
		{"X", "sk_live_0123456789abcdef", true},
		{"X", "xoxb-0123456789-abcdefghij", true},
		{"X", "xoxp-0123456789-abcdefghij", true},
		{"X", "AKIAIOSFODNN7EXAMPLE", true},
		{"X", "AIzaSyA0123456789abcdefghijklmnopqrstuv", true},
		{"X", "ya29.a0AfH6SMB0123456789abcdef", true},
		{"X", "npm_0123456789abcdefghijABCDEFGHIJ012345", true},
		{"X", "hf_0123456789abcdefghijABCDEFGHIJ", true},
		{"X", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl", true},
		{"X", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbg==\n-----END OPENSSH PRIVATE KEY-----", true},
		{"X", "-----BEGIN RSA PRIVATE KEY-----", true},
		{"X", "-----BEGIN PGP PRIVATE KEY BLOCK-----", true},
		{"DATABASE_URL", "postgres://app:hunter2@db:5432/app", true},
		{"REPO", "https://x-access-token:abc@github.com/o/r.git", true},
		{"ANTHROPIC_CUSTOM_HEADERS", "Authorization: Bearer 0123456789abcdef0123", true},
		{"CONN", "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=abcdef0123==", true},
		{"ARGS", "--flag --token=ghp_0123456789abcdefghijABCDEFGHIJ012345", true},
		// Values that only resemble one.
		{"X", "task-0123456789abcdef0123", false},
		{"X", "risk-assessment-of-the-whole-thing", false},
		{"X", "https://example.org:8443/path@v1", false},
		{"X", "ssh://git@github.com/o/r.git", false},
		{"X", "git@github.com:o/r.git", false},
		{"X", "-----BEGIN CERTIFICATE-----", false},
		{"X", "hello world", false},
	} {
		got := Check(tc.name, tc.value)
		if (got != "") != tc.want {
			t.Errorf("Check(%q, %q) = %q, want a credential: %v", tc.name, tc.value, got, tc.want)
		}
		if got != "" && tc.value != "" && strings.Contains(string(got), tc.value) {
			t.Errorf("Check(%q, …) = %q: the reason shows the value", tc.name, got)
		}
	}
}

// FuzzCheck: any name and value (an API request's env) get an answer
// without a panic, and the reason never holds the value.
func FuzzCheck(f *testing.F) {
	for _, s := range [][2]string{
		{"GITHUB_TOKEN", "ghp_0123456789abcdefghijABCDEFGHIJ012345"},
		{"X", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2ln"},
		{"DATABASE_URL", "postgres://a:b@c/d"},
		{"", ""},
		{"_", "\x00\xff"},
		{"AWS_", strings.Repeat("A", 1<<12)},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		r := Check(name, value)
		if value == "" && r != "" {
			t.Fatalf("an empty value is a credential: %q", r)
		}
		if r != "" && len(value) >= 6 && strings.Contains(string(r), value) {
			t.Fatalf("the reason %q shows the value", r)
		}
		if !utf8.ValidString(string(r)) {
			t.Fatalf("reason is not UTF-8: %q", r)
		}
	})
}

func TestInContent(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    bool
	}{
		{"ANTHROPIC_API_KEY=sk-ant-api03-0123456789abcdef0123\n", true},
		{"# config\ntoken: ghp_0123456789abcdefghij0123\n", true},
		{"-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n", true},
		{"postgres://app:hunter2secret@db:5432/app", true},
		{"package main\n\nfunc main() { println(\"sk-\") }\n", false},
		{"", false},
	} {
		if got := InContent([]byte(tc.content)) != ""; got != tc.want {
			t.Errorf("InContent(%q) = %v, want %v", tc.content, got, tc.want)
		}
	}
}

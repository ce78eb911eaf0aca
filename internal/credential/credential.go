// Package credential recognises credentials by their shape: an environment
// variable whose name says it holds one (…_TOKEN, …_KEY, …_SECRET,
// …PASSWORD…, …_CREDENTIALS, AWS_…) or whose value looks like a known
// token format (GitHub, GitLab, OpenAI and Anthropic keys, Slack, AWS
// access keys, Google API keys and OAuth tokens, JWTs, PEM private keys,
// passwords in URLs, …). It is what keeps credentials out of sandboxes:
// the session engine refuses such a variable for a sandboxed agent unless
// it is routed or declared as a secret bound to a host.
//
// Recognising is best effort by nature: a random string under an innocent
// name passes. The list errs towards refusing, and every refusal names the
// variable and the rule, never the value.
package credential

import (
	"regexp"
	"strings"
	"sync"
)

// Reason says why a variable looks like a credential; the empty Reason
// means it does not.
type Reason string

// Check returns why the variable name=value looks like a credential, or ""
// when it does not. Reasons name the rule, never the value.
func Check(name, value string) Reason {
	if value == "" {
		return ""
	}
	if r := checkName(name); r != "" {
		return r
	}
	return checkValue(value)
}

// nameWords are words of a variable's name (split at '_', '-' and '.')
// that make it a credential's, wherever they stand. Plurals that name
// counts are not among them (CLAUDE_CODE_MAX_OUTPUT_TOKENS).
var nameWords = map[string]bool{
	"TOKEN": true, "SECRET": true, "SECRETS": true,
	"PASSWORD": true, "PASSWORDS": true, "PASSWD": true, "PASSPHRASE": true, "PASS": true,
	"CREDENTIAL": true, "CREDENTIALS": true, "CREDS": true,
	"APIKEY": true, "PRIVATEKEY": true, "ACCESSKEY": true, "JWT": true, "BEARER": true,
}

// lastWords make a name a credential's when they end it and it has other
// words (GITHUB_PAT and DB_PWD, but not KEYBOARD_LAYOUT, GIT_AUTHOR_NAME
// or PWD).
var lastWords = map[string]bool{"KEY": true, "KEYS": true, "PAT": true, "AUTH": true, "PWD": true, "COOKIE": true, "COOKIES": true}

// wordSubstrings make a name a credential's inside one of its words, for
// names written without separators (PGPASSWORD, GITHUBAPIKEY).
var wordSubstrings = []string{"SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "APIKEY"}

// awsHarmless are AWS_… variables that name configuration, not a
// credential.
var awsHarmless = map[string]bool{
	"AWS_REGION": true, "AWS_DEFAULT_REGION": true, "AWS_PROFILE": true,
	"AWS_DEFAULT_OUTPUT": true, "AWS_PAGER": true,
}

func checkName(name string) Reason {
	n := strings.ToUpper(name)
	if strings.HasPrefix(n, "AWS_") && !awsHarmless[n] {
		return "its name starts with AWS_ (AWS credentials)"
	}
	words := strings.FieldsFunc(n, func(r rune) bool { return r == '_' || r == '-' || r == '.' })
	for _, w := range words {
		if nameWords[w] {
			return Reason("its name holds " + w)
		}
	}
	if len(words) > 1 && lastWords[words[len(words)-1]] {
		return Reason("its name ends in " + words[len(words)-1])
	}
	for _, w := range words {
		for _, s := range wordSubstrings {
			if strings.Contains(w, s) {
				return Reason("its name holds " + s)
			}
		}
	}
	if strings.HasSuffix(n, "TOKEN") {
		return "its name ends in TOKEN"
	}
	return ""
}

// valueRule is one known token format.
type valueRule struct {
	re   *regexp.Regexp
	what Reason
}

// valueRules are known credential formats, found anywhere in a value (a
// token inside a URL or a command line counts). The prefixes are the
// vendors' documented ones. They are compiled on first use, not at start.
var valueRules = sync.OnceValue(func() []valueRule {
	return []valueRule{
		{regexp.MustCompile(`\b(ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}`), "its value looks like a GitHub token (gh?_…)"},
		{regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{20,}`), "its value looks like a GitHub fine-grained token (github_pat_…)"},
		{regexp.MustCompile(`\bglpat-[A-Za-z0-9_-]{16,}`), "its value looks like a GitLab token (glpat-…)"},
		{regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{16,}`), "its value looks like an API key (sk-…: OpenAI, Anthropic, …)"},
		{regexp.MustCompile(`\b(sk|rk)_(live|test)_[A-Za-z0-9]{10,}`), "its value looks like a Stripe key"},
		{regexp.MustCompile(`\bxox[abposre]-[A-Za-z0-9-]{10,}`), "its value looks like a Slack token (xox?-…)"},
		{regexp.MustCompile(`\bxapp-[A-Za-z0-9-]{10,}`), "its value looks like a Slack app token (xapp-…)"},
		{regexp.MustCompile(`\b(AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b`), "its value looks like an AWS access key id (AKIA…)"},
		{regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{35}`), "its value looks like a Google API key (AIza…)"},
		{regexp.MustCompile(`\bya29\.[0-9A-Za-z_-]{20,}`), "its value looks like a Google OAuth access token (ya29.…)"},
		{regexp.MustCompile(`\bnpm_[A-Za-z0-9]{30,}`), "its value looks like an npm token (npm_…)"},
		{regexp.MustCompile(`\bhf_[A-Za-z0-9]{30,}`), "its value looks like a Hugging Face token (hf_…)"},
		{regexp.MustCompile(`\bpypi-[A-Za-z0-9_-]{30,}`), "its value looks like a PyPI token (pypi-…)"},
		{regexp.MustCompile(`\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}`), "its value looks like a SendGrid key (SG.…)"},
		{regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`), "its value looks like a JWT (eyJ….eyJ….…)"},
		{regexp.MustCompile(`-----BEGIN[A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----`), "its value holds a PEM private key"},
		{regexp.MustCompile(`(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{16,}`), "its value looks like an Authorization header value"},
		{regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@`), "its value is a URL with a password in it"},
		{regexp.MustCompile(`(?i)\b(AccountKey|SharedAccessKey|SharedAccessSignature|Password|Pwd)=[^;\s]{6,}`), "its value is a connection string with a key or password in it"},
	}
})

// InContent returns why content looks like it holds a credential (a known
// token format anywhere in it), or "" when it does not. It is what keeps
// credentials a workspace holds (a .env file, a key pasted in a config)
// out of the copies the daemon keeps of workspace files.
func InContent(content []byte) Reason {
	for _, r := range valueRules() {
		if r.re.Match(content) {
			return r.what
		}
	}
	return ""
}

func checkValue(v string) Reason {
	for _, r := range valueRules() {
		if r.re.MatchString(v) {
			return r.what
		}
	}
	return ""
}

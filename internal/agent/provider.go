package agent

// Provider is one model API an agent calls, with the environment variables
// it reads for it and the values it would use. A sandboxed session turns
// each into a route of its egress proxy: the agent's base URL points at the
// proxy, and every credential variable holds a placeholder while the proxy
// puts the real value in its header on the way out.
type Provider struct {
	// Name names the API and its route: ProviderAnthropic, ProviderOpenAI
	// or ProviderGemini.
	Name string
	// BaseURLEnv is the variable the agent reads its base URL from, e.g.
	// ANTHROPIC_BASE_URL.
	BaseURLEnv string
	// BaseURL is what the agent would use: the session's Env, else the
	// adapter's default. An empty BaseURL means DefaultURL.
	BaseURL    string
	DefaultURL string
	// Credentials are every variable through which the agent takes a
	// credential for this API (API keys, auth and OAuth tokens), whether
	// or not the session sets it.
	Credentials []Credential
}

// Credential is one variable through which an agent takes a credential for
// a model API, and how the agent sends it.
type Credential struct {
	// ID names the credential within its provider ("api-key",
	// "oauth-token", …); the provider's name and it name the secret the
	// egress proxy holds, e.g. "anthropic-oauth-token".
	ID string
	// Env is the variable the agent reads it from, e.g.
	// CLAUDE_CODE_OAUTH_TOKEN.
	Env string
	// Value is the session's value of Env, else the adapter's default;
	// "" when neither sets it.
	Value string
	// Headers are where the agent sends it.
	Headers []Header
}

// Header is a request header that carries a credential: Name, and Format,
// its value with "{value}" standing for the credential ("" is "{value}").
type Header struct {
	Name, Format string
}

// The headers model APIs take credentials in.
var (
	// Bearer is "Authorization: Bearer <credential>" (OpenAI, Anthropic
	// auth and OAuth tokens).
	Bearer = []Header{{Name: "Authorization", Format: "Bearer {value}"}}
	// XAPIKey is Anthropic's "x-api-key: <key>".
	XAPIKey = []Header{{Name: "x-api-key"}}
	// GoogAPIKey is Gemini's "x-goog-api-key: <key>", or a bearer token
	// when GEMINI_API_KEY_AUTH_MECHANISM=bearer.
	GoogAPIKey = []Header{{Name: "x-goog-api-key"}, {Name: "Authorization", Format: "Bearer {value}"}}
)

// Model API names.
const (
	ProviderAnthropic = "anthropic"
	ProviderOpenAI    = "openai"
	ProviderGemini    = "gemini"
)

// Upstream is the base URL the agent's requests go to.
func (p Provider) Upstream() string {
	if p.BaseURL != "" {
		return p.BaseURL
	}
	return p.DefaultURL
}

// SecretName is the name of the egress proxy's secret for credential c of
// p, and so of its placeholder: "anthropic-api-key".
func (p Provider) SecretName(c Credential) string { return p.Name + "-" + c.ID }

// Key is the credential an agent that sends one takes: the first of
// Credentials with a value ("" when none has one).
func (p Provider) Key() string {
	for _, c := range p.Credentials {
		if c.Value != "" {
			return c.Value
		}
	}
	return ""
}

// ProviderUser is implemented by adapters whose agent calls model APIs.
// Providers reports them for cfg (its Env wins over the adapter's
// defaults, as when the agent starts).
//
// Providers is the one description of how the agent reaches its model:
// the session engine hands it to the sandbox, whose egress proxy makes
// each provider a route, and the session starts with BaseURLEnv holding
// the route and every credential variable set holding its placeholder
// (the real values stay with the proxy). An agent that reads its provider
// from a config file the adapter generates (codex-acp, opencode-acp) is
// configured from Providers(cfg) of that same cfg when it starts, never
// from the adapter's defaults alone: Upstream and Key are then the route
// and the placeholder, and neither the upstream nor a key is written
// into a home the sandbox sees.
type ProviderUser interface {
	Providers(cfg Config) []Provider
}

// pick returns the session's value of name, else def.
func pick(env map[string]string, name, def string) string {
	if v := env[name]; v != "" {
		return v
	}
	return def
}

// Anthropic is the Anthropic Messages API as Claude Code and its SDKs take
// it: ANTHROPIC_BASE_URL, and three credentials — ANTHROPIC_API_KEY
// (x-api-key), ANTHROPIC_AUTH_TOKEN (a bearer token, for gateways) and
// CLAUDE_CODE_OAUTH_TOKEN (a subscription's OAuth token, a bearer token;
// the CLI adds "anthropic-beta: oauth-2025-04-20" itself). Claude Code
// sends the API key and the auth token when both are set, and the OAuth
// token only without either. baseURL and key are the adapter's defaults.
func Anthropic(env map[string]string, baseURL, key string) Provider {
	return Provider{
		Name: ProviderAnthropic, BaseURLEnv: "ANTHROPIC_BASE_URL",
		BaseURL: pick(env, "ANTHROPIC_BASE_URL", baseURL), DefaultURL: "https://api.anthropic.com",
		Credentials: []Credential{
			{ID: "api-key", Env: "ANTHROPIC_API_KEY", Value: pick(env, "ANTHROPIC_API_KEY", key), Headers: XAPIKey},
			{ID: "auth-token", Env: "ANTHROPIC_AUTH_TOKEN", Value: env["ANTHROPIC_AUTH_TOKEN"], Headers: Bearer},
			{ID: "oauth-token", Env: "CLAUDE_CODE_OAUTH_TOKEN", Value: env["CLAUDE_CODE_OAUTH_TOKEN"], Headers: Bearer},
		},
	}
}

// OpenAI is the OpenAI API (or a compatible one) as OPENAI_BASE_URL and
// OPENAI_API_KEY (a bearer token) configure it.
func OpenAI(env map[string]string, baseURL, key string) Provider {
	return Provider{
		Name: ProviderOpenAI, BaseURLEnv: "OPENAI_BASE_URL",
		BaseURL: pick(env, "OPENAI_BASE_URL", baseURL), DefaultURL: "https://api.openai.com/v1",
		Credentials: []Credential{
			{ID: "api-key", Env: "OPENAI_API_KEY", Value: pick(env, "OPENAI_API_KEY", key), Headers: Bearer},
		},
	}
}

// Gemini is the Gemini API as Gemini CLI takes it: GOOGLE_GEMINI_BASE_URL,
// and GEMINI_API_KEY or GOOGLE_API_KEY in x-goog-api-key (or as a bearer
// token, with GEMINI_API_KEY_AUTH_MECHANISM=bearer).
func Gemini(env map[string]string, baseURL, key string) Provider {
	return Provider{
		Name: ProviderGemini, BaseURLEnv: "GOOGLE_GEMINI_BASE_URL",
		BaseURL: pick(env, "GOOGLE_GEMINI_BASE_URL", baseURL), DefaultURL: "https://generativelanguage.googleapis.com",
		Credentials: []Credential{
			{ID: "api-key", Env: "GEMINI_API_KEY", Value: pick(env, "GEMINI_API_KEY", key), Headers: GoogAPIKey},
			{ID: "google-api-key", Env: "GOOGLE_API_KEY", Value: env["GOOGLE_API_KEY"], Headers: GoogAPIKey},
		},
	}
}

// With returns p with more credentials.
func (p Provider) With(cs ...Credential) Provider {
	p.Credentials = append(append([]Credential(nil), p.Credentials...), cs...)
	return p
}

// ProvidersIn returns the model APIs whose variables (a base URL or a
// credential of Anthropic, OpenAI or Gemini) env sets: how an agent that
// agentbox knows nothing of (one from the agents file) is assumed to call
// its model, so that a sandboxed session routes those credentials too.
func ProvidersIn(env map[string]string) []Provider {
	var out []Provider
	for _, p := range []Provider{Anthropic(env, "", ""), OpenAI(env, "", ""), Gemini(env, "", "")} {
		used := env[p.BaseURLEnv] != ""
		for _, c := range p.Credentials {
			used = used || c.Value != ""
		}
		if used {
			out = append(out, p)
		}
	}
	return out
}

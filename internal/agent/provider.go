package agent

// Provider is one model API an agent calls, with the environment variables
// it reads for it and the values it would use. A sandboxed session behind
// the egress proxy turns each into a route: the agent's base URL points at
// the proxy, and its key variable holds a placeholder while the proxy adds
// the real key on the way out.
type Provider struct {
	// Name names the API and its route: ProviderAnthropic, ProviderOpenAI
	// or ProviderGemini.
	Name string
	// BaseURLEnv and KeyEnv are the variables the agent reads, e.g.
	// ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY.
	BaseURLEnv, KeyEnv string
	// BaseURL and Key are what the agent would use: the session's Env,
	// else the adapter's default. An empty BaseURL means DefaultURL.
	BaseURL, Key string
	DefaultURL   string
	// Header and Format are how the API takes the key, e.g. "x-api-key"
	// and "{value}", or "Authorization" and "Bearer {value}".
	Header, Format string
}

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

// ProviderUser is implemented by adapters whose agent calls model APIs.
// Providers reports them for cfg (its Env wins over the adapter's
// defaults, as when the agent starts).
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

// Anthropic is the Anthropic Messages API as ANTHROPIC_BASE_URL and
// ANTHROPIC_API_KEY configure it; baseURL and key are the adapter's
// defaults.
func Anthropic(env map[string]string, baseURL, key string) Provider {
	return Provider{
		Name: ProviderAnthropic, BaseURLEnv: "ANTHROPIC_BASE_URL", KeyEnv: "ANTHROPIC_API_KEY",
		BaseURL: pick(env, "ANTHROPIC_BASE_URL", baseURL), Key: pick(env, "ANTHROPIC_API_KEY", key),
		DefaultURL: "https://api.anthropic.com", Header: "x-api-key",
	}
}

// OpenAI is the OpenAI API (or a compatible one) as OPENAI_BASE_URL and
// OPENAI_API_KEY configure it.
func OpenAI(env map[string]string, baseURL, key string) Provider {
	return Provider{
		Name: ProviderOpenAI, BaseURLEnv: "OPENAI_BASE_URL", KeyEnv: "OPENAI_API_KEY",
		BaseURL: pick(env, "OPENAI_BASE_URL", baseURL), Key: pick(env, "OPENAI_API_KEY", key),
		DefaultURL: "https://api.openai.com/v1", Header: "Authorization", Format: "Bearer {value}",
	}
}

// Gemini is the Gemini API as GOOGLE_GEMINI_BASE_URL and GEMINI_API_KEY
// configure it.
func Gemini(env map[string]string, baseURL, key string) Provider {
	return Provider{
		Name: ProviderGemini, BaseURLEnv: "GOOGLE_GEMINI_BASE_URL", KeyEnv: "GEMINI_API_KEY",
		BaseURL: pick(env, "GOOGLE_GEMINI_BASE_URL", baseURL), Key: pick(env, "GEMINI_API_KEY", key),
		DefaultURL: "https://generativelanguage.googleapis.com", Header: "x-goog-api-key",
	}
}

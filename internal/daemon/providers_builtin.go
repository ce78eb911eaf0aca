package daemon

import (
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/daytona"
	"github.com/agentbox/agentbox/internal/provider/docker"
	"github.com/agentbox/agentbox/internal/provider/e2b"
	"github.com/agentbox/agentbox/internal/provider/vercel"
)

// The providers built into the daemon. Each reads its credentials and
// endpoint from the daemon's environment (never the sandbox's): Docker
// DOCKER_HOST; E2B E2B_API_KEY, E2B_API_URL, E2B_DOMAIN; Daytona
// DAYTONA_API_KEY, DAYTONA_API_URL, DAYTONA_TARGET; Vercel VERCEL_TOKEN,
// VERCEL_TEAM_ID, VERCEL_PROJECT_ID, VERCEL_API_URL (docs/providers.md).
func init() {
	providerFactories["docker"] = func(getenv func(string) (string, bool), _ string) (provider.Provider, error) {
		host, _ := getenv("DOCKER_HOST")
		return docker.New(docker.Config{Host: host})
	}
	providerFactories["e2b"] = func(getenv func(string) (string, bool), _ string) (provider.Provider, error) {
		cfg, err := e2b.FromEnv(lookupString(getenv))
		if err != nil {
			return nil, err
		}
		return e2b.New(cfg)
	}
	providerFactories["daytona"] = func(getenv func(string) (string, bool), _ string) (provider.Provider, error) {
		cfg, err := daytona.FromEnv(lookupString(getenv))
		if err != nil {
			return nil, err
		}
		return daytona.New(cfg)
	}
	providerFactories["vercel"] = func(getenv func(string) (string, bool), _ string) (provider.Provider, error) {
		cfg, err := vercel.FromEnv(lookupString(getenv))
		if err != nil {
			return nil, err
		}
		return vercel.New(cfg)
	}
}

// lookupString adapts a lookup to the getenv the vendors' FromEnv take.
func lookupString(getenv func(string) (string, bool)) func(string) string {
	return func(name string) string {
		v, _ := getenv(name)
		return v
	}
}

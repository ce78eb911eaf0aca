package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/localproc"
)

// TestLoadProviders: --provider-config names providers by a factory of
// this binary, with their options; --provider alone configures one
// without; an unknown name or key is refused.
func TestLoadProviders(t *testing.T) {
	providerFactories["localproc"] = func(_ func(string) (string, bool), dataDir string) (provider.Provider, error) {
		return localproc.New(filepath.Join(dataDir, "localproc")), nil
	}
	t.Cleanup(func() { delete(providerFactories, "localproc") })
	write := func(body string) string {
		p := filepath.Join(t.TempDir(), "providers.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	reg, opts, err := loadProviders(Config{DataDir: t.TempDir(), ProviderConfig: write("providers:\n  localproc: {size: small}\n")})
	if err != nil {
		t.Fatal(err)
	}
	if names := reg.Names(); len(names) != 1 || names[0] != "localproc" || opts["localproc"]["size"] != "small" {
		t.Fatalf("providers %v, options %v", names, opts)
	}
	if reg, _, err = loadProviders(Config{DataDir: t.TempDir(), DefaultProvider: "localproc"}); err != nil || len(reg.Names()) != 1 {
		t.Fatalf("--provider localproc alone: %v, %v", reg, err)
	}
	for _, tc := range []struct{ file, def, want string }{
		{"providers:\n  nope: {}\n", "", `unknown provider "nope" (built in: [daytona docker e2b localproc vercel])`},
		{"", "nope", `unknown provider "nope"`},
		{"providerz:\n  localproc: {}\n", "", "providerz"},
	} {
		cfg := Config{DataDir: t.TempDir(), DefaultProvider: tc.def}
		if tc.file != "" {
			cfg.ProviderConfig = write(tc.file)
		}
		_, _, err := loadProviders(cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("loadProviders(%q, --provider %q) = %v, want an error with %q", tc.file, tc.def, err, tc.want)
		}
		if tc.want != "providerz" && !errors.Is(err, provider.ErrUnknown) {
			t.Errorf("%v is not ErrUnknown", err)
		}
	}
	// A vendor provider configured without its credentials is refused at
	// start, naming the variable; the daemon's environment is the only
	// place they come from.
	noEnv := func(string) (string, bool) { return "", false }
	for name, variable := range map[string]string{"e2b": "E2B_API_KEY", "daytona": "DAYTONA_API_KEY", "vercel": "VERCEL_TOKEN, VERCEL_TEAM_ID, VERCEL_PROJECT_ID"} {
		_, _, err := loadProviders(Config{DataDir: t.TempDir(), DefaultProvider: name, Getenv: noEnv})
		if !errors.Is(err, provider.ErrCredentials) || !strings.Contains(err.Error(), variable) {
			t.Errorf("--provider %s without %s: %v, want ErrCredentials naming it", name, variable, err)
		}
	}
}

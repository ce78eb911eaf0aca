package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentbox/agentbox/internal/daemon"
)

// serveConfig runs serve with args and env, the daemon replaced, and
// returns the configuration it would have started with.
func serveConfig(t *testing.T, env map[string]string, args ...string) (daemon.Config, error) {
	t.Helper()
	for _, k := range []string{"AGENTBOX_CONFIG", "AGENTBOX_LISTEN", "AGENTBOX_MAX_LIVE_SESSIONS", "AGENTBOX_IDLE_TIMEOUT", "AGENTBOX_LOG_FORMAT", "AGENTBOX_TOKEN", "AGENTBOX_DATA_DIR"} {
		t.Setenv(k, "")
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	var got daemon.Config
	prev := runDaemon
	runDaemon = func(_ context.Context, cfg daemon.Config) error { got = cfg; return nil }
	t.Cleanup(func() { runDaemon = prev })
	cmd := serveCommand()
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.ExecuteContext(t.Context())
	return got, err
}

func writeConfig(t *testing.T, mode os.FileMode, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agentbox.yaml")
	if err := os.WriteFile(p, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestServeConfigPrecedence: a flag on the command line wins over the
// environment, which wins over the --config file (or AGENTBOX_CONFIG),
// which wins over the default; the file's values take each flag's type.
func TestServeConfigPrecedence(t *testing.T) {
	file := writeConfig(t, 0o644, `# agentbox serve configuration
listen: 127.0.0.1:7001
max-live-sessions: 3
idle-timeout: 90s
sync-normal: true
cors-origins: "https://a.example,https://b.example"
log-format: json
`)
	for _, tc := range []struct {
		name   string
		env    map[string]string
		args   []string
		listen string
	}{
		{"default", nil, nil, daemon.DefaultListen},
		{"file", nil, []string{"--config", file}, "127.0.0.1:7001"},
		{"AGENTBOX_CONFIG", map[string]string{"AGENTBOX_CONFIG": file}, nil, "127.0.0.1:7001"},
		{"env over file", map[string]string{"AGENTBOX_LISTEN": "127.0.0.1:7002"}, []string{"--config", file}, "127.0.0.1:7002"},
		{"flag over env and file", map[string]string{"AGENTBOX_LISTEN": "127.0.0.1:7002"}, []string{"--config", file, "--listen", "127.0.0.1:7003"}, "127.0.0.1:7003"},
		{"--config over AGENTBOX_CONFIG", map[string]string{"AGENTBOX_CONFIG": "/nonexistent.yaml"}, []string{"--config", file}, "127.0.0.1:7001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := serveConfig(t, tc.env, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Listen != tc.listen {
				t.Errorf("listen %q, want %q", cfg.Listen, tc.listen)
			}
			fromFile := tc.name != "default"
			if fromFile && (cfg.MaxLiveSessions != 3 || cfg.IdleTimeout != 90*time.Second || !cfg.SyncNormal || len(cfg.CORSOrigins) != 2) {
				t.Errorf("the file's typed values not taken: %+v", cfg)
			}
			if !fromFile && (cfg.MaxLiveSessions != daemon.DefaultMaxLiveSessions || cfg.SyncNormal) {
				t.Errorf("defaults not kept: %+v", cfg)
			}
		})
	}
}

// TestServeConfigErrors: an unknown key (the client's url included), a
// value of the wrong type, a list, a key given twice name the file and the
// line; a token in a file others can read is refused; a bad environment
// value names its variable instead of being ignored.
func TestServeConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode os.FileMode
		text string
		env  map[string]string
		want string
	}{
		{"unknown key", 0o600, "listen: 127.0.0.1:7001\n\nlisten-on: x\n", nil, ":3: unknown key \"listen-on\""},
		{"client flag", 0o600, "url: http://x\n", nil, ":1: unknown key \"url\""},
		{"config in config", 0o600, "config: other.yaml\n", nil, ":1: unknown key \"config\""},
		{"bad int", 0o600, "listen: 127.0.0.1:7001\nmax-live-sessions: many\n", nil, ":2: max-live-sessions"},
		{"bad duration", 0o600, "idle-timeout: 5\n", nil, ":1: idle-timeout"},
		{"bad bool", 0o600, "sync-normal: perhaps\n", nil, ":1: sync-normal"},
		{"list", 0o600, "cors-origins:\n  - a\n  - b\n", nil, ":1: cors-origins: want a single value"},
		{"twice", 0o600, "listen: a\nlisten: b\n", nil, ":2:1: key \"listen\" given twice (first at 1:1)"},
		{"not a mapping", 0o600, "- listen\n", nil, ":1: want a mapping"},
		{"readable token", 0o644, "token: s3cret\n", nil, ":1: token in a file other users can read"},
		{"bad env", 0o600, "", map[string]string{"AGENTBOX_MAX_LIVE_SESSIONS": "abc"}, "AGENTBOX_MAX_LIVE_SESSIONS=\"abc\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := writeConfig(t, tc.mode, tc.text)
			_, err := serveConfig(t, tc.env, "--config", file)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if strings.HasPrefix(tc.want, ":") && !strings.Contains(err.Error(), file+tc.want) {
				t.Fatalf("err %v does not name %s%s", err, file, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("the error shows the token: %v", err)
			}
		})
	}
	// A private file may hold the token.
	file := writeConfig(t, 0o600, "token: s3cret-token-0123456789\n")
	if cfg, err := serveConfig(t, nil, "--config", file); err != nil || cfg.Token != "s3cret-token-0123456789" {
		t.Fatalf("token from a 0600 file: %v", err)
	}
}

// TestServeFlagsEnv: every serve flag names the variable that sets it
// (AGENTBOX_ and its name), but those no variable sets; --help shows no
// value from the environment (a token there would be printed).
func TestServeFlagsEnv(t *testing.T) {
	t.Setenv("AGENTBOX_TOKEN", "env-token-must-not-show")
	cmd := serveCommand()
	for name := range noEnv {
		if name != "config" && cmd.Flags().Lookup(name) == nil {
			t.Errorf("noEnv names %s, no flag of serve", name)
		}
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !noEnv[f.Name] && !strings.Contains(f.Usage, "["+envName(f.Name)) {
			t.Errorf("--%s: usage does not name %s: %s", f.Name, envName(f.Name), f.Usage)
		}
	})
	var out strings.Builder
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "env-token-must-not-show") {
		t.Fatalf("serve --help shows the environment's token:\n%s", out.String())
	}
}

// TestServeSandboxSpares: --sandbox-spares (AGENTBOX_SANDBOX_SPARES, the
// file's sandbox-spares) sets the process runtime's spare inits; 0
// disables them, and a count out of range is refused, never clamped.
func TestServeSandboxSpares(t *testing.T) {
	file := writeConfig(t, 0o600, "sandbox-spares: 3\n")
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want int // daemon.Config.SandboxSpares
		err  string
	}{
		{"default", nil, nil, daemon.DefaultSandboxSpares, ""},
		{"flag", nil, []string{"--sandbox-spares", "2"}, 2, ""},
		{"zero disables", nil, []string{"--sandbox-spares", "0"}, -1, ""},
		{"env", map[string]string{"AGENTBOX_SANDBOX_SPARES": "4"}, nil, 4, ""},
		{"file", nil, []string{"--config", file}, 3, ""},
		{"env over file", map[string]string{"AGENTBOX_SANDBOX_SPARES": "0"}, []string{"--config", file}, -1, ""},
		{"too many", nil, []string{"--sandbox-spares", "5"}, 0, "--sandbox-spares 5: want 0 (none) to 4"},
		{"negative", nil, []string{"--sandbox-spares", "-1"}, 0, "--sandbox-spares -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("AGENTBOX_SANDBOX_SPARES", "")
			cfg, err := serveConfig(t, tc.env, tc.args...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.SandboxSpares != tc.want {
				t.Errorf("SandboxSpares %d, want %d", cfg.SandboxSpares, tc.want)
			}
		})
	}
}

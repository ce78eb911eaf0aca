//go:build dev

// The developer tools are built only with -tags dev (dev_off.go says so
// otherwise): the fake LLM server is 400 KiB of the binary that users of
// the daemon and the CLI never run.

package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/fakellm"
)

// devCommand groups the developer tools; it is hidden from the help.
func devCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:    "dev",
		Short:  "Developer tools (fake LLM server, …)",
		Hidden: true,
		Args:   cobra.NoArgs,
	}
	cmd.AddCommand(fakeLLMCommand())
	return cmd
}

func fakeLLMCommand() *cobra.Command {
	var (
		listen   string
		scenario string
		logFile  string
		workdir  string
		key      string
		useTLS   bool
		certOut  string
	)
	cmd := &cobra.Command{
		Use:   "fake-llm",
		Short: "Run a deterministic fake LLM server on a loopback address",
		Long: `Run a deterministic fake LLM server (Anthropic Messages, OpenAI Responses and
Chat Completions, Gemini) on a loopback address, for demos and manual tests of
real agent CLIs.

It prints FAKELLM_URL=http://127.0.0.1:PORT on stdout, then one line per request
on stderr, and runs until SIGINT or SIGTERM. A base URL of FAKELLM_URL/s/NAME
selects scenario NAME for the requests sent to it.

--require-key KEY answers model API calls only when they carry KEY (bearer token,
x-api-key, x-goog-api-key, api-key or ?key=); others get 401 in the API's shape.

--tls serves HTTPS (FAKELLM_URL=https://…) with a CA and certificate made at
start for 127.0.0.1, ::1 and localhost. The CA's PEM goes to --cert-out FILE, or
else to a temporary file removed on exit; a second stdout line,
FAKELLM_CA_CERT=PATH, names it (for SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, curl
--cacert).

Built-in scenarios: ` + strings.Join(fakellm.BuiltinNames(), ", ") + `.
--scenario also takes a JSON scenario file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if certOut != "" && !useTLS {
				return errors.New("--cert-out needs --tls")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			opts := fakellm.Options{Addr: listen, Default: scenario, Workdir: workdir, LogFile: logFile,
				RequireKey: key, TLS: useTLS}
			if _, ok := fakellm.Builtin(scenario); !ok {
				sc, err := fakellm.LoadScenario(scenario)
				if err != nil {
					return fmt.Errorf("--scenario: not a built-in scenario (%s), and: %w",
						strings.Join(fakellm.BuiltinNames(), ", "), err)
				}
				opts.Default = sc.Name
				opts.Scenarios = map[string]*fakellm.Scenario{sc.Name: sc}
			}
			stderr := cmd.ErrOrStderr()
			opts.OnRequest = func(r fakellm.Request) {
				fmt.Fprintf(stderr, "fakellm #%d %s\n", r.Seq, r)
			}
			srv, err := fakellm.Start(ctx, opts)
			if err != nil {
				return err
			}
			caPath := ""
			if useTLS {
				if caPath, err = writeCert(certOut, srv.CertPEM()); err != nil {
					return errors.Join(err, srv.Close())
				}
				if certOut == "" {
					defer func() { _ = os.Remove(caPath) }()
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "FAKELLM_URL=%s\n", srv.URL())
			if caPath != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "FAKELLM_CA_CERT=%s\n", caPath)
			}
			fmt.Fprintf(stderr, "fakellm: listening on %s, default scenario %q\n", srv.URL(), opts.Default)
			if caPath != "" {
				fmt.Fprintf(stderr, "fakellm: CA certificate (PEM) in %s\n", caPath)
			}
			if key != "" {
				fmt.Fprintf(stderr, "fakellm: model API calls need the --require-key key\n")
			}
			<-ctx.Done()
			if key != "" {
				fmt.Fprintf(stderr, "fakellm: %d request(s) refused for a missing or wrong key\n", srv.KeyMismatches())
			}
			return srv.Close()
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:0", "loopback address to listen on")
	f.StringVar(&scenario, "scenario", fakellm.ScenarioText, "default scenario: a built-in name or a JSON file")
	f.StringVar(&logFile, "log", "", "append every request (credentials redacted) as a JSON line to this file")
	f.StringVar(&workdir, "workdir", "", "directory for relative paths when the agent's prompt states none")
	f.StringVar(&key, "require-key", "", "answer model API calls only when they carry this API key (401 otherwise)")
	f.BoolVar(&useTLS, "tls", false, "serve HTTPS with a certificate made at start (its CA's PEM: see --cert-out)")
	f.StringVar(&certOut, "cert-out", "", "with --tls, write the CA certificate (PEM) to this file (default: a temporary file)")
	return cmd
}

// writeCert writes the CA PEM to path, or to a new temporary file if path
// is "", and returns the absolute path written.
func writeCert(path string, pemBytes []byte) (string, error) {
	if path == "" {
		f, err := os.CreateTemp("", "fakellm-ca-*.pem")
		if err != nil {
			return "", fmt.Errorf("--tls: %w", err)
		}
		_, werr := f.Write(pemBytes)
		// A certificate is public; agents may run as other users.
		if err := errors.Join(werr, f.Chmod(0o644), f.Close()); err != nil {
			_ = os.Remove(f.Name())
			return "", fmt.Errorf("--tls: %w", err)
		}
		return f.Name(), nil
	}
	if err := os.WriteFile(path, pemBytes, 0o644); err != nil {
		return "", fmt.Errorf("--cert-out: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return path, nil
	}
	return abs, nil
}

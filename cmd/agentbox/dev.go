package main

import (
	"fmt"
	"os"
	"os/signal"
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

Built-in scenarios: ` + strings.Join(fakellm.BuiltinNames(), ", ") + `.
--scenario also takes a JSON scenario file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			opts := fakellm.Options{Addr: listen, Default: scenario, Workdir: workdir, LogFile: logFile}
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
			fmt.Fprintf(cmd.OutOrStdout(), "FAKELLM_URL=%s\n", srv.URL())
			fmt.Fprintf(stderr, "fakellm: listening on %s, default scenario %q\n", srv.URL(), opts.Default)
			<-ctx.Done()
			return srv.Close()
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:0", "loopback address to listen on")
	f.StringVar(&scenario, "scenario", fakellm.ScenarioText, "default scenario: a built-in name or a JSON file")
	f.StringVar(&logFile, "log", "", "append every request (credentials redacted) as a JSON line to this file")
	f.StringVar(&workdir, "workdir", "", "directory for relative paths when the agent's prompt states none")
	return cmd
}

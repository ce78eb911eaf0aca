package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agentbox/agentbox/client"
)

// maxSecretValue is the longest secret value the daemon takes.
const maxSecretValue = 16384

func (a *app) sessionsNetworkCmd() *cobra.Command {
	var allow []string
	var clearAll bool
	cmd := &cobra.Command{
		Use:   "network ID [--allow RULE]... [--clear]",
		Short: "Show a sandboxed session's network rules, or replace its allow rules",
		Long: `Show the network of a session's sandbox: its mode (proxy: the egress proxy is
the only way out; none: loopback only; host: the host's network), what happens
to a destination no rule settles (default), the allow and deny rules, and
whether a running sandbox's proxy enforces them now (live).

With --allow (repeatable), replace the allow rules; --clear sets none. A rule
is host[:port], *.domain[:port], * or CIDR[:port], and each must be covered by
the operator's global policy. Deny rules and the default stay. A running
sandbox's proxy decides every new connection by the new rules at once
(connections already open stay open); otherwise they apply from the session's
next start. The rules are stored with the session and the change is audited.

Only sessions with a sandbox (created with a policy) have network rules.`,
		Example: `  agentbox sessions network ses_0190...
  agentbox sessions network ses_0190... --allow api.github.com:443 --allow '*.npmjs.org'
  agentbox sessions network ses_0190... --clear --json`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			usage := func(err error) error {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())}
			}
			set := cmd.Flags().Changed("allow")
			if set && clearAll {
				return usage(errors.New("give --allow rules or --clear, not both"))
			}
			for _, r := range allow {
				if strings.TrimSpace(r) == "" {
					return usage(errors.New("--allow: empty rule"))
				}
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			id := args[0]
			var n client.SessionNetwork
			if set || clearAll {
				n, err = c.SetNetwork(cmd.Context(), id, allow)
			} else {
				n, err = c.Network(cmd.Context(), id)
			}
			if client.HasProblemType(err, client.ProblemNoSandbox) {
				return fmt.Errorf("%w (only a session created with a policy has a sandbox and network rules)", err)
			}
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(cmd.OutOrStdout(), n)
			}
			return printNetwork(cmd.OutOrStdout(), id, n)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&allow, "allow", nil, "replace the allow rules with these: host[:port], *.domain[:port], * or CIDR[:port] (repeatable)")
	f.BoolVar(&clearAll, "clear", false, "replace the allow rules with none")
	return cmd
}

// printNetwork writes a session's network as aligned rows, one rule a line.
func printNetwork(w io.Writer, id string, n client.SessionNetwork) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	rules := func(k string, rs []string) {
		if len(rs) == 0 {
			fmt.Fprintf(tw, "%s:\t(none)\n", k)
			return
		}
		for i, r := range rs {
			if i > 0 {
				k = ""
			} else {
				k += ":"
			}
			fmt.Fprintf(tw, "%s\t%s\n", k, r)
		}
	}
	fmt.Fprintf(tw, "Mode:\t%s\n", n.Mode)
	if n.Default != "" {
		fmt.Fprintf(tw, "Default:\t%s\n", n.Default)
	}
	rules("Allow", n.Allow)
	rules("Deny", n.Deny)
	live := "yes (the running sandbox's egress proxy enforces these rules)"
	if !n.Live {
		live = "no (they apply from the session's next start: agentbox sessions resume " + id + ")"
	}
	fmt.Fprintf(tw, "Live:\t%s\n", live)
	return tw.Flush()
}

func (a *app) secretsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "secrets",
		Aliases: []string{"secret"},
		Short:   "List, set and remove the daemon's secrets (values are never shown)",
		Long: `Secrets are credentials the daemon's egress proxy adds to a sandbox's requests
for one host, in one header, so that the sandbox never holds them: a sandbox
whose policy names a secret in env.secrets sees its placeholder instead.

Values set here are kept in the daemon's memory only (lost when it stops) and
are never returned, logged or written to disk. They are read from stdin or an
environment variable, never from the command line, where other users could
see them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.secretsListCmd(), a.secretsSetCmd(), a.secretsRmCmd())
	return cmd
}

func (a *app) secretsListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the daemon's secrets, without their values",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			list, err := c.Secrets(cmd.Context())
			if err != nil {
				return err
			}
			if list == nil {
				list = []client.SecretInfo{}
			}
			if a.json {
				return printJSON(cmd.OutOrStdout(), client.SecretList{Secrets: list})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tHOST\tHEADER\tFORMAT\tSOURCE\tPLACEHOLDER")
			for _, s := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Host, s.Header, dash(s.Format), s.Source, s.Placeholder)
			}
			return tw.Flush()
		},
	}
}

// errValueArg refuses a secret value on the command line.
var errValueArg = errors.New("a secret's value is never taken from the command line, where other users can see it (ps, shell history): " +
	"pass it on stdin with --value-stdin, or name an environment variable with --value-env VAR")

func (a *app) secretsSetCmd() *cobra.Command {
	var req client.PutSecret
	var fromStdin bool
	var fromEnv, valueArg string
	cmd := &cobra.Command{
		Use:   "set NAME --host HOST --header HEADER [--format FORMAT] (--value-stdin | --value-env VAR)",
		Short: "Add or replace a secret, its value read from stdin or an environment variable",
		Long: `Add or replace a secret: the egress proxy puts it in HEADER of requests for
HOST (one host name or *.domain, without a port), as FORMAT says ({value}
stands for the secret; empty means the value alone).

The value is read from stdin (--value-stdin; one trailing newline is dropped,
and a terminal is asked without echo) or from an environment variable of this
process (--value-env VAR). It is never taken from the command line, where other
users could see it.`,
		Example: `  printf %s "$GITHUB_TOKEN" | agentbox secrets set github --host api.github.com --header Authorization --format 'Bearer {value}' --value-stdin
  agentbox secrets set npm --host registry.npmjs.org --header Authorization --format 'Bearer {value}' --value-env NPM_TOKEN`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) > 1 || len(args) == 1 && strings.Contains(args[0], "="):
				return &ExitError{Code: ExitUsage, Err: errValueArg}
			case len(args) == 0:
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("give the secret's NAME (see %s --help)", cmd.CommandPath())}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			usage := func(err error) error {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())}
			}
			switch {
			case cmd.Flags().Changed("value"):
				return &ExitError{Code: ExitUsage, Err: errValueArg}
			case req.Host == "":
				return usage(errors.New("--host is required"))
			case req.Header == "":
				return usage(errors.New("--header is required"))
			case fromStdin == cmd.Flags().Changed("value-env"):
				return usage(errors.New("give one of --value-stdin and --value-env VAR"))
			}
			name := args[0]
			var err error
			if fromStdin {
				if req.Value, err = a.readSecretValue(cmd, name); err != nil {
					return err
				}
				if req.Value == "" {
					return usage(errors.New("--value-stdin: the value on stdin is empty"))
				}
			} else {
				if fromEnv == "" {
					return usage(errors.New("--value-env: empty variable name"))
				}
				req.Value = a.env.getenv(fromEnv)
				if req.Value == "" {
					return usage(fmt.Errorf("--value-env: the environment variable %s is not set or empty", fromEnv))
				}
			}
			if len(req.Value) > maxSecretValue {
				return usage(fmt.Errorf("the value is longer than %d bytes", maxSecretValue))
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			info, err := c.PutSecret(cmd.Context(), name, req)
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(cmd.OutOrStdout(), info)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "set %s (header %s for %s; sandboxes see %s)\n", info.Name, info.Header, info.Host, info.Placeholder)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Host, "host", "", "the one host name (or *.domain) the secret is sent to (required)")
	f.StringVar(&req.Header, "header", "", "the request header that carries it, e.g. Authorization (required)")
	f.StringVar(&req.Format, "format", "", "the header's value, {value} standing for the secret, e.g. 'Bearer {value}' (default: the value alone)")
	f.BoolVar(&req.InterceptTLS, "intercept-tls", false, "add it to HTTPS requests for HOST too: sandboxes created from now on get a CA of their own, and the proxy opens their tunnels to HOST (only those)")
	f.BoolVar(&fromStdin, "value-stdin", false, "read the value from stdin (one trailing newline is dropped)")
	f.StringVar(&fromEnv, "value-env", "", "read the value from this environment variable of the CLI's process")
	// --value exists only to refuse it with a reason, not as an unknown flag.
	f.StringVar(&valueArg, "value", "", "never: the command line is visible to other users")
	_ = f.MarkHidden("value")
	return cmd
}

// readSecretValue reads a secret's value from stdin: asked without echo on
// a terminal, otherwise everything up to EOF less one trailing newline.
func (a *app) readSecretValue(cmd *cobra.Command, name string) (string, error) {
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok && a.env.isTerminal(f) {
		fmt.Fprintf(cmd.ErrOrStderr(), "Value of secret %s (not echoed): ", name)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(cmd.ErrOrStderr())
		if err != nil {
			return "", fmt.Errorf("read the value: %w", err)
		}
		return string(b), nil
	}
	// Two bytes over the limit leave room for a trailing CRLF.
	b, err := io.ReadAll(io.LimitReader(in, maxSecretValue+3))
	if err != nil {
		return "", fmt.Errorf("read the value from stdin: %w", err)
	}
	v := string(b)
	if t, ok := strings.CutSuffix(v, "\n"); ok {
		v = strings.TrimSuffix(t, "\r")
	}
	return v, nil
}

func (a *app) secretsRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"delete"},
		Short:   "Remove secrets; sandboxes holding their placeholders get nothing for them from then on",
		Args:    usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			var errs []error
			for _, name := range args {
				if err := c.DeleteSecret(cmd.Context(), name); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", name, err))
					continue
				}
				if a.json {
					_ = newJSONLines(cmd.OutOrStdout()).write(map[string]any{"name": name, "deleted": true})
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", name)
				}
			}
			return errors.Join(errs...)
		},
	}
}

package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/sandbox/policy"
	"github.com/agentbox/agentbox/internal/yamldoc"
)

// policyCmd checks and shows sandbox policies. It works on local files and
// the built-in presets only: no daemon is involved.
func (a *app) policyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Check and show sandbox policies (local; no daemon needed)",
		Long: `Sandbox policies say what an agent session or a code execution may do:
isolation, resources, files, network, environment and syscalls. See
docs/policy.md; the JSON Schema is docs/policy.v1.json.

Presets: ` + strings.Join(policy.PresetNames(), ", "),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.policyCheckCmd(), a.policyShowCmd())
	return cmd
}

// usageArgs makes a wrong number of arguments a usage error (exit 2).
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return &ExitError{Code: ExitUsage, Err: fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())}
		}
		return nil
	}
}

// readPolicy parses a policy file; "-" is standard input.
func readPolicy(cmd *cobra.Command, file string) (*policy.Policy, error) {
	var data []byte
	var err error
	name := file
	if file == "-" {
		name = "<stdin>"
		data, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), policy.MaxSize+1))
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	return policy.Parse(name, data)
}

// checkResult is one file's outcome in --json output.
type checkResult struct {
	File   string             `json:"file"`
	OK     bool               `json:"ok"`
	Errors []checkResultError `json:"errors,omitempty"`
}

type checkResultError struct {
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

func (a *app) policyCheckCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "check FILE...",
		Short: "Validate policy files (YAML or JSON; - for stdin)",
		Long: `Validate policy files against the policy schema and rules. Prints
"FILE: ok" for each valid file; for an invalid one, every problem as
"file:line:col: field: message" on stderr, and exits 1.`,
		Example: "  agentbox policy check policy.yaml\n  agentbox --json policy check a.yaml b.json",
		Args:    usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, files []string) error {
			var results []checkResult
			bad := 0
			for _, f := range files {
				res := checkResult{File: f, OK: true}
				if _, err := readPolicy(cmd, f); err != nil {
					bad++
					res.OK = false
					var es policy.Errors
					if errors.As(err, &es) {
						for _, e := range es {
							res.Errors = append(res.Errors, checkResultError{e.Line, e.Column, e.Field, e.Message})
						}
					} else {
						res.Errors = append(res.Errors, checkResultError{Message: err.Error()})
					}
					if !a.json {
						fmt.Fprintln(cmd.ErrOrStderr(), err)
					}
				} else if !a.json {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: ok\n", f)
				}
				results = append(results, res)
			}
			if a.json {
				if err := printJSON(cmd.OutOrStdout(), results); err != nil {
					return err
				}
			}
			if bad > 0 {
				return &ExitError{Code: 1, Err: fmt.Errorf("policy check: %d of %d files invalid", bad, len(files))}
			}
			return nil
		},
	}
}

func (a *app) policyShowCmd() *cobra.Command {
	var preset, global string
	var effective bool
	cmd := &cobra.Command{
		Use:   "show [--preset NAME | FILE] [--effective [--global FILE]]",
		Short: "Print a policy as YAML, optionally as it takes effect",
		Long: `Print a policy file or a preset as YAML (JSON with --json). With
--effective, print what the sandbox would enforce: the defaults filled in,
the built-in protected paths added and, with --global, the intersection
with the operator's global policy. A request that asks for more than the
global policy grants is an error naming the field and the global rule.`,
		Example: "  agentbox policy show --preset exec-default\n" +
			"  agentbox policy show my.yaml --effective --global /etc/agentbox/global-policy.yaml",
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			usage := func(err error) error {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())}
			}
			if (preset == "") == (len(args) == 0) {
				return usage(fmt.Errorf("give a policy FILE or --preset NAME (one of %s)", strings.Join(policy.PresetNames(), ", ")))
			}
			if global != "" && !effective {
				return usage(errors.New("--global needs --effective"))
			}
			var p *policy.Policy
			var err error
			if preset != "" {
				p, err = policy.Preset(preset)
			} else {
				p, err = readPolicy(cmd, args[0])
			}
			if err != nil {
				return err
			}
			if effective {
				var g *policy.Policy
				if global != "" {
					data, err := os.ReadFile(global)
					if err != nil {
						return fmt.Errorf("read global policy: %w", err)
					}
					if g, err = policy.Parse(global, data); err != nil {
						return err
					}
				}
				if p, err = policy.Effective(g, p); err != nil {
					return err
				}
			}
			if a.json {
				return printJSON(cmd.OutOrStdout(), p)
			}
			out, err := yamldoc.Marshal(p)
			if err != nil {
				return fmt.Errorf("print policy: %w", err)
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&preset, "preset", "", "show a built-in preset: "+strings.Join(policy.PresetNames(), ", "))
	f.BoolVar(&effective, "effective", false, "show the policy as enforced: defaults, built-in protected paths, global policy applied")
	f.StringVar(&global, "global", "", "the operator's global policy file to intersect with (needs --effective)")
	return cmd
}

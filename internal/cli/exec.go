package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

// Exit codes of agentbox exec besides the command's own.
const (
	ExitTimeout = 124 // the command ran past its timeout, as timeout(1)
)

// maxExecInput bounds code, stdin and each --file read by exec, below the
// daemon's 8 MiB body limit.
const maxExecInput = 4 << 20

var languages = []string{client.LangPython, client.LangNode, client.LangBash}

// presetName is what --policy takes for a preset rather than a file.
var presetName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z][a-z0-9-]*$`) })

func (a *app) execCmd() *cobra.Command {
	var o struct {
		policy, lang, code string
		provider           string
		files              []string
		timeout            time.Duration
	}
	cmd := &cobra.Command{
		Use:   "exec [flags] -- COMMAND [ARGS...]",
		Short: "Run code or a command in a sandbox under a policy",
		Long: `Run code or a command in a fresh sandbox on the daemon, under a policy, and
print its output as it comes.

With --provider, the sandbox is made on that provider (docker, e2b, ...) and
the code runs through the agentbox daemon inside it, under the same policy.

Give a command after --, or --lang with --code (or the code on stdin). Local
files can be placed in the sandbox's workspace with --file. For a command,
stdin is passed to it unless it is a terminal.

The exit code is the command's; 124 when it ran past its timeout, 128+N when
signal N ended it (as when it hit its memory, pids or output limit).`,
		Example: `  agentbox exec -- python3 -c 'print(1)'
  agentbox exec --lang node --code 'console.log(process.version)'
  echo 'print(6*7)' | agentbox exec --lang python
  agentbox exec --policy strict --timeout 5s --file data.csv=./data.csv -- python3 -c 'print(open("data.csv").read())'
  agentbox exec --policy ./policy.yaml --json -- bash -c 'ulimit -a'
  agentbox exec --provider docker -- sh -c 'echo in a container'`,
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := a.execRequest(cmd, args, o.lang, o.code, o.policy, o.files, o.timeout)
			if err != nil {
				return err
			}
			req.Provider = o.provider
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			var res client.ExecResult
			if a.json {
				res, err = c.Exec(cmd.Context(), req)
			} else {
				stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
				// Output goes to a pipe or file byte for byte; to a
				// terminal, inert (see termSafe).
				show := func(w io.Writer) func(string) string {
					if a.env.isTerminal(w) {
						return termSafe
					}
					return func(s string) string { return s }
				}
				outText, errText := show(stdout), show(stderr)
				res, err = c.ExecStream(cmd.Context(), req, func(ch client.OutputChunk) {
					w, text := stdout, outText
					if ch.Stream == "stderr" {
						w, text = stderr, errText
					}
					_, _ = io.WriteString(w, text(ch.Data)) // a closed terminal loses nothing we could save
				})
			}
			if err != nil {
				return err
			}
			if a.json {
				if err := printJSON(a.jsonTerminal(cmd.OutOrStdout()), res); err != nil {
					return err
				}
			} else {
				reportExec(cmd.ErrOrStderr(), res)
			}
			if code := execExitCode(res); code != 0 {
				return &ExitError{Code: code}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.policy, "policy", "", "policy preset (exec-default, strict, ...) or policy file (YAML or JSON); default exec-default")
	f.StringVar(&o.lang, "lang", "", "run code in this language: "+strings.Join(languages, ", "))
	f.StringVar(&o.code, "code", "", "the code to run with --lang (default: read from stdin)")
	f.StringArrayVar(&o.files, "file", nil, "place a local file in the workspace: PATH=LOCAL (repeatable)")
	f.DurationVar(&o.timeout, "timeout", 0, "wall-clock limit, when shorter than the policy's (e.g. 10s)")
	f.StringVar(&o.provider, "provider", "", "run in a fresh sandbox of this provider (see agentbox providers), destroyed afterwards; default: the daemon's host")
	return cmd
}

// execRequest builds the request from the flags.
func (a *app) execRequest(cmd *cobra.Command, args []string, lang, code, pol string, files []string, timeout time.Duration) (client.ExecRequest, error) {
	usage := func(format string, v ...any) error {
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format+" (see %s --help)", append(v, cmd.CommandPath())...)}
	}
	var req client.ExecRequest
	switch {
	case lang == "" && len(args) == 0:
		return req, usage("give a command after --, or --lang")
	case lang != "" && len(args) > 0:
		return req, usage("give either a command or --lang, not both")
	case lang == "" && cmd.Flags().Changed("code"):
		return req, usage("--code needs --lang")
	case lang != "" && !slices.Contains(languages, lang):
		return req, usage("--lang %q: want one of %s", lang, strings.Join(languages, ", "))
	case timeout < 0:
		return req, usage("--timeout must not be negative")
	}
	in := cmd.InOrStdin()
	if lang != "" {
		req.Language, req.Code = lang, code
		if !cmd.Flags().Changed("code") {
			b, err := readLimited(in, "the code on stdin")
			if err != nil {
				return req, err
			}
			req.Code = string(b)
		}
		if strings.TrimSpace(req.Code) == "" {
			return req, usage("the code is empty")
		}
	} else {
		req.Argv = args
		if f, ok := in.(*os.File); !ok || !a.env.isTerminal(f) {
			b, err := readLimited(in, "stdin")
			if err != nil {
				return req, err
			}
			req.Stdin = string(b)
		}
	}
	for _, spec := range files {
		dst, src, ok := strings.Cut(spec, "=")
		if !ok || dst == "" || src == "" {
			return req, usage("--file %q: want PATH=LOCAL", spec)
		}
		b, err := readFileLimited(src)
		if err != nil {
			return req, fmt.Errorf("--file %s: %w", spec, err)
		}
		if req.Files == nil {
			req.Files = map[string]string{}
		}
		req.Files[dst] = string(b)
	}
	if pol != "" {
		p, src, err := policyFlag(pol)
		if err != nil {
			return req, err
		}
		req.Policy, req.PolicySource = p, src
	}
	req.TimeoutMS = timeout.Milliseconds()
	if timeout > 0 && req.TimeoutMS == 0 {
		req.TimeoutMS = 1
	}
	return req, nil
}

// policyFlag reads --policy: an existing file is sent as a document (so
// that errors name it), anything shaped like a name is a preset.
func policyFlag(v string) (json.RawMessage, *client.PolicySource, error) {
	if st, err := os.Stat(v); err == nil && st.Mode().IsRegular() {
		b, err := readFileLimited(v)
		if err != nil {
			return nil, nil, fmt.Errorf("--policy: %w", err)
		}
		return nil, &client.PolicySource{Name: filepath.Base(v), Text: string(b)}, nil
	}
	if !presetName().MatchString(v) {
		return nil, nil, fmt.Errorf("--policy %q: no such file, and not a preset name", v)
	}
	b, _ := json.Marshal(v) // a string always marshals
	return b, nil, nil
}

func readLimited(r io.Reader, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxExecInput+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	if len(b) > maxExecInput {
		return nil, fmt.Errorf("%s is larger than %d bytes", what, maxExecInput)
	}
	return b, nil
}

func readFileLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(f, path)
}

// reportExec tells on stderr what the output does not: a limit lowered
// from what was asked, a limit hit, truncation, violations.
// Messages and details may quote the sandbox: they are made inert.
func reportExec(w io.Writer, res client.ExecResult) {
	reportAdjusted(w, res.Adjusted)
	if res.Error != nil {
		fmt.Fprintf(w, "agentbox: %s: %s\n", termSafe(res.Error.Code), termSafe(res.Error.Message))
	} else if res.Truncated {
		fmt.Fprintln(w, "agentbox: output truncated at the policy's limit")
	}
	for _, v := range res.Violations {
		if v.Kind == "resource" && res.Error != nil {
			continue // told above
		}
		fmt.Fprintf(w, "agentbox: %s violation (%s): %s\n", termSafe(v.Kind), termSafe(v.Action), termSafe(v.Detail))
	}
}

// reportAdjusted says, a line each, which limits asked for were lowered.
func reportAdjusted(w io.Writer, adjusted []client.LimitAdjustment) {
	for _, a := range adjusted {
		fmt.Fprintf(w, "agentbox: %s: asked %s, applied %s (lowered by the %s)\n", termSafe(a.Field), termSafe(a.Requested), termSafe(a.Applied), termSafe(a.By))
	}
}

// execExitCode maps a result to the CLI's exit code.
func execExitCode(res client.ExecResult) int {
	switch {
	case res.Error != nil && res.Error.Code == client.ExecTimeout:
		return ExitTimeout
	case res.ExitCode >= 0:
		return res.ExitCode
	}
	for n := syscall.Signal(1); n < 32; n++ {
		if n.String() == res.Signal {
			return 128 + int(n)
		}
	}
	return 1
}

// Package cli is the agentbox command line: cobra commands that talk to a
// daemon only through the public client package, and the terminal rendering
// of session events.
//
// The composition root builds the tree with NewRoot, adds the commands that
// need the daemon's internals (serve, ...) with AddCommand, and runs it with
// Execute, which maps errors to exit codes.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agentbox/agentbox/client"
)

// DefaultURL is the daemon address used when neither --url nor AGENTBOX_URL
// is set.
const DefaultURL = "http://127.0.0.1:7777"

// Environment variables read by the CLI.
const (
	EnvURL   = "AGENTBOX_URL"
	EnvToken = "AGENTBOX_TOKEN"
)

// Exit codes besides 0 and 1.
const (
	ExitUsage       = 2   // bad flags
	ExitInterrupted = 130 // the turn was interrupted, or Ctrl-C twice
)

// ExitError carries a process exit code with the error to print.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode returns the process exit code for an error returned by the
// command tree: 0 for nil, the code of an *ExitError, 1 otherwise.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return 1
}

// Execute runs the command tree under ctx, prints the error if there is one
// and returns the exit code for os.Exit.
//
// ctx should not be cancelled by SIGINT (signal.NotifyContext): run handles
// Ctrl-C itself, interrupting the turn on the first and quitting on the
// second. It copes with such a context, but cannot tell SIGTERM apart then.
func Execute(ctx context.Context, root *cobra.Command) int {
	err := root.ExecuteContext(ctx)
	switch {
	case client.IsUnauthorized(err):
		err = fmt.Errorf("%w (pass the daemon's token with --token or %s; a daemon started without --token keeps its token in DATA_DIR/token, which this command reads for a daemon on this machine when it may: set AGENTBOX_DATA_DIR to that data directory, or run as the daemon's user (root, for sandboxes))", err, EnvToken)
	case noDaemon(err) != "":
		err = fmt.Errorf("%w (no agentbox daemon answers at %s: start one with `agentbox serve`, or point --url or %s at one that runs)", err, noDaemon(err), EnvURL)
	}
	// An ExitError without a cause passes a code through (agentbox exec
	// exits with its command's status) and has nothing to say. An error may
	// quote the agent (a failed turn's message) or the daemon: it is made
	// inert like the rest of a session's text.
	var ee *ExitError
	if err != nil && (!errors.As(err, &ee) || ee.Err != nil) {
		fmt.Fprintf(root.ErrOrStderr(), "%s: %s\n", root.Name(), errText(err))
	}
	return ExitCode(err)
}

// noDaemon returns the address that was tried when err is a failure to
// reach the daemon at all (nothing listens at the address, no such socket,
// no route), as opposed to an answer; "" otherwise.
func noDaemon(err error) string {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		return ""
	}
	if op.Addr != nil {
		return op.Net + " " + op.Addr.String()
	}
	return "the --url address"
}

// env is what the commands take from the process, replaceable in tests.
type env struct {
	getenv func(string) string
	// isTerminal reports whether a stream (stdin, stdout) is a terminal.
	isTerminal func(any) bool
	// notify relays interrupt signals to c until stop is called.
	notify func(c chan<- os.Signal) (stop func())
}

func processEnv() env {
	return env{
		getenv: os.Getenv,
		isTerminal: func(v any) bool {
			f, ok := v.(*os.File)
			return ok && term.IsTerminal(int(f.Fd()))
		},
		notify: func(c chan<- os.Signal) func() {
			signal.Notify(c, os.Interrupt)
			return func() { signal.Stop(c) }
		},
	}
}

// app holds the global flags shared by every command.
type app struct {
	version string
	env     env
	url     string
	token   string
	json    bool
}

// NewRoot returns the agentbox command tree without the daemon commands.
// The token is never given a default from the environment, so that help
// output cannot show it.
func NewRoot(version string) *cobra.Command { return newRoot(version, processEnv()) }

// NewDaemonRoot is NewRoot without the client commands: the root and its
// global flags, all that `agentbox serve` needs of the tree. main builds it
// when serve is the first argument: building every client command (their
// flags and help texts) was about 1.3 ms of CPU, and a third of the
// tree's page faults, of a daemon's start.
func NewDaemonRoot(version string) *cobra.Command {
	return newRootOf(version, processEnv(), false)
}

func newRoot(version string, e env) *cobra.Command { return newRootOf(version, e, true) }

// newRootOf builds the root, with the client commands when clients is set.
func newRootOf(version string, e env, clients bool) *cobra.Command {
	a := &app{version: version, env: e}
	var showVersion bool
	root := &cobra.Command{
		Use:   "agentbox",
		Short: "Run coding agents behind one API, sandboxed, with durable sessions",
		Long: `agentbox runs coding agents (Claude Code, Codex, OpenCode, Gemini, any ACP
agent) behind one HTTP/SSE API, inside a policy-enforced sandbox, and keeps
every session as a replayable event log.

These commands talk to a running daemon; see --url.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		// --version: the version alone; the version command adds the
		// build and the daemon's. It is a flag of our own rather than
		// cobra's Version: cobra prints that through text/template, whose
		// reflect.Value.MethodByName makes the linker keep every exported
		// method of every reachable type (2.1 MiB of the binary).
		RunE: func(c *cobra.Command, _ []string) error {
			if showVersion {
				_, err := fmt.Fprintf(c.OutOrStdout(), "agentbox %s\n", version)
				return err
			}
			return c.Help()
		},
	}
	root.Flags().BoolVarP(&showVersion, "version", "v", false, "version for agentbox")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("%w (see %s --help)", err, c.CommandPath())}
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.url, "url", DefaultURL, "daemon URL: http(s)://host:port or unix:///path/to.sock (env "+EnvURL+")")
	pf.StringVar(&a.token, "token", "", "bearer token for the daemon (env "+EnvToken+"; default: for a daemon on this machine, the one in its data directory, AGENTBOX_DATA_DIR or ~/.local/share/agentbox)")
	pf.BoolVar(&a.json, "json", false, "print JSON (events as JSON lines) instead of text")
	if !clients {
		// Nor the completion command, which cobra builds (four
		// subcommands and their help texts) on every execution: the
		// first argument is serve.
		root.CompletionOptions.DisableDefaultCmd = true
		return root
	}
	root.AddCommand(a.runCmd(), a.sessionsCmd(), a.filesCmd(), a.agentsCmd(), a.policyCmd(), a.secretsCmd(), a.versionCmd(), a.acpCmd(), a.execCmd(), a.attachCmd(), a.doctorCmd(), a.providersCmd())
	return root
}

// endpoint returns the daemon URL and token: a flag given on the command
// line wins over the environment, which wins over the default.
func (a *app) endpoint(cmd *cobra.Command) (url, token string) {
	url, token = a.url, a.token
	if v := a.env.getenv(EnvURL); v != "" && !cmd.Flags().Changed("url") {
		url = v
	}
	if v := a.env.getenv(EnvToken); v != "" && !cmd.Flags().Changed("token") {
		token = v
	}
	return url, token
}

// client returns a client for the daemon. Without --token or
// AGENTBOX_TOKEN, a daemon on this machine (loopback or unix socket) gets
// the token it wrote to its data directory (AGENTBOX_DATA_DIR, else the
// default one), and only if its socket is this user's or root's: see
// client.WithLocalToken.
func (a *app) client(cmd *cobra.Command) (*client.Client, error) {
	url, token := a.endpoint(cmd)
	opts := []client.Option{client.WithLocalToken(a.env.getenv), client.WithUserAgent("agentbox-cli/" + a.version)}
	if token != "" {
		opts = append(opts, client.WithToken(token))
	}
	return client.New(url, opts...)
}

// colorFor says whether to colour what goes to w: only terminals, and never
// when NO_COLOR is set or TERM is dumb.
func (a *app) colorFor(w io.Writer) bool {
	return a.env.getenv("NO_COLOR") == "" && a.env.getenv("TERM") != "dumb" && a.env.isTerminal(w)
}

// interactive says whether prompts can be answered from r: a terminal, or
// any reader that is not a file (one an embedder or a test passed to
// SetIn on purpose). Files and pipes are not asked.
func (a *app) interactive(r io.Reader) bool {
	if _, ok := r.(*os.File); ok {
		return a.env.isTerminal(r)
	}
	return true
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// jsonLines writes values as one compact JSON document per line.
type jsonLines struct{ enc *json.Encoder }

func newJSONLines(w io.Writer) *jsonLines {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return &jsonLines{enc: enc}
}

func (j *jsonLines) write(v any) error { return j.enc.Encode(v) }

// lockedWriter serialises writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

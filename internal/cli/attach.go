package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agentbox/agentbox/client"
)

// detachKey ends agentbox attach and leaves the process running: Ctrl-]
// (GS, 0x1d), as telnet's escape character. It is never sent to the
// process.
const detachKey = 0x1d

// inputChunk is the most keyboard input sent in one request.
const inputChunk = 4 << 10

func (a *app) attachCmd() *cobra.Command {
	var o struct {
		start    bool
		policy   string
		provider string
		replay   bool
		timeout  int64
	}
	cmd := &cobra.Command{
		Use:   "attach [flags] PROCESS | attach --new [flags] [-- COMMAND [ARGS...]]",
		Short: "Connect this terminal to a process's terminal in a sandbox",
		Long: `Connect this terminal to a process started with tty (a pseudo-terminal in
its sandbox): what the process writes is shown here, keystrokes are sent to it,
and the remote terminal follows this one's size.

With --new, start the command (default bash) in a fresh sandbox under
--policy first, on a terminal of this one's size; its id is printed on stderr.
With --provider, that sandbox is made on the provider (docker, e2b, ...) and
destroyed when the process ends.

The local terminal is put in raw mode, so Ctrl-C, Ctrl-Z and Ctrl-D go to the
process. Ctrl-] detaches: the process keeps running, and attaching again by its
id replays the screen output the daemon still holds (the last 1 MiB) before
following it. The terminal's bytes are written as they come, escape sequences
included: the process draws on this terminal.

The exit code is the process's once it ends, 0 after a detach.`,
		Example: `  agentbox attach --new
  agentbox attach --new --policy strict -- python3
  agentbox attach --new --provider e2b
  agentbox attach prc_5f0c8e2a9b7d4c1e3a6f8b20`,
		RunE: func(cmd *cobra.Command, args []string) error {
			usage := func(format string, v ...any) error {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format+" (see %s --help)", append(v, cmd.CommandPath())...)}
			}
			switch {
			case !o.start && len(args) != 1:
				return usage("give one process id or tag, or --new")
			case !o.start && (o.policy != "" || o.provider != ""):
				return usage("--policy and --provider go with --new")
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			in, out, errOut := cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
			local := terminalOf(a, in)
			id := ""
			if o.start {
				req := client.StartProcess{Argv: args, TTY: true, TimeoutMS: o.timeout, Provider: o.provider}
				if len(req.Argv) == 0 {
					req.Argv = []string{"bash"}
				}
				if local != nil {
					req.Rows, req.Cols = local.size()
				}
				if o.policy != "" {
					if req.Policy, req.PolicySource, err = policyFlag(o.policy); err != nil {
						return err
					}
				}
				p, err := c.StartProcess(cmd.Context(), req)
				if err != nil {
					return err
				}
				id = p.ID
				fmt.Fprintf(errOut, "agentbox: started %s (Ctrl-] detaches)\r\n", id)
			} else {
				id = args[0]
			}
			p, err := c.GetProcess(cmd.Context(), id)
			if err != nil {
				return err
			}
			return a.attach(cmd.Context(), c, p, local, in, out, errOut, o.replay)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.start, "new", false, "start the command (default bash) on a terminal first")
	f.StringVar(&o.policy, "policy", "", "with --new: policy preset or policy file; default exec-default")
	f.StringVar(&o.provider, "provider", "", "with --new: start it in a fresh sandbox of this provider (see agentbox providers), destroyed when it ends; default: the daemon's host")
	f.Int64Var(&o.timeout, "timeout-ms", 0, "with --new: wall-clock limit in milliseconds, when shorter than the policy's")
	f.BoolVar(&o.replay, "replay", true, "show the output the daemon still holds before following; --replay=false starts at new output")
	return cmd
}

// localTerminal is this side's terminal, in raw mode while attached.
type localTerminal struct{ fd int }

// terminalOf returns the local terminal when stdin is one.
func terminalOf(a *app, in io.Reader) *localTerminal {
	f, ok := in.(*os.File)
	if !ok || !a.env.isTerminal(f) {
		return nil
	}
	return &localTerminal{fd: int(f.Fd())}
}

func (t *localTerminal) size() (rows, cols int) {
	w, h, err := term.GetSize(t.fd)
	if err != nil || w <= 0 || h <= 0 {
		return 0, 0 // the daemon's default
	}
	return min(h, 1000), min(w, 1000)
}

// attach runs until the process ends, the user detaches or ctx ends.
// Every path out restores the local terminal: the deferred restore runs
// on return and on panic, and the signals that would end the program
// (SIGINT, SIGTERM, SIGHUP) end ctx instead.
func (a *app) attach(ctx context.Context, c *client.Client, p client.Process, local *localTerminal, in io.Reader, out, errOut io.Writer, replay bool) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP, os.Interrupt)
	defer signal.Stop(sigs)
	go func() {
		select {
		case s := <-sigs:
			cancel(fmt.Errorf("%v", s))
		case <-ctx.Done():
		}
	}()
	if local != nil {
		state, err := term.MakeRaw(local.fd)
		if err != nil {
			return fmt.Errorf("raw mode on the local terminal: %w", err)
		}
		defer func() { _ = term.Restore(local.fd, state) }()
		if p.TTY {
			go a.followSize(ctx, c, p.ID, local)
		}
	}
	if p.StdinOpen {
		go func() {
			if err := sendKeys(ctx, c, p.ID, in); errors.Is(err, errDetached) {
				cancel(errDetached)
			}
		}()
	}
	after := int64(0)
	if !replay {
		after = p.LastSeq
	}
	for ev, err := range c.ProcessStream(ctx, p.ID, after) {
		if err != nil {
			cause := context.Cause(ctx)
			if errors.Is(cause, errDetached) {
				fmt.Fprintf(errOut, "\r\nagentbox: detached from %s; `agentbox attach %s` comes back\r\n", p.ID, p.ID)
				return nil
			}
			if cause != nil && ctx.Err() != nil {
				return &ExitError{Code: ExitInterrupted, Err: cause}
			}
			return err
		}
		switch ev.Type {
		case "stdout", "stderr":
			_, _ = io.WriteString(out, ev.Output.Data) // the process draws on this terminal
		case "dropped":
			fmt.Fprintf(errOut, "\r\nagentbox: earlier output is no longer held (events %d to %d)\r\n", ev.Gap.FromSeq, ev.Gap.ToSeq)
		case "exit":
			x := ev.Exit
			res := client.ExecResult{ExitCode: -1, Signal: x.Signal, Error: x.Error}
			if x.ExitCode != nil {
				res.ExitCode = *x.ExitCode
			}
			if x.Signal != "" || x.Error != nil {
				why := x.Signal
				if x.Error != nil {
					why = x.Error.Message
				}
				fmt.Fprintf(errOut, "\r\nagentbox: %s ended: %s\r\n", p.ID, termSafe(why))
			}
			if code := execExitCode(res); code != 0 {
				return &ExitError{Code: code}
			}
			return nil
		}
	}
	return nil
}

// followSize sends the local terminal's size now and on every SIGWINCH.
func (a *app) followSize(ctx context.Context, c *client.Client, id string, local *localTerminal) {
	winch := make(chan os.Signal, 1)
	stop := notifyResize(winch)
	defer stop()
	lastR, lastC := 0, 0
	for {
		if r, cl := local.size(); r > 0 && (r != lastR || cl != lastC) {
			if c.Resize(ctx, id, r, cl) == nil {
				lastR, lastC = r, cl
			}
		}
		select {
		case <-winch:
		case <-ctx.Done():
			return
		}
	}
}

// errDetached ends an attach on the detach key.
var errDetached = errors.New("detached")

// sendKeys sends what is read from in to the process's input, chunk by
// chunk, until the detach key (errDetached), the end of in, or an error.
func sendKeys(ctx context.Context, c *client.Client, id string, in io.Reader) error {
	buf := make([]byte, inputChunk)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			keys, detach := splitDetach(buf[:n])
			if len(keys) > 0 {
				if serr := c.SendStdin(ctx, id, string(keys), false); serr != nil {
					return serr
				}
			}
			if detach {
				return errDetached
			}
		}
		if err != nil {
			return err
		}
	}
}

// splitDetach returns the input before the first detach key, and whether
// there was one (what follows it is dropped: the user is leaving).
func splitDetach(b []byte) (keys []byte, detach bool) {
	if i := bytes.IndexByte(b, detachKey); i >= 0 {
		return b[:i], true
	}
	return b, false
}

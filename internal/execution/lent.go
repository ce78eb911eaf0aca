package execution

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// ReasonSandboxClosed is the exit reason of a process whose lent sandbox
// (a session's) closed under it: the session ended, stopped or was
// deleted, and everything in its sandbox was killed.
const ReasonSandboxClosed = "sandbox_closed"

// procWrapper runs a process in a sandbox it does not own: "$1" is the
// directory to start in, the rest the command, which runs in a process
// group of its own (SIGINT and SIGQUIT back to their defaults where env
// can do it: an asynchronous command of a shell ignores them). Signals
// the wrapper gets are passed to that group; SIGALRM, which the API never
// sends for itself, kills the group and ends the wrapper (what SIGKILL
// means for a process), and SIGTSTP stops the group (SIGSTOP cannot be
// caught). In a lent sandbox a runtime's SIGKILL, and its timeout, would
// end the whole sandbox, the agent's processes too. The traps read $!
// when they run, so a signal at any moment finds what there is.
const procWrapper = `cd -- "$1" || exit 126
shift
trap 'kill -KILL -$! $! 2>/dev/null; exit 137' ALRM
trap 'kill -STOP -$! 2>/dev/null' TSTP
for s in HUP INT QUIT TERM USR1 USR2 WINCH CONT; do trap "kill -$s -\$! 2>/dev/null" $s; done
command -v setsid >/dev/null 2>&1 || exec "$@"
case $1 in *=*) ;; *) env --default-signal=INT true 2>/dev/null && set -- env --default-signal=INT,QUIT "$@" ;; esac
exec 3<&0
setsid "$@" <&3 3<&- &
exec 3<&-
while kill -0 $! 2>/dev/null; do wait $!; done
wait $!`

// procTTYWrapper is procWrapper for a process on a terminal. The runtime
// makes the wrapper a session leader with the terminal as its
// controlling terminal, and the wrapper's group the terminal's
// foreground group; the command stays in that session and that group
// (no setsid), so a shell it runs has job control and reading the
// terminal raises no SIGTTIN. The terminal's keys (^C, ^\, ^Z) reach the
// whole group, the wrapper too, which ignores them with a trap (a caught
// signal is the default again in the command). Other signals the wrapper
// gets are passed to its own group, itself ignoring them meanwhile;
// SIGALRM kills the group, the wrapper with it. A shell's job in a group
// of its own is ended by the hangup of the terminal, not by that kill.
const procTTYWrapper = `cd -- "$1" || exit 126
shift
trap 'kill -KILL 0' ALRM
trap : INT QUIT TSTP
fwd() { trap '' "$1"; kill -"$1" 0 2>/dev/null; trap "fwd $1" "$1"; }
for s in HUP TERM USR1 USR2 WINCH CONT; do trap "fwd $s" $s; done
case $1 in *=*) ;; *) env --default-signal=INT true 2>/dev/null && set -- env --default-signal=INT,QUIT "$@" ;; esac
exec 3<&0
"$@" <&3 3<&- &
exec 3<&-
while kill -0 $! 2>/dev/null; do wait $!; done
wait $!`

// lent is a process started in a sandbox lent by its owner (StartRequest
// Sandbox): it ends the process without ending the sandbox, enforces the
// timeout itself, and kills the process when the owner's Closing fires.
type lent struct {
	sandbox.Process
	timeout time.Duration

	// term is the terminal's master, for a process on a terminal: the
	// API's SIGINT, SIGQUIT and SIGSTOP act as the terminal's keys on
	// its foreground group (TIOCSIG).
	term *os.File

	mu     sync.Mutex
	killed bool   // the kill came from here or the API
	why    string // the reason of that kill, "" for a plain kill
	stop   func()
}

// lendCmd wraps cmd for a lent sandbox: the wrapper, the start directory
// resolved by the wrapper against the workspace (the sandbox's default
// directory), and the runtime's own timeout far enough behind the
// wrapper's that only a stuck wrapper meets it.
func lendCmd(cmd sandbox.Cmd, cwd string, limits sandbox.Limits, timeout time.Duration, tty bool) (sandbox.Cmd, time.Duration) {
	t := effectiveTimeout(timeout, limits.Timeout)
	if cwd == "" {
		cwd = "."
	}
	wrapper := procWrapper
	if tty {
		wrapper = procTTYWrapper
	}
	cmd.Args = append([]string{"/bin/sh", "-c", wrapper, "agentbox-process", cwd}, cmd.Args...)
	cmd.Dir, cmd.Timeout = "", 0
	if t > 0 {
		cmd.Timeout = t + runInGrace
	}
	return cmd, t
}

// lend watches p: its timeout, and closing (nil: never). term is the
// master of its terminal, nil without one.
func lend(p sandbox.Process, timeout time.Duration, closing <-chan struct{}, term *os.File) *lent {
	l := &lent{Process: p, timeout: timeout, term: term}
	done := make(chan struct{})
	var t *time.Timer
	if timeout > 0 {
		t = time.AfterFunc(timeout, func() { l.end(sandbox.ReasonTimeout) })
	}
	go func() {
		select {
		case <-closing:
			l.end(ReasonSandboxClosed)
		case <-done:
		}
	}()
	var once sync.Once
	l.stop = func() {
		once.Do(func() {
			if t != nil {
				t.Stop()
			}
			close(done)
		})
	}
	return l
}

// end kills the process's group for why.
func (l *lent) end(why string) {
	l.mu.Lock()
	if !l.killed {
		l.killed, l.why = true, why
	}
	l.mu.Unlock()
	_ = l.Process.Signal(syscall.SIGALRM) // an ended process needs nothing
}

// Signal implements sandbox.Process: SIGKILL kills the process's group,
// SIGSTOP stops it; other signals go to the group through the wrapper.
// On a terminal SIGINT, SIGQUIT and SIGSTOP are its keys: SIGINT, SIGQUIT
// and SIGTSTP to its foreground group.
func (l *lent) Signal(sig os.Signal) error {
	if l.term != nil {
		key := map[os.Signal]syscall.Signal{syscall.SIGINT: syscall.SIGINT, syscall.SIGQUIT: syscall.SIGQUIT, syscall.SIGSTOP: syscall.SIGTSTP}
		if k, ok := key[sig]; ok {
			err := signalPTY(l.term, k)
			if err != nil && errors.Is(l.Process.Signal(syscall.Signal(0)), os.ErrProcessDone) {
				return nil // it ended, and its terminal was closed
			}
			return err
		}
	}
	switch sig {
	case syscall.SIGKILL:
		l.mu.Lock()
		l.killed = true
		l.mu.Unlock()
		sig = syscall.SIGALRM
	case syscall.SIGSTOP:
		sig = syscall.SIGTSTP
	}
	err := l.Process.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// verdict corrects how a lent process ended: a kill from here reads as
// SIGKILL with its reason, and an exit after the sandbox began to close
// (closing fired: the owner closes it only after) as sandbox_closed
// whatever killed it.
func (l *lent) verdict(info *ProcessInfo, reason, msg string, closing <-chan struct{}) (string, string) {
	l.stop()
	l.mu.Lock()
	killed, why := l.killed, l.why
	l.mu.Unlock()
	select {
	case <-closing:
		why = ReasonSandboxClosed
		killed = killed || info.Signal != "" || info.ExitCode != 0
	default:
	}
	if !killed {
		return reason, msg
	}
	info.ExitCode, info.Signal = -1, "SIGKILL"
	switch why {
	case ReasonSandboxClosed:
		return why, "the sandbox the process ran in closed (its session ended, stopped or was deleted)"
	case sandbox.ReasonTimeout:
		return why, fmt.Sprintf("killed after the %s timeout", l.timeout)
	}
	return reason, msg
}

// Resolve finds a process of scope (StartRequest.Scope) by id, or else
// the latest of that scope with that tag, and returns its id: the other
// methods then reach exactly it. A process of another scope is not found.
func (s *Service) Resolve(scope, idOrTag string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.procs[idOrTag]; ok && p.scope == scope {
		return p.id, nil
	}
	var best *proc
	for _, p := range s.procs {
		if p.scope == scope && p.tag == idOrTag && (best == nil || p.started.After(best.started)) {
			best = p
		}
	}
	if best == nil {
		return "", fmt.Errorf("%w: %q", ErrNotFound, idOrTag)
	}
	return best.id, nil
}

// ListScope describes the known processes of scope, oldest first.
func (s *Service) ListScope(scope string) []ProcessInfo {
	return slices.DeleteFunc(s.List(), func(p ProcessInfo) bool { return p.Scope != scope })
}

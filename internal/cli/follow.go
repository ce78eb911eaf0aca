package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
)

// interruptTimeout bounds the interrupt request sent on the first Ctrl-C.
const interruptTimeout = 10 * time.Second

// follower shows a session's events as they happen and, for run, answers
// the permission requests and questions they carry.
type follower struct {
	c         *client.Client
	sessionID string
	errw      io.Writer // prompts and notes; safe for concurrent use
	in        io.Reader
	render    *Renderer  // nil with --json
	jsonOut   *jsonLines // non-nil with --json
	notify    func(chan<- os.Signal) func()
	stop      stopFunc // decides when following is over
	prompt    bool     // answer requests (run) or only show them (tail)
	// interruptTurn makes the first Ctrl-C interrupt the turn and the second
	// quit (run); otherwise Ctrl-C stops following (tail).
	interruptTurn bool
	ask           bool        // requests can be answered from in
	yes           bool        // allow permissions without asking when in cannot answer
	queue         []*pending  // requests waiting for an answer, oldest first
	lines         chan string // lines read from in, once needed
	stdinEOF      bool
	done          chan struct{}
}

// stopFunc is called for every event, with the event and its payload as
// decodeForTerminal returns them (p is nil when the payload does not
// decode): whatever it puts in err reaches the terminal, so it never sees
// the raw text. done ends following, with err.
type stopFunc func(ctx context.Context, ev event.Event, p event.Payload) (done bool, err error)

// pending is a permission request or a question waiting for the user.
type pending struct {
	id    string
	perm  *event.PermissionRequested
	quest *event.QuestionRequested
	shown bool
}

// signalGrace is how long a cancelled parent context waits for the SIGINT
// that may have caused it (see follow).
const signalGrace = 250 * time.Millisecond

// follow streams the session's events after the given seq until stop says
// so, the context ends, or Ctrl-C is pressed (twice with interruptTurn).
func (f *follower) follow(parent context.Context, after int64) error {
	// With interruptTurn the first Ctrl-C must not end the requests that
	// follow the turn, yet a main that cancels the command's context on
	// SIGINT (signal.NotifyContext) does just that. So the turn is followed
	// under a context detached from the parent, and the parent's end counts
	// as the Ctrl-C that comes with it, or as an order to stop when none
	// does.
	base, parentDone := parent, (<-chan struct{})(nil)
	if f.interruptTurn {
		base, parentDone = context.WithoutCancel(parent), parent.Done()
	}
	ctx, cancel := context.WithCancel(base)
	f.done = make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		cancel()
		close(f.done)
		wg.Wait()
	}()

	type item struct {
		ev  event.Event
		err error
	}
	evc := make(chan item)
	wg.Go(func() {
		st := f.c.Stream(ctx, f.sessionID, after, client.OnReconnect(func(attempt int, err error, d time.Duration) {
			if attempt > 1 {
				fmt.Fprintf(f.errw, "connection lost (%s); retrying in %s\n", errText(err), d.Round(time.Millisecond))
			}
		}))
		for ev, err := range st.All() {
			select {
			case evc <- item{ev, err}:
			case <-ctx.Done():
				return
			}
		}
	})

	sigc := make(chan os.Signal, 2)
	if f.notify != nil {
		defer f.notify(sigc)()
	}
	var interrupted bool
	var lastSignal time.Time
	// onSignal handles Ctrl-C; a non-nil error ends following.
	onSignal := func() error {
		lastSignal = time.Now()
		if !f.interruptTurn {
			return errStop // tail: Ctrl-C is how one stops following
		}
		if interrupted {
			return &ExitError{Code: ExitInterrupted, Err: errors.New("interrupted")}
		}
		interrupted = true
		fmt.Fprintln(f.errw, "\ninterrupting the turn (Ctrl-C again to quit)")
		ictx, icancel := context.WithTimeout(ctx, interruptTimeout)
		defer icancel()
		if _, err := f.c.Interrupt(ictx, f.sessionID); err != nil && !client.IsNoTurn(err) {
			fmt.Fprintf(f.errw, "interrupt failed: %s\n", errText(err))
		}
		return nil
	}
	for {
		var lines <-chan string
		if len(f.queue) > 0 {
			lines = f.lines
		}
		var err error
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-parentDone:
			parentDone = nil
			if time.Since(lastSignal) < signalGrace {
				break // the Ctrl-C already handled
			}
			select {
			case <-sigc:
				err = onSignal()
			case <-time.After(signalGrace):
				err = context.Cause(parent)
			}
		case it := <-evc:
			if err = it.err; err != nil {
				break
			}
			var done bool
			if done, err = f.handle(ctx, it.ev); done && err == nil {
				err = errStop
			}
		case line, ok := <-lines:
			if !ok {
				f.lines, f.stdinEOF = nil, true
				fmt.Fprintln(f.errw, "(no more input: answering no)")
				line = ""
			}
			f.answer(ctx, line)
		case <-sigc:
			err = onSignal()
		}
		if err != nil {
			if f.render != nil {
				f.render.Flush()
			}
			if errors.Is(err, errStop) || !f.interruptTurn && parent.Err() != nil {
				return nil // tail stops quietly when told to (Ctrl-C or SIGTERM through the context)
			}
			return err
		}
		f.showPrompt()
	}
}

// errStop ends following without an error.
var errStop = errors.New("stop following")

// handle shows one event and tracks requests; done reports the end.
func (f *follower) handle(ctx context.Context, ev event.Event) (done bool, err error) {
	if f.jsonOut != nil {
		if err := f.jsonOut.write(ev); err != nil {
			return true, err
		}
	} else {
		f.render.Render(ev)
		if err := f.render.Err(); err != nil {
			return true, err
		}
	}
	if f.prompt {
		switch ev.Type {
		case event.TypePermissionRequested, event.TypeQuestionRequested:
			if p := f.pendingOf(ev); p != nil {
				f.queue = append(f.queue, p)
				if !f.ask || f.stdinEOF {
					f.answer(ctx, "")
				}
			}
		case event.TypePermissionResolved, event.TypeQuestionResolved:
			f.resolved(ev)
		}
	}
	if f.stop == nil {
		return false, nil
	}
	sev, p, _ := decodeForTerminal(ev)
	return f.stop(ctx, sev, p)
}

// pendingOf reads a request to ask, with its text made inert for the
// terminal the prompt goes to.
func (f *follower) pendingOf(ev event.Event) *pending {
	_, p, err := decodeForTerminal(ev)
	if err != nil {
		return nil
	}
	switch p := p.(type) {
	case *event.PermissionRequested:
		return &pending{id: p.ID, perm: p}
	case *event.QuestionRequested:
		return &pending{id: p.ID, quest: p}
	}
	return nil
}

// resolved drops a request that was settled, by us or elsewhere.
func (f *follower) resolved(ev event.Event) {
	var id string
	switch _, p, _ := decodeForTerminal(ev); p := p.(type) {
	case *event.PermissionResolved:
		id = p.ID
	case *event.QuestionResolved:
		id = p.ID
	}
	i := slices.IndexFunc(f.queue, func(p *pending) bool { return p.id == id })
	if i < 0 {
		return
	}
	if f.queue[i].shown {
		fmt.Fprintln(f.errw, "\n(answered elsewhere)")
	}
	f.queue = slices.Delete(f.queue, i, i+1)
}

// showPrompt asks the oldest pending request, once.
func (f *follower) showPrompt() {
	if len(f.queue) == 0 || f.queue[0].shown || !f.ask || f.stdinEOF {
		return
	}
	p := f.queue[0]
	p.shown = true
	f.startLines()
	if p.perm != nil {
		fmt.Fprintf(f.errw, "Allow %s? [y/N] ", p.perm.Title)
		return
	}
	q := p.quest
	fmt.Fprintln(f.errw, q.Prompt)
	for i, o := range q.Options {
		fmt.Fprintf(f.errw, "  %d) %s\n", i+1, o.Label)
	}
	switch {
	case len(q.Options) == 0:
		fmt.Fprint(f.errw, "Answer (empty to decline): ")
	case q.FreeText:
		fmt.Fprintf(f.errw, "Pick 1-%d or type an answer (empty to decline): ", len(q.Options))
	default:
		fmt.Fprintf(f.errw, "Pick 1-%d (empty to decline): ", len(q.Options))
	}
}

// answer settles the oldest pending request with the user's line; an empty
// line (or no way to ask) means no.
func (f *follower) answer(ctx context.Context, line string) {
	if len(f.queue) == 0 {
		return
	}
	p := f.queue[0]
	line = strings.TrimSpace(line)
	var err error
	if p.perm != nil {
		ans := f.permissionAnswer(p.perm, line)
		_, err = f.c.AnswerPermission(ctx, f.sessionID, p.id, ans)
	} else {
		ans, ok := questionAnswer(p.quest, line)
		if !ok {
			fmt.Fprintf(f.errw, "Please pick 1-%d: ", len(p.quest.Options))
			return
		}
		if !f.ask || f.stdinEOF {
			fmt.Fprintf(f.errw, "question %q declined: %s\n", p.quest.Prompt, f.noInputReason())
			ans.By = string(event.ByPolicy)
		}
		_, err = f.c.AnswerQuestion(ctx, f.sessionID, p.id, ans)
	}
	f.queue = f.queue[1:]
	switch {
	case err == nil:
	case client.IsAlreadyResolved(err):
		fmt.Fprintln(f.errw, "(already answered elsewhere)")
	default:
		fmt.Fprintf(f.errw, "answering %s failed: %s\n", p.id, errText(err))
	}
}

// permissionAnswer turns a line into a decision, picking the request's
// allow-once or deny-once option: an answer is never turned into a standing
// rule from here.
func (f *follower) permissionAnswer(p *event.PermissionRequested, line string) client.PermissionAnswer {
	allow, auto, why := false, false, ""
	switch {
	case !f.ask || f.stdinEOF:
		// Nobody is asked: the answer is the CLI's rule (--yes, or no),
		// and the log records it as by policy, never as a person's.
		allow, auto = f.yes, true
		verb := "denied"
		if allow {
			verb = "allowed (--yes)"
		}
		why = f.noInputReason()
		if !allow {
			why += "; pass --yes to allow"
		}
		fmt.Fprintf(f.errw, "permission %q %s: %s\n", p.Title, verb, why)
	default:
		l := strings.ToLower(line)
		allow = l == "y" || l == "yes"
	}
	want, decision := event.OptionDenyOnce, event.DecisionDeny
	if allow {
		want, decision = event.OptionAllowOnce, event.DecisionAllow
	}
	ans := client.PermissionAnswer{Decision: string(decision)}
	if auto {
		ans.By = string(event.ByPolicy)
		if !allow {
			ans.Message = "nobody was asked (" + f.noInputReason() + ")"
		}
	}
	for _, o := range p.Options {
		if o.Kind == want {
			ans.OptionID = o.ID
			break
		}
	}
	return ans
}

// noInputReason says why a request is answered without asking.
func (f *follower) noInputReason() string {
	if f.stdinEOF {
		return "no more input"
	}
	return "stdin is not a terminal"
}

// questionAnswer reads an answer: an option number or label, free text when
// allowed, or empty to decline. ok is false for an answer to ask again.
func questionAnswer(q *event.QuestionRequested, line string) (client.QuestionAnswer, bool) {
	if line == "" {
		return client.QuestionAnswer{Cancel: true}, true
	}
	if n, err := strconv.Atoi(line); err == nil && n >= 1 && n <= len(q.Options) {
		return client.QuestionAnswer{OptionID: q.Options[n-1].ID}, true
	}
	for _, o := range q.Options {
		if strings.EqualFold(o.Label, line) || o.ID == line {
			return client.QuestionAnswer{OptionID: o.ID}, true
		}
	}
	if q.FreeText || len(q.Options) == 0 {
		return client.QuestionAnswer{Answer: line}, true
	}
	return client.QuestionAnswer{}, false
}

// startLines starts reading lines from in, once. The reader stops at the
// end of input or when following ends; on a terminal it may stay blocked in
// a read until the process exits, which is harmless.
func (f *follower) startLines() {
	if f.lines != nil || f.stdinEOF {
		return
	}
	ch := make(chan string)
	f.lines = ch
	done := f.done
	go func() {
		defer close(ch)
		br := bufio.NewReader(f.in)
		for {
			s, err := br.ReadString('\n')
			if s != "" || err == nil {
				select {
				case ch <- strings.TrimRight(s, "\r\n"):
				case <-done:
					return
				}
			}
			if err != nil {
				return // end of input, or a read error: both mean no more answers
			}
		}
	}()
}

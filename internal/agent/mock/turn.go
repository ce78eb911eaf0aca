package mock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/textdiff"
)

// errInterrupted is how steps report that the turn's context ended.
var errInterrupted = errors.New("mock: turn interrupted")

// endTurn is how a step ends the turn early with a result.
type endTurn struct{ result agent.Result }

func (e *endTurn) Error() string { return "mock: turn ended: " + e.result.Message }

// turn runs one script. Its fields are only touched by the goroutine that
// runs Prompt.
type turn struct {
	s     *session
	ctx   context.Context
	usage event.Usage
	// gated is set by a permission step and consumed by the next risky
	// step; gateTitle is that step's title for the request.
	gated     bool
	gateTitle string
}

func (t *turn) run(text string) (agent.Result, error) {
	steps, err := script(text)
	if err != nil {
		if err := t.emit(&event.Error{Code: "invalid_script", Message: err.Error()}); err != nil {
			return t.stopped(err)
		}
		return t.result(event.StopError, err.Error()), nil
	}
	for _, st := range steps {
		if t.ctx.Err() != nil {
			return t.result(event.StopInterrupted, ""), nil
		}
		if err := t.step(st); err != nil {
			return t.stopped(err)
		}
	}
	return t.result(event.StopEndTurn, ""), nil
}

// stopped turns a step's error into the turn's outcome.
func (t *turn) stopped(err error) (agent.Result, error) {
	var end *endTurn
	switch {
	case errors.Is(err, errInterrupted) || t.ctx.Err() != nil:
		// An interrupt is a normal end of a turn, not a failure.
		return t.result(event.StopInterrupted, ""), nil
	case errors.As(err, &end):
		return end.result, nil
	}
	return agent.Result{}, err
}

func (t *turn) result(stop event.StopReason, msg string) agent.Result {
	u := t.usage
	return agent.Result{StopReason: stop, Usage: &u, Message: msg}
}

func (t *turn) step(st Step) error {
	switch st.Kind {
	case KindText:
		return t.stream(event.ItemMessage, chunks(st.Text, st.Chunk), time.Duration(st.Delay))
	case KindReasoning:
		return t.stream(event.ItemReasoning, chunks(st.Text, st.Chunk), time.Duration(st.Delay))
	case KindLong:
		parts := make([]string, st.Count)
		for i := range parts {
			parts[i] = fmt.Sprintf("%d ", i+1)
		}
		return t.stream(event.ItemMessage, parts, time.Duration(st.Delay))
	case KindTool:
		return t.tool(st)
	case KindCommand:
		return t.command(st)
	case KindWrite:
		return t.write(st)
	case KindPermission:
		t.gated, t.gateTitle = true, st.Text
		return nil
	case KindQuestion:
		return t.question(st)
	case KindPlan:
		it := event.Item{ID: ids.New(ids.Item), Kind: event.ItemPlan, Status: event.StatusInProgress, Entries: st.Entries}
		if err := t.emit(&event.ItemStarted{Item: it}); err != nil {
			return err
		}
		it.Status = event.StatusCompleted
		return t.finish(it)
	case KindError:
		msg := orDefault(st.Text, "the mock agent failed on purpose")
		if st.Fatal {
			return fmt.Errorf("mock: %s", msg)
		}
		if err := t.emit(&event.Error{Code: orDefault(st.Code, "mock_error"), Message: msg, Retryable: st.Retryable}); err != nil {
			return err
		}
		return &endTurn{t.result(event.StopError, msg)}
	case KindSleep:
		return t.sleep(time.Duration(st.Duration))
	case KindNative:
		ev := event.New(event.SourceAgent, &event.Native{NativeType: orDefault(st.NativeType, "mock/native"), Payload: st.Payload})
		ev.Raw, _ = json.Marshal(st) // the "native message" is the step itself
		return t.emitEvents(ev)
	}
	return fmt.Errorf("mock: unknown step kind %q", st.Kind) // validate prevents it
}

// emit appends agent events through the host.
func (t *turn) emit(ps ...event.Payload) error {
	evs := make([]event.Event, len(ps))
	for i, p := range ps {
		evs[i] = event.New(event.SourceAgent, p)
	}
	return t.emitEvents(evs...)
}

func (t *turn) emitEvents(evs ...event.Event) error {
	if err := t.s.host.Emit(t.ctx, evs...); err != nil {
		if t.ctx.Err() != nil {
			return errInterrupted
		}
		return fmt.Errorf("mock: emit: %w", err)
	}
	return nil
}

// finish emits an item's item.completed. It is the one event a turn still
// owes after an interruption, so it is then emitted on a context that is
// not cancelled, and errInterrupted is returned.
func (t *turn) finish(it event.Item) error {
	ctx := t.ctx
	if ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	if err := t.s.host.Emit(ctx, event.New(event.SourceAgent, &event.ItemCompleted{Item: it})); err != nil && t.ctx.Err() == nil {
		return fmt.Errorf("mock: emit: %w", err)
	}
	if t.ctx.Err() != nil {
		return errInterrupted
	}
	return nil
}

// abort completes an open item as failed because the turn was interrupted.
func (t *turn) abort(it event.Item) error {
	it.Status, it.Error = event.StatusFailed, "interrupted"
	_ = t.finish(it)
	return errInterrupted
}

// fail completes an open item as failed; the turn goes on.
func (t *turn) fail(it event.Item, err error) error {
	it.Status, it.Error = event.StatusFailed, err.Error()
	return t.finish(it)
}

// sleep waits d or until the turn is interrupted.
func (t *turn) sleep(d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-t.ctx.Done():
		return errInterrupted
	}
}

// chunks splits s into pieces of n runes (defaultChunk if n is 0).
func chunks(s string, n int) []string {
	if n <= 0 {
		n = defaultChunk
	}
	var out []string
	r := []rune(s)
	for len(r) > 0 {
		k := min(n, len(r))
		out = append(out, string(r[:k]))
		r = r[k:]
	}
	return out
}

func countWords(s string) int64 { return int64(len(strings.Fields(s))) }

// stream emits a message or reasoning item whose text arrives as deltas.
func (t *turn) stream(kind event.ItemKind, parts []string, delay time.Duration) error {
	it := event.Item{ID: ids.New(ids.Item), Kind: kind, Status: event.StatusInProgress}
	if kind == event.ItemMessage {
		it.Role = event.RoleAssistant
	}
	if err := t.emit(&event.ItemStarted{Item: it}); err != nil {
		return err
	}
	var sb strings.Builder
	withText := func() event.Item {
		t.usage.OutputTokens += countWords(sb.String())
		it.Content = []event.ContentPart{event.TextPart(sb.String())}
		return it
	}
	for _, p := range parts {
		if delay > 0 && t.sleep(delay) != nil {
			return t.abort(withText())
		}
		if err := t.emit(&event.ItemDelta{ItemID: it.ID, Field: event.DeltaText, Delta: p}); err != nil {
			if errors.Is(err, errInterrupted) {
				return t.abort(withText())
			}
			return err
		}
		sb.WriteString(p)
		if t.ctx.Err() != nil {
			return t.abort(withText())
		}
	}
	it = withText()
	it.Status = event.StatusCompleted
	return t.finish(it)
}

// say streams an assistant message in default chunks.
func (t *turn) say(text string) error {
	return t.stream(event.ItemMessage, chunks(text, 0), 0)
}

// verdict is what the permission mode makes of a risky step.
type verdict int

const (
	proceed verdict = iota
	ask
	decline
)

func (t *turn) verdict(k Kind, gated bool) verdict {
	switch t.s.mode {
	case modePlan:
		if k == KindWrite || k == KindCommand || gated {
			return decline
		}
	case modeBypass:
	case modeAcceptEdits:
		if gated && k != KindWrite {
			return ask
		}
	default:
		if gated {
			return ask
		}
	}
	return proceed
}

var permissionOptions = []event.PermissionOption{
	{ID: "allow", Kind: event.OptionAllowOnce, Label: "Allow"},
	{ID: "deny", Kind: event.OptionDenyOnce, Label: "Deny"},
}

// permit settles whether the risky step of the open item it may run,
// asking the host when the mode says so. A refusal comes with its reason.
func (t *turn) permit(k Kind, it event.Item, req agent.PermissionRequest) (ok bool, reason string, err error) {
	gated, title := t.gated, t.gateTitle
	t.gated, t.gateTitle = false, ""
	switch t.verdict(k, gated) {
	case proceed:
		return true, "", nil
	case decline:
		return false, "the session is in plan mode", nil
	}
	req.ItemID = it.ID
	req.Title = orDefault(title, req.Title)
	req.Options = permissionOptions
	ans, err := t.s.host.RequestPermission(t.ctx, req)
	if err != nil {
		if t.ctx.Err() != nil {
			return false, "", errInterrupted
		}
		return false, "", fmt.Errorf("mock: permission: %w", err)
	}
	if ans.Decision == event.DecisionAllow {
		return true, "", nil
	}
	reason = "permission denied"
	if ans.By == event.ByTimeout {
		reason = "the permission request timed out"
	}
	if ans.Message != "" {
		reason += " (" + ans.Message + ")"
	}
	return false, reason, nil
}

// guard runs permit for the open item it and handles every outcome but
// "allowed": it completes the item as declined (and says so), failed or
// interrupted. It reports whether the step may go on; when it may not, err
// is what the step returns.
func (t *turn) guard(k Kind, it event.Item, req agent.PermissionRequest, what string) (bool, error) {
	ok, reason, err := t.permit(k, it, req)
	switch {
	case errors.Is(err, errInterrupted):
		return false, t.abort(it)
	case err != nil:
		_ = t.fail(it, err)
		return false, err
	case !ok:
		it.Status, it.Error = event.StatusDeclined, reason
		if err := t.finish(it); err != nil {
			return false, err
		}
		return false, t.say(fmt.Sprintf("I did not %s: %s.", what, reason))
	}
	return true, nil
}

func (t *turn) tool(st Step) error {
	input := st.Input
	if len(input) == 0 {
		input = json.RawMessage(`{}`)
	}
	it := event.Item{ID: ids.New(ids.Item), Kind: event.ItemToolCall, Status: event.StatusInProgress, Name: st.Name, Input: input}
	if err := t.emit(&event.ItemStarted{Item: it}); err != nil {
		return err
	}
	req := agent.PermissionRequest{Kind: event.PermTool, Title: "Use the tool " + st.Name, Tool: st.Name, Input: input}
	if ok, err := t.guard(KindTool, it, req, "use the tool "+st.Name); !ok {
		return err
	}
	if st.Error != "" {
		return t.fail(it, errors.New(st.Error))
	}
	it.Status, it.Output = event.StatusCompleted, st.Output
	return t.finish(it)
}

func (t *turn) question(st Step) error {
	ans, err := t.s.host.AskQuestion(t.ctx, agent.Question{Prompt: st.Text, Options: st.Options, FreeText: st.FreeText || len(st.Options) == 0})
	if err != nil {
		if t.ctx.Err() != nil {
			return errInterrupted
		}
		return fmt.Errorf("mock: question: %w", err)
	}
	answer := ans.Text
	if answer == "" {
		for _, o := range st.Options {
			if o.ID == ans.OptionID {
				answer = o.Label
			}
		}
	}
	switch {
	case ans.Cancelled:
		return t.say("You did not answer, so I carry on without an answer.")
	case answer == "":
		return t.say("You answered, but with nothing I can read.")
	}
	return t.say("You answered: " + answer)
}

// confine checks that a script's path is relative and stays inside the
// working directory, lexically; os.Root then refuses symlinks out of it.
func confine(p string) (string, error) {
	if filepath.IsAbs(p) || !filepath.IsLocal(p) {
		return "", fmt.Errorf("refused: %q is not a relative path inside the working directory", p)
	}
	return filepath.Clean(p), nil
}

func (t *turn) write(st Step) error {
	it := event.Item{ID: ids.New(ids.Item), Kind: event.ItemFileChange, Status: event.StatusInProgress,
		Changes: []event.FileChange{{Path: filepath.ToSlash(st.Path), Kind: event.FileAdd}}}
	rel, err := confine(st.Path)
	if err != nil {
		t.gated, t.gateTitle = false, "" // the refused write used up the permission step
		if err := t.emit(&event.ItemStarted{Item: it}); err != nil {
			return err
		}
		return t.fail(it, err)
	}
	path := filepath.ToSlash(rel)
	it.Changes[0].Path = path

	fs := t.files()
	old, created, err := fs.read(t.ctx, rel)
	if !created {
		it.Changes[0].Kind = event.FileUpdate
	}
	if err := t.emit(&event.ItemStarted{Item: it}); err != nil {
		return err
	}
	if err != nil {
		t.gated, t.gateTitle = false, ""
		if t.ctx.Err() != nil {
			return t.abort(it)
		}
		return t.fail(it, fmt.Errorf("refused: %w", err))
	}
	diff := textdiff.Unified(path, string(old), st.Content, created)

	input, _ := json.Marshal(map[string]string{"path": path})
	req := agent.PermissionRequest{Kind: event.PermFileWrite, Title: "Write " + path, Detail: diff, Tool: "write", Input: input}
	if ok, err := t.guard(KindWrite, it, req, "write "+path); !ok {
		return err
	}
	if err := fs.write(t.ctx, rel, st.Content); err != nil {
		if t.ctx.Err() != nil {
			return t.abort(it)
		}
		return t.fail(it, err)
	}
	it.Status, it.Changes[0].Diff = event.StatusCompleted, diff
	return t.finish(it)
}

// files is where the session's file steps read and write: the working
// directory on the host, or, when the session is sandboxed, the same
// directory inside its sandbox, like any agent's tools (so the sandbox's
// rules and its checked commit apply to the mock's writes too).
func (t *turn) files() fileSystem {
	if t.s.sandbox != nil {
		return sandboxFiles{sb: t.s.sandbox, cwd: t.s.cwd}
	}
	return hostFiles{cwd: t.s.cwd}
}

// fileSystem reads and writes files by path relative to the working
// directory. read reports created when the file does not exist yet.
type fileSystem interface {
	read(ctx context.Context, rel string) (data []byte, created bool, err error)
	write(ctx context.Context, rel, content string) error
}

// hostFiles is the working directory on the host: os.Root keeps symlinks
// from leading out of it.
type hostFiles struct{ cwd string }

func (h hostFiles) read(_ context.Context, rel string) ([]byte, bool, error) {
	root, err := os.OpenRoot(h.cwd)
	if err != nil {
		return nil, false, fmt.Errorf("open the working directory: %w", err)
	}
	defer root.Close()
	b, err := root.ReadFile(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, true, nil
	}
	return b, false, err
}

func (h hostFiles) write(_ context.Context, rel, content string) error {
	root, err := os.OpenRoot(h.cwd)
	if err != nil {
		return fmt.Errorf("open the working directory: %w", err)
	}
	defer root.Close()
	if dir := filepath.Dir(rel); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return root.WriteFile(rel, []byte(content), 0o644)
}

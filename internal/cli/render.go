package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/event"
)

// ANSI styles.
const (
	styleReset  = "\x1b[0m"
	styleBold   = "\x1b[1m"
	styleDim    = "\x1b[2m"
	styleRed    = "\x1b[31m"
	styleGreen  = "\x1b[32m"
	styleYellow = "\x1b[33m"
	styleCyan   = "\x1b[36m"
)

// Prefixes of the rendered lines.
const (
	indentOutput    = "    "
	prefixReasoning = "│ "
	prefixUser      = "> "
)

// defaultMaxLines caps the output and diff lines shown per item.
const defaultMaxLines = 40

// Renderer turns a session's events into readable terminal text: message
// text streamed from deltas as it arrives, reasoning dimmed and prefixed,
// tools and commands as one-line headers with their output indented, file
// changes with their diff, plans as checklists, problems in red and a
// summary line per turn. It keeps per-item state, so it must see a
// session's events in order; it is not safe for concurrent use.
type Renderer struct {
	w     io.Writer
	color bool
	// MaxLines caps the output and diff lines shown per item; the rest is
	// counted in a "… N more lines" note. Zero shows everything.
	MaxLines int

	items map[string]*itemState
	open  string // the item whose streamed text ends the output, if any
	bol   bool   // the output is at the beginning of a line
	err   error  // the first write error
}

// itemState is what the renderer remembers of a started item.
type itemState struct {
	kind      event.ItemKind
	role      event.Role
	name      string // tool name, command or query, for a late header
	header    bool   // the header line was printed
	streamed  bool   // text arrived as deltas
	outStream bool   // output arrived as deltas
	lines     int    // output lines printed
	hidden    int    // output lines not printed (over MaxLines)
	hiddenEnd bool   // the hidden output ends without a newline
}

// NewRenderer returns a renderer writing to w, with ANSI colours when color
// is true.
func NewRenderer(w io.Writer, color bool) *Renderer {
	return &Renderer{w: w, color: color, MaxLines: defaultMaxLines, items: map[string]*itemState{}, bol: true}
}

// Err returns the first error writing the output.
func (r *Renderer) Err() error { return r.err }

// Flush ends a partly written line.
func (r *Renderer) Flush() { r.endLine() }

// Render writes one event. Every string in it is made inert first (see
// decodeForTerminal): the colour codes added here are the only control
// sequences the output holds.
func (r *Renderer) Render(ev event.Event) {
	ev, p, err := decodeForTerminal(ev)
	if err != nil {
		r.line(r.paint(styleRed, fmt.Sprintf("? undecodable %s event (seq %d): %v", ev.Type, ev.Seq, err)))
		return
	}
	switch p := p.(type) {
	case *event.SessionStarted:
		verb := "started"
		if p.Resumed {
			verb = "resumed"
		}
		parts := []string{fmt.Sprintf("● session %s %s", ev.SessionID, verb), p.Agent}
		if p.Model != "" {
			parts = append(parts, "model "+p.Model)
		}
		if p.Cwd != "" {
			parts = append(parts, p.Cwd)
		}
		r.line(r.paint(styleDim, strings.Join(parts, " · ")))
	case *event.SessionConfigured:
		r.line(r.paint(styleDim, fmt.Sprintf("● session now uses model %s, mode %s", dash(p.Model), dash(p.Mode))))
	case *event.SessionEnded:
		s := "● session ended: " + string(p.Reason)
		if p.Message != "" {
			s += ": " + p.Message
		}
		if p.ExitCode != nil {
			s += fmt.Sprintf(" (exit code %d)", *p.ExitCode)
		}
		style := styleDim
		if p.Reason == event.EndError {
			style = styleRed
		}
		r.line(r.paint(style, s))
		if p.StderrTail != "" {
			r.block(indentOutput, styleDim, p.StderrTail)
		}
	case *event.TurnStarted:
		r.line(r.paint(styleDim, "── turn "+p.TurnID+" ──"))
	case *event.TurnCompleted:
		r.turnCompleted(p)
	case *event.ItemStarted:
		r.itemStarted(p.Item)
	case *event.ItemDelta:
		r.itemDelta(p)
	case *event.ItemCompleted:
		r.itemCompleted(p.Item)
	case *event.PermissionRequested:
		s := fmt.Sprintf("? permission [%s] %s", p.Kind, p.Title)
		if p.Host != "" {
			s += fmt.Sprintf(" (%s)", hostPort(p.Host, p.Port))
		}
		r.line(r.paint(styleYellow, s))
		if p.Detail != "" {
			r.block(indentOutput, "", p.Detail)
		}
	case *event.PermissionResolved:
		s, style := "  ✓ allowed", styleGreen
		if p.Decision != event.DecisionAllow {
			s, style = "  ✗ denied", styleRed
		}
		s += " by " + string(p.By)
		if p.Message != "" {
			s += ": " + p.Message
		}
		r.line(r.paint(style, s))
	case *event.QuestionRequested:
		r.line(r.paint(styleCyan, "? question: "+p.Prompt))
		for i, o := range p.Options {
			r.line(fmt.Sprintf("%s%d. %s", indentOutput, i+1, o.Label))
		}
	case *event.QuestionResolved:
		var s string
		switch {
		case p.Cancelled:
			s = "  cancelled"
		case p.Answer != "":
			s = "  answered: " + p.Answer
		default:
			s = "  answered: option " + p.OptionID
		}
		r.line(r.paint(styleDim, s+" (by "+string(p.By)+")"))
	case *event.SandboxViolation:
		s := fmt.Sprintf("! sandbox %s %s access: %s", p.Action, p.Kind, p.Detail)
		switch {
		case p.Host != "":
			s += " (" + hostPort(p.Host, p.Port) + ")"
		case p.Path != "":
			s += " (" + p.Path + ")"
		}
		style := styleRed
		if p.Action == event.ActionAsked {
			style = styleYellow
		}
		r.line(r.paint(style, s))
	case *event.Error:
		s := "✗ error"
		if p.Code != "" {
			s += " [" + p.Code + "]"
		}
		s += ": " + p.Message
		if p.Retryable {
			s += " (retryable)"
		}
		r.line(r.paint(styleRed, s))
	case *event.Native:
		r.line(r.paint(styleDim, "· native "+p.NativeType))
	}
}

func (r *Renderer) turnCompleted(p *event.TurnCompleted) {
	mark, style := "✓", styleGreen
	switch p.StopReason {
	case event.StopEndTurn:
	case event.StopError:
		mark, style = "✗", styleRed
	default:
		mark, style = "■", styleYellow
	}
	head := mark + " " + string(p.StopReason)
	if p.Message != "" {
		head += ": " + p.Message
	}
	parts := []string{r.paint(style, head), formatDuration(time.Duration(p.DurationMS) * time.Millisecond)}
	if u := p.Usage; u != nil {
		parts = append(parts, fmt.Sprintf("%s in / %s out tokens", thousands(u.InputTokens), thousands(u.OutputTokens)))
		if u.CacheReadTokens > 0 || u.CacheWriteTokens > 0 {
			parts = append(parts, fmt.Sprintf("cache %s read / %s written", thousands(u.CacheReadTokens), thousands(u.CacheWriteTokens)))
		}
		if u.CostUSD != nil {
			parts = append(parts, fmt.Sprintf("$%.4f", *u.CostUSD))
		}
	}
	r.line(strings.Join(parts, r.paint(styleDim, " · ")))
}

func (r *Renderer) state(id string, kind event.ItemKind) *itemState {
	st := r.items[id]
	if st == nil {
		st = &itemState{kind: kind}
		r.items[id] = st
	}
	if kind != "" {
		st.kind = kind
	}
	return st
}

func (r *Renderer) itemStarted(it event.Item) {
	st := r.state(it.ID, it.Kind)
	st.role = it.Role
	switch it.Kind {
	case event.ItemMessage, event.ItemReasoning:
		if text := it.Text(); text != "" {
			r.text(it.ID, st, text)
			st.streamed = true
		}
	case event.ItemCommand, event.ItemWebSearch:
		r.header(st, it)
	case event.ItemToolCall, event.ItemMCPToolCall:
		if len(it.Input) > 0 {
			r.header(st, it)
		} else {
			st.name = toolName(it)
		}
	}
}

func (r *Renderer) itemDelta(d *event.ItemDelta) {
	st := r.state(d.ItemID, "")
	switch d.Field {
	case event.DeltaText:
		r.text(d.ItemID, st, d.Delta)
		st.streamed = true
	case event.DeltaOutput:
		if !st.header {
			r.header(st, event.Item{Kind: st.kind})
		}
		r.output(d.ItemID, st, d.Delta)
		st.outStream = true
	}
}

func (r *Renderer) itemCompleted(it event.Item) {
	st := r.state(it.ID, it.Kind)
	defer delete(r.items, it.ID)
	if st.role == "" {
		st.role = it.Role
	}
	switch it.Kind {
	case event.ItemMessage, event.ItemReasoning:
		if !st.streamed {
			r.text(it.ID, st, it.Text())
		}
		r.endLine()
	case event.ItemCommand, event.ItemToolCall, event.ItemMCPToolCall, event.ItemWebSearch:
		if !st.header {
			r.header(st, it)
		}
		if !st.outStream && it.Output != "" {
			r.output(it.ID, st, it.Output)
		}
		r.endOutput(st)
		switch {
		case it.ExitCode != nil && *it.ExitCode != 0:
			r.line(r.paint(styleRed, fmt.Sprintf("%sexit code %d", indentOutput, *it.ExitCode)))
		case it.Error != "":
			r.line(r.paint(styleRed, indentOutput+"error: "+it.Error))
		case it.Status == event.StatusFailed:
			r.line(r.paint(styleRed, indentOutput+"failed"))
		case it.Status == event.StatusDeclined:
			r.line(r.paint(styleYellow, indentOutput+"declined"))
		}
	case event.ItemFileChange:
		for _, ch := range it.Changes {
			style := styleYellow
			switch ch.Kind {
			case event.FileAdd:
				style = styleGreen
			case event.FileDelete:
				style = styleRed
			}
			r.line(r.paint(style, fmt.Sprintf("± %s %s", ch.Kind, ch.Path)))
			if ch.Diff != "" {
				diff := &itemState{}
				for _, l := range strings.SplitAfter(strings.TrimSuffix(ch.Diff, "\n"), "\n") {
					r.diffLine(diff, l)
				}
				r.endOutput(diff)
			}
		}
		if it.Status == event.StatusFailed || it.Status == event.StatusDeclined {
			r.line(r.paint(styleRed, indentOutput+string(it.Status)))
		}
	case event.ItemPlan:
		r.line(r.paint(styleBold, "Plan"))
		for _, e := range it.Entries {
			box, style := "[ ]", ""
			switch e.Status {
			case "completed":
				box, style = "[x]", styleDim
			case "in_progress":
				box, style = "[~]", styleBold
			}
			r.line("  " + r.paint(style, box+" "+e.Content))
		}
	}
}

// header prints an item's one-line header.
func (r *Renderer) header(st *itemState, it event.Item) {
	st.header = true
	var s string
	switch it.Kind {
	case event.ItemCommand:
		cmd := it.Command
		if cmd == "" {
			cmd = strings.Join(it.Argv, " ")
		}
		if cmd == "" {
			cmd = st.name
		}
		st.name = cmd
		s = r.paint(styleBold, "$ "+cmd)
	case event.ItemWebSearch:
		q := it.Query
		if q == "" {
			q = st.name
		}
		st.name = q
		s = r.paint(styleBold, "• web search") + " " + q
	default: // tool calls, and output for an item never announced
		name := toolName(it)
		if name == "" {
			name = st.name
		}
		if name == "" {
			name = "output"
		}
		st.name = name
		s = r.paint(styleBold, "• "+name)
		if in := summarizeJSON(it.Input, 100); in != "" {
			s += " " + in
		}
	}
	r.line(s)
}

// text streams message or reasoning text.
func (r *Renderer) text(id string, st *itemState, text string) {
	switch {
	case st.kind == event.ItemReasoning:
		r.stream(id, st, prefixReasoning, styleDim, text, false)
	case st.role == event.RoleUser:
		r.stream(id, st, prefixUser, styleBold, text, false)
	case st.role == event.RoleSystem:
		r.stream(id, st, "", styleDim, text, false)
	default:
		r.stream(id, st, "", "", text, false)
	}
}

// output streams tool or command output, indented and capped.
func (r *Renderer) output(id string, st *itemState, text string) {
	r.stream(id, st, indentOutput, "", text, true)
}

// diffLine prints one line of a unified diff, coloured by its sign.
func (r *Renderer) diffLine(st *itemState, l string) {
	style := ""
	switch {
	case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
		style = styleBold
	case strings.HasPrefix(l, "+"):
		style = styleGreen
	case strings.HasPrefix(l, "-"):
		style = styleRed
	case strings.HasPrefix(l, "@@"):
		style = styleCyan
	}
	r.stream("", st, indentOutput, style, l, true)
}

// endOutput ends an item's output and notes what MaxLines hid.
func (r *Renderer) endOutput(st *itemState) {
	r.endLine()
	n := st.hidden
	if st.hiddenEnd {
		n++
	}
	if n > 0 {
		r.line(r.paint(styleDim, fmt.Sprintf("%s… %d more line%s", indentOutput, n, plural(n))))
	}
	st.hidden, st.hiddenEnd = 0, false
}

// stream writes text that may arrive in pieces, starting each line with
// prefix and painting it with style. With capped, lines beyond MaxLines are
// counted instead of written.
func (r *Renderer) stream(id string, st *itemState, prefix, style, text string, capped bool) {
	if text == "" {
		return
	}
	if r.open != id {
		r.endLine()
		r.open = id
	}
	for text != "" {
		if capped && r.bol && r.MaxLines > 0 && st.lines >= r.MaxLines {
			st.hidden += strings.Count(text, "\n")
			st.hiddenEnd = !strings.HasSuffix(text, "\n")
			return
		}
		seg, rest, nl := strings.Cut(text, "\n")
		if r.bol {
			p := prefix
			if seg == "" {
				p = strings.TrimRight(prefix, " ")
			}
			if strings.TrimSpace(p) == "" {
				r.write(p) // plain indentation needs no paint
			} else {
				r.write(r.paint(style, p))
			}
		}
		if seg != "" {
			r.write(r.paint(style, seg))
		}
		if !nl {
			break
		}
		r.write("\n")
		st.lines++
		text = rest
	}
}

// block writes a multi-line text at once, each line prefixed.
func (r *Renderer) block(prefix, style, text string) {
	r.endLine()
	for l := range strings.SplitSeq(strings.TrimRight(text, "\n"), "\n") {
		if l == "" {
			r.line(strings.TrimRight(prefix, " "))
			continue
		}
		r.line(prefix + r.paint(style, l))
	}
}

// line writes s as a whole line, ending any partial line first.
func (r *Renderer) line(s string) {
	r.endLine()
	r.write(s + "\n")
}

func (r *Renderer) endLine() {
	if !r.bol {
		r.write("\n")
	}
	r.open = ""
}

func (r *Renderer) write(s string) {
	if s == "" {
		return
	}
	if r.err == nil {
		_, r.err = io.WriteString(r.w, s)
	}
	r.bol = s[len(s)-1] == '\n'
}

func (r *Renderer) paint(style, s string) string {
	if !r.color || style == "" || s == "" {
		return s
	}
	return style + s + styleReset
}

// toolName names a tool call: "server/name" for MCP tools.
func toolName(it event.Item) string {
	if it.Server != "" && it.Name != "" {
		return it.Server + "/" + it.Name
	}
	return it.Name
}

// summarizeJSON renders a tool input on one line, cut to max runes.
func summarizeJSON(raw json.RawMessage, max int) string {
	if len(raw) == 0 || string(raw) == "null" || string(raw) == "{}" {
		return ""
	}
	var b bytes.Buffer
	s := string(raw)
	if json.Compact(&b, raw) == nil {
		s = b.String()
	}
	s = strings.Join(strings.Fields(s), " ")
	if rs := []rune(s); len(rs) > max {
		s = string(rs[:max-1]) + "…"
	}
	return s
}

func hostPort(host string, port int) string {
	if port == 0 {
		return host
	}
	return host + ":" + strconv.Itoa(port)
}

// formatDuration prints 850ms, 1.2s, 2m05s or 1h02m.
func formatDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// thousands formats n with comma separators.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

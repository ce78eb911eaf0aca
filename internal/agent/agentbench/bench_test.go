// Package agentbench measures, per agent and with the installed CLIs and
// the fake LLM, what agentbox costs on top of the agent: the time to the
// first agent event through the API beside the same CLI driven directly,
// and the resident memory of a live session (for codex and opencode, on a
// shared server and on a server per session). It holds benchmarks only
// (`go test -bench`, run by scripts/bench); `go test` without -bench runs
// nothing here.
package agentbench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/acp"
	"github.com/agentbox/agentbox/internal/agent/claude"
	"github.com/agentbox/agentbox/internal/agent/codex"
	"github.com/agentbox/agentbox/internal/agent/install"
	"github.com/agentbox/agentbox/internal/agent/opencode"
	"github.com/agentbox/agentbox/internal/agent/pi"
	"github.com/agentbox/agentbox/internal/agenttest"
)

// liveSessions is how many sessions are live at once when RSS is measured.
const liveSessions = 3

// settle is how long a new session's CLI is left to start before the
// prompt, in the API run and in the direct run alike: both measure a
// started CLI's answer, not its start.
const settle = 2 * time.Second

// driver names the protocol the CLI alone is driven with (the same one
// its adapter speaks to it).
type driver int

const (
	driverNone       driver = iota // not driven directly (reason in target.noDirect)
	driverStreamJSON               // claude: a stream-json user line on stdin
	driverPiRPC                    // pi: an RPC prompt command on stdin
	driverACP                      // ACP over stdio: initialize, session/new, session/prompt
	driverCodex                    // codex app-server: initialize, thread/start, turn/start
)

// target is one agent under benchmark.
type target struct {
	name      string   // registry name
	installs  []string // agent-cache names it needs (install.Lookup)
	urlSuffix string
	new       func(tb testing.TB, llm agenttest.LLM, bin binWrap) agent.Adapter
	drive     driver
	noDirect  string // why the CLI is not driven directly (driverNone)
	// server, when the adapter shares one server process between its
	// sessions, is a word of that process's command line ("app-server").
	server string
}

const codexModel = "gpt-5.5"

// acpOptions give ACP agents time to start on a loaded machine (opencode
// alone takes tens of seconds to answer initialize on a busy 2-core VM).
var acpOptions = acp.Options{StartTimeout: 3 * time.Minute}

// varTmp makes a directory outside /tmp (where Codex refuses to set up its
// sandbox helper), removed when tb ends.
func varTmp(tb testing.TB, prefix string) string {
	tb.Helper()
	dir, err := os.MkdirTemp("/var/tmp", prefix)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// binWrap wraps an adapter's Options.Binary: the CLI is started through a
// shell script that records its command line, environment and directory
// (by pid) and then execs it, so the same CLI can be started again alone
// (/proc/PID/cmdline does not do: Node CLIs overwrite it with their title).
type binWrap func(func() (string, string, error)) func() (string, string, error)

func (w binWrap) acp(name string) func() (string, string, error) { return w(install.Binary(name)) }

// recorder makes the binWrap of one stack, recording under dir/PID/.
func recorder(tb testing.TB, dir string) binWrap {
	return func(real func() (string, string, error)) func() (string, string, error) {
		return func() (string, string, error) {
			path, version, err := real()
			if err != nil || path == "" {
				return path, version, err
			}
			script := filepath.Join(dir, fmt.Sprintf("wrap-%d", wrapN.Add(1)))
			body := fmt.Sprintf("#!/bin/sh\nd=%[1]s/$$\nmkdir -p \"$d\"\nenv -0 >\"$d/env\"\nprintf '%%s\\0' %[2]s \"$@\" >\"$d/args\"\nexec %[2]s \"$@\"\n",
				shellQuote(dir), shellQuote(path))
			if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
				return "", "", err
			}
			return script, version, nil
		}
	}
}

var wrapN atomic.Int64

// trace prints each line a CLI run alone prints (AGENTBENCH_TRACE=1).
var trace = os.Getenv("AGENTBENCH_TRACE") != ""

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func targets() []target {
	return []target{
		{name: claude.Name, installs: []string{claude.Name}, drive: driverStreamJSON,
			new: func(tb testing.TB, llm agenttest.LLM, bin binWrap) agent.Adapter {
				return claude.New(claude.Options{Binary: bin(install.Binary(claude.Name)), BaseURL: llm.URL(""), APIKey: llm.Key(), HomeDir: tb.TempDir()})
			}},
		{name: codex.Name, installs: []string{codex.Name}, urlSuffix: "/v1", drive: driverCodex, server: "app-server",
			new: func(tb testing.TB, llm agenttest.LLM, bin binWrap) agent.Adapter {
				return codex.New(codex.Options{Binary: bin(install.Binary(codex.Name)), Home: varTmp(tb, "agentbox-bench-codex-"), Model: codexModel,
					BaseURL: llm.URL(""), APIKey: llm.Key()})
			}},
		{name: opencode.Name, installs: []string{opencode.Name}, urlSuffix: "/v1", server: "serve",
			noDirect: "opencode serve speaks HTTP+SSE, not a stdio protocol; no direct driver yet",
			new: func(tb testing.TB, llm agenttest.LLM, bin binWrap) agent.Adapter {
				return opencode.New(opencode.Options{Binary: bin(install.Binary(opencode.Name)), BaseURL: llm.URL(""), APIKey: llm.Key(),
					Home: filepath.Join(tb.TempDir(), "opencode-home"), MaxRetries: -1})
			}},
		{name: pi.Name, installs: []string{pi.Name}, urlSuffix: "/v1", drive: driverPiRPC,
			new: func(tb testing.TB, llm agenttest.LLM, bin binWrap) agent.Adapter {
				return pi.New(pi.Options{Binary: bin(install.Binary(pi.Name)), BaseURL: llm.URL(""), APIKey: llm.Key(), Home: tb.TempDir()})
			}},
		{name: acp.NameGemini, installs: []string{"gemini"}, drive: driverACP,
			new: func(tb testing.TB, llm agenttest.LLM, bin binWrap) agent.Adapter {
				return acp.Gemini(acp.Config{Binary: bin.acp, Options: acpOptions, DataDir: tb.TempDir(), GeminiBaseURL: llm.URL(""), GeminiAPIKey: llm.Key(), GeminiMaxAttempts: 1})
			}},
		{name: acp.NameClaudeCode, installs: []string{acp.NameClaudeCode}, drive: driverACP,
			new: func(tb testing.TB, llm agenttest.LLM, bin binWrap) agent.Adapter {
				return acp.ClaudeCode(acp.Config{Binary: bin.acp, Options: acpOptions, DataDir: tb.TempDir(), AnthropicBaseURL: llm.URL(""), AnthropicAPIKey: llm.Key()})
			}},
		{name: acp.NameCodex, installs: []string{acp.NameCodex}, urlSuffix: "/v1", drive: driverACP,
			new: func(tb testing.TB, llm agenttest.LLM, bin binWrap) agent.Adapter {
				return acp.Codex(acp.Config{Binary: bin.acp, Options: acpOptions, DataDir: varTmp(tb, "agentbox-bench-codex-acp-"), OpenAIBaseURL: llm.URL(""),
					OpenAIAPIKey: llm.Key(), CodexModel: codexModel})
			}},
		{name: acp.NameOpenCode, installs: []string{"opencode"}, urlSuffix: "/v1", drive: driverACP,
			new: func(tb testing.TB, llm agenttest.LLM, bin binWrap) agent.Adapter {
				return acp.OpenCode(acp.Config{Binary: bin.acp, Options: acpOptions, DataDir: tb.TempDir(), OpenAIBaseURL: llm.URL(""), OpenAIAPIKey: llm.Key()})
			}},
	}
}

// requireInstalled skips (with the reason) an agent whose CLI is not in
// the agent cache.
func requireInstalled(b *testing.B, tg target) {
	b.Helper()
	for _, n := range tg.installs {
		if _, ok, err := install.Lookup(n); err != nil || !ok {
			b.Skipf("the %s CLI is not installed in the agent cache (go run ./cmd/agentbox agents install %s)", n, n)
		}
	}
}

// stack is the daemon's stack with tg's adapter, and the directory its
// CLIs' command lines are recorded in.
type stack struct {
	*agenttest.Stack
	rec string
}

func newStack(b *testing.B, tg target) stack {
	b.Helper()
	rec := b.TempDir()
	return stack{agenttest.NewStack(b, agenttest.StackOptions{
		Name: tg.name, URLSuffix: tg.urlSuffix, Timeout: 3 * time.Minute,
		New: func(tb testing.TB, llm agenttest.LLM) agent.Adapter {
			ad := tg.new(tb, llm, recorder(tb, rec))
			if c, ok := ad.(io.Closer); ok {
				tb.Cleanup(func() { _ = c.Close() })
			}
			return ad
		},
	}), rec}
}

// BenchmarkFirstEvent measures, per agent, the time from POST …/messages
// to the first event of the agent's own output on the session's SSE
// stream (api-ms: an item the agent produced, or a delta), the time from
// writing the same prompt to the same CLI — the command line, environment
// and directory the adapter started it with, recorded by a wrapper — in
// the same protocol, to the line of its first output (cli-ms: the line
// the adapter makes that event of), and the difference: what agentbox
// adds (added-ms, the median of the differences of the iterations, each
// an API run followed by a direct one). Each figure is a median over the
// iterations. Session
// creation is not timed: both runs leave a ready CLI the same settle time
// before the prompt.
func BenchmarkFirstEvent(b *testing.B) {
	for _, tg := range targets() {
		b.Run(tg.name, func(b *testing.B) {
			requireInstalled(b, tg)
			s := newStack(b, tg)
			ctx := context.Background()
			var api, direct []time.Duration
			var firstEv event.Event
			for b.Loop() {
				ses, cwd := s.Create(b, "default", nil)
				after, err := s.C.LastSeq(ctx, ses.ID)
				if err != nil {
					b.Fatal(err)
				}
				sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
				st := s.C.Stream(sctx, ses.ID, after)
				type first struct {
					at time.Time
					ev event.Event
				}
				firstc := make(chan first, 1)
				go func() {
					defer close(firstc)
					for st.Next() {
						if ev := st.Event(); agentOutput(ev) {
							firstc <- first{time.Now(), ev}
							return
						}
					}
				}()
				time.Sleep(settle) // let the stream connect and the CLI settle
				t0 := time.Now()
				tr, err := s.C.Send(ctx, ses.ID, "hello")
				if err != nil {
					b.Fatal(err)
				}
				f, ok := <-firstc
				if !ok {
					b.Fatalf("no agent event: %v", st.Err())
				}
				api = append(api, f.at.Sub(t0))
				firstEv = f.ev
				if _, err := s.C.WaitTurn(sctx, ses.ID, tr.TurnID, after, nil); err != nil {
					b.Fatal(err)
				}
				cancel()
				if tg.drive != driverNone {
					// While the session is live: its CLI may need files
					// the adapter removes with the session.
					proc, err := agentProcess(s.rec, cwd, tg.server)
					if err != nil {
						b.Fatal(err)
					}
					d, err := runDirect(tg.drive, proc)
					if err != nil {
						b.Fatalf("%s alone: %v", tg.name, err)
					}
					direct = append(direct, d)
				}
				_ = s.C.DeleteSession(ctx, ses.ID, false)
			}
			b.Logf("first agent event through the API: %.900s", mustJSON(firstEv))
			apiMS := median(api)
			b.ReportMetric(apiMS, "api-ms")
			if tg.drive == driverNone {
				b.Logf("CLI alone not measured: %s", tg.noDirect)
				return
			}
			b.ReportMetric(median(direct), "cli-ms")
			// Paired per iteration, so a load that changes over the run
			// (the machine is shared) moves both sides of a difference.
			diffs := make([]time.Duration, len(direct))
			for i := range direct {
				diffs[i] = api[i] - direct[i]
			}
			b.ReportMetric(median(diffs), "added-ms")
		})
	}
}

// BenchmarkSessionRSS measures the resident memory of live sessions: with
// liveSessions sessions live (each past one turn, so every lazily started
// process runs), the VmRSS of every descendant process of the benchmark
// (the agent processes, their children and servers; the daemon's own
// stack runs in the benchmark's process and is not counted), divided by
// the number of sessions (MB/session), and the same for PSS, which divides
// pages shared between processes (the runtime's code) among them
// (pss-MB/session). For codex and opencode, which share
// one server between the unsandboxed sessions of an adapter, it also
// measures the sessions each on an adapter of its own, so each on a
// server of its own (the per-session-server variant; unsandboxed, with a
// separate home per adapter — what a sandboxed session runs, minus the
// sandbox).
func BenchmarkSessionRSS(b *testing.B) {
	for _, tg := range targets() {
		b.Run(tg.name, func(b *testing.B) { sessionRSS(b, tg, 1) })
		if tg.server != "" {
			b.Run(tg.name+"/per-session-server", func(b *testing.B) { sessionRSS(b, tg, liveSessions) })
		}
	}
}

func sessionRSS(b *testing.B, tg target, stacks int) {
	requireInstalled(b, tg)
	ss := make([]stack, stacks)
	for i := range ss {
		ss[i] = newStack(b, tg)
	}
	ctx := context.Background()
	var rss, pss []float64
	for b.Loop() {
		type live struct {
			s  stack
			id string
		}
		var sessions []live
		for i := range liveSessions {
			s := ss[i%len(ss)]
			ses, _ := s.Create(b, "default", nil)
			s.Turn(b, ses.ID, "hello", nil)
			sessions = append(sessions, live{s, ses.ID})
		}
		t := treeMemory(os.Getpid())
		b.Logf("%d live sessions: %s", liveSessions, t)
		rss = append(rss, float64(t.rssKB)/1024/liveSessions)
		pss = append(pss, float64(t.pssKB)/1024/liveSessions)
		for _, l := range sessions {
			_ = l.s.C.DeleteSession(ctx, l.id, false)
		}
	}
	b.ReportMetric(medianOf(rss), "MB/session")
	b.ReportMetric(medianOf(pss), "pss-MB/session")
}

// agentOutput says whether ev is the agent's own output: an item it
// produced (a message, reasoning, a tool call; not the user's message the
// agent echoes) or a delta of one. Events an adapter emits for state the
// agent announced earlier (ACP's available commands) are not.
func agentOutput(ev event.Event) bool {
	if ev.Source != event.SourceAgent {
		return false
	}
	switch ev.Type {
	case event.TypeItemDelta:
		return true
	case event.TypeItemStarted, event.TypeItemCompleted:
		var d struct {
			Item event.Item `json:"item"`
		}
		return json.Unmarshal(mustJSON(ev.Data), &d) == nil && d.Item.Role != event.RoleUser
	}
	return false
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

func median(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[(len(s)-1)/2].Microseconds()) / 1000
}

// process is what the adapter started an agent CLI with.
type process struct {
	args []string
	env  []string
	dir  string
}

// agentProcess finds the agent process of the session in cwd — a
// descendant of this process that the wrapper recorded (agents run under a
// process-tree supervisor) working in cwd, or, for a shared server, the one
// whose command line holds the word server — and reads its command line,
// environment and directory.
func agentProcess(rec, cwd, server string) (process, error) {
	desc := descendants(os.Getpid())
	for _, pid := range desc {
		if d, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); d == cwd {
			if p, err := readProcess(rec, pid); err == nil {
				return p, nil
			}
		}
	}
	if server != "" {
		for _, pid := range desc {
			p, err := readProcess(rec, pid)
			if err == nil && slices.Contains(p.args, server) {
				return p, nil
			}
		}
	}
	return process{}, fmt.Errorf("no recorded agent process working in %s among the descendants %v", cwd, desc)
}

// readProcess reads what the wrapper recorded for pid, and its directory.
func readProcess(rec string, pid int) (process, error) {
	cmdline, err := os.ReadFile(filepath.Join(rec, strconv.Itoa(pid), "args"))
	if err != nil {
		return process{}, err
	}
	environ, err := os.ReadFile(filepath.Join(rec, strconv.Itoa(pid), "env"))
	if err != nil {
		return process{}, err
	}
	dir, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		return process{}, err
	}
	split := func(b []byte) []string { return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00") }
	return process{args: split(cmdline), env: split(environ), dir: dir}, nil
}

// parents maps every process to its parent (from /proc/PID/stat).
func parents() map[int]int {
	ents, _ := os.ReadDir("/proc")
	m := map[int]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(s[i+1:]); len(f) > 1 {
			m[pid], _ = strconv.Atoi(f[1])
		}
	}
	return m
}

// descendants lists every process below pid, nearest first.
func descendants(pid int) []int {
	par := parents()
	var out []int
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		for p, pp := range par {
			if pp == queue[0] {
				out = append(out, p)
				queue = append(queue, p)
			}
		}
	}
	return out
}

// tree is the memory of a process tree.
type tree struct {
	rssKB, pssKB int
	procs        map[string]int // command name → count
}

func (t tree) String() string {
	names := slices.Sorted(maps.Keys(t.procs))
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, " %s×%d", n, t.procs[n])
	}
	return fmt.Sprintf("RSS %d kB, PSS %d kB in all:%s", t.rssKB, t.pssKB, b.String())
}

// treeMemory sums VmRSS (/proc/PID/status) and Pss (/proc/PID/smaps_rollup:
// shared pages divided among the processes sharing them) over every
// descendant of pid, not pid itself.
func treeMemory(pid int) tree {
	par := parents()
	desc := map[int]bool{pid: true}
	for changed := true; changed; {
		changed = false
		for p, pp := range par {
			if desc[pp] && !desc[p] {
				desc[p], changed = true, true
			}
		}
	}
	delete(desc, pid)
	t := tree{procs: map[string]int{}}
	for p := range desc {
		rss, ok := kBField(fmt.Sprintf("/proc/%d/status", p), "VmRSS:")
		if !ok {
			continue // exited, or a kernel thread
		}
		pss, _ := kBField(fmt.Sprintf("/proc/%d/smaps_rollup", p), "Pss:")
		t.rssKB += rss
		t.pssKB += pss
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
		t.procs[strings.TrimSpace(string(comm))]++
	}
	return t
}

// kBField reads the "Name:  N kB" line of a /proc file.
func kBField(path, name string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, name); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, err := strconv.Atoi(f[0])
				return n, err == nil
			}
		}
	}
	return 0, false
}

// cli is a CLI started directly, its stdout lines arriving on lines.
type cli struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan []byte
	stderr tailBuffer
}

// tailBuffer keeps the last 2 kB written to it.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 2048 {
		t.b = t.b[len(t.b)-2048:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

func startCLI(p process, replace map[string]string) (*cli, error) {
	args := slices.Clone(p.args)
	for i := 1; i < len(args); i++ {
		if v, ok := replace[args[i-1]]; ok {
			args[i] = v
		}
	}
	c := &cli{lines: make(chan []byte, 1024)}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env, cmd.Dir = p.env, p.dir
	cmd.Stderr = &c.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c.cmd, c.stdin = cmd, stdin
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			c.lines <- slices.Clone(sc.Bytes())
		}
	}()
	return c, nil
}

func (c *cli) write(v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = c.stdin.Write(append(line, '\n'))
	return err
}

// next returns the next line, failing after a minute.
func (c *cli) next() ([]byte, error) {
	select {
	case l, ok := <-c.lines:
		if !ok {
			return nil, fmt.Errorf("%w (stderr: %s)", io.EOF, c.stderr.String())
		}
		if trace {
			fmt.Fprintf(os.Stderr, "%s %.200s\n", time.Now().Format("15:04:05.000"), l)
		}
		return l, nil
	case <-time.After(time.Minute):
		return nil, fmt.Errorf("no output for a minute")
	}
}

// until reads lines up to the one for which stop says true.
func (c *cli) until(stop func(map[string]any) bool) (map[string]any, error) {
	for {
		l, err := c.next()
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if json.Unmarshal(l, &m) == nil && stop(m) {
			return m, nil
		}
	}
}

// call sends a JSON-RPC request and returns its result.
func (c *cli) call(id int, method string, params any) (map[string]any, error) {
	if err := c.write(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params}); err != nil {
		return nil, err
	}
	m, err := c.until(func(m map[string]any) bool {
		v, ok := m["id"].(float64)
		return ok && int(v) == id && m["method"] == nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	if e := m["error"]; e != nil {
		return nil, fmt.Errorf("%s: %v", method, e)
	}
	r, _ := m["result"].(map[string]any)
	return r, nil
}

func (c *cli) close() {
	_ = c.stdin.Close()
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}

// runDirect starts the CLI as p, sets up a session in its protocol (up to
// the point the adapter's session creation returns), waits settle, drops
// what it printed so far, writes the prompt and returns the time to the
// line of its first output, then reads the turn to its end.
func runDirect(d driver, p process) (time.Duration, error) {
	replace := map[string]string{}
	if d == driverStreamJSON {
		replace["--session-id"] = newUUID()
		replace["--resume"] = newUUID()
	}
	c, err := startCLI(p, replace)
	if err != nil {
		return 0, err
	}
	defer c.close()
	var prompt any
	var done func(map[string]any) bool
	var isEvent func(map[string]any) bool // the line of the agent's first output
	switch d {
	case driverStreamJSON:
		isEvent = func(m map[string]any) bool { return m["type"] == "assistant" || m["type"] == "stream_event" }
		prompt = map[string]any{"type": "user", "parent_tool_use_id": nil, "session_id": "",
			"message": map[string]any{"role": "user", "content": []any{map[string]string{"type": "text", "text": "hello"}}}}
		done = func(m map[string]any) bool { return m["type"] == "result" }
	case driverPiRPC:
		// Ready once it answers (the adapter asks for its state first too).
		if err := c.write(map[string]any{"id": "0", "type": "get_state"}); err != nil {
			return 0, err
		}
		if _, err := c.until(func(m map[string]any) bool { return m["type"] == "response" }); err != nil {
			return 0, fmt.Errorf("get_state: %w", err)
		}
		prompt = map[string]any{"id": "1", "type": "prompt", "message": "hello"}
		done = func(m map[string]any) bool { return m["type"] == "agent_end" }
		isEvent = func(m map[string]any) bool {
			msg, _ := m["message"].(map[string]any)
			return m["type"] == "message_start" && msg["role"] == "assistant"
		}
	case driverACP:
		if _, err := c.call(1, "initialize", map[string]any{"protocolVersion": 1,
			"clientCapabilities": map[string]any{"fs": map[string]bool{"readTextFile": false, "writeTextFile": false}, "terminal": false}}); err != nil {
			return 0, err
		}
		r, err := c.call(2, "session/new", map[string]any{"cwd": p.dir, "mcpServers": []any{}})
		if err != nil {
			return 0, err
		}
		prompt = map[string]any{"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
			"params": map[string]any{"sessionId": r["sessionId"], "prompt": []any{map[string]string{"type": "text", "text": "hello"}}}}
		done = func(m map[string]any) bool { v, ok := m["id"].(float64); return ok && v == 3 && m["method"] == nil }
		isEvent = func(m map[string]any) bool {
			p, _ := m["params"].(map[string]any)
			u, _ := p["update"].(map[string]any)
			switch u["sessionUpdate"] {
			case "agent_message_chunk", "agent_thought_chunk", "tool_call":
				return m["method"] == "session/update"
			}
			return false
		}
	case driverCodex:
		if _, err := c.call(1, "initialize", map[string]any{"clientInfo": map[string]string{"name": "agentbench", "title": "agentbench", "version": "1"}}); err != nil {
			return 0, err
		}
		if err := c.write(map[string]any{"jsonrpc": "2.0", "method": "initialized"}); err != nil {
			return 0, err
		}
		r, err := c.call(2, "thread/start", map[string]any{"cwd": p.dir, "approvalPolicy": "never", "sandbox": "danger-full-access", "model": codexModel})
		if err != nil {
			return 0, err
		}
		th, _ := r["thread"].(map[string]any)
		prompt = map[string]any{"jsonrpc": "2.0", "id": 3, "method": "turn/start",
			"params": map[string]any{"threadId": th["id"], "input": []any{map[string]string{"type": "text", "text": "hello"}}}}
		done = func(m map[string]any) bool { return m["method"] == "turn/completed" }
		isEvent = func(m map[string]any) bool {
			p, _ := m["params"].(map[string]any)
			it, _ := p["item"].(map[string]any)
			return m["method"] == "item/started" && it["type"] != "userMessage"
		}
	default:
		return 0, fmt.Errorf("no driver %d", d)
	}
	time.Sleep(settle)                // as the API run after the session was created
	for drained := false; !drained; { // what it printed before the prompt
		select {
		case _, ok := <-c.lines:
			if !ok {
				return 0, fmt.Errorf("exited before the prompt")
			}
		default:
			drained = true
		}
	}
	t0 := time.Now()
	if err := c.write(prompt); err != nil {
		return 0, err
	}
	m, err := c.until(isEvent)
	if err != nil {
		return 0, fmt.Errorf("first event line: %w", err)
	}
	took := time.Since(t0)
	if !done(m) {
		if _, err := c.until(done); err != nil {
			return 0, fmt.Errorf("end of the turn: %w", err)
		}
	}
	return took, nil
}

func newUUID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:])
}

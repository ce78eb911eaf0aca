package claude

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// BenchmarkFirstEventLatency measures, with the real CLI and the fake LLM,
// the time from POST …/messages to the first agent event on the SSE stream
// (api-first-event-ms), the time from writing the same user message to the
// same CLI, started directly with the same arguments and environment, to
// its first stdout line (cli-first-line-ms), and the difference: what
// agentbox adds (overhead-ms). Both runs start a fresh CLI per iteration
// (session creation is not timed; the direct run waits as long between
// starting the CLI and writing to it as the API run did between creating
// the session and posting), and the CLI's first line (system/init) is the
// adapter's first event.
func BenchmarkFirstEventLatency(b *testing.B) {
	s := newStack(b, nil)
	s.SetScenario(fakellm.ScenarioText)
	bin, _ := claudeBinary(b)
	a := New(Options{APIKey: fakeKey, HomeDir: b.TempDir()}).(*adapter)
	ctx := context.Background()
	var api, direct time.Duration
	for b.Loop() {
		// Through the API.
		ses, _ := s.Create(b, "default", nil)
		created := time.Now()
		after, err := s.C.LastSeq(ctx, ses.ID)
		if err != nil {
			b.Fatal(err)
		}
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		st := s.C.Stream(sctx, ses.ID, after)
		first := make(chan time.Time, 1)
		go func() {
			for st.Next() {
				if st.Event().Source == event.SourceAgent {
					first <- time.Now()
					return
				}
			}
			close(first)
		}()
		time.Sleep(50 * time.Millisecond) // let the stream connect
		t0 := time.Now()
		// The CLI started with the session; give the direct run the same
		// head start before its message.
		headStart := t0.Sub(created)
		tr, err := s.C.Send(ctx, ses.ID, "hello")
		if err != nil {
			b.Fatal(err)
		}
		t1, ok := <-first
		if !ok {
			b.Fatalf("no agent event: %v", st.Err())
		}
		api += t1.Sub(t0)
		if _, err := s.C.WaitTurn(sctx, ses.ID, tr.TurnID, after, nil); err != nil {
			b.Fatal(err)
		}
		cancel()
		_ = s.C.DeleteSession(ctx, ses.ID, false)

		// The CLI alone, same command line and environment.
		cwd := b.TempDir()
		c, err := a.buildCommand(agent.Config{Cwd: cwd, Env: map[string]string{"ANTHROPIC_BASE_URL": s.LLM.URL("")}}, bin, a.opts.HomeDir, newUUID())
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(c.path, c.args...)
		cmd.Dir, cmd.Env = c.dir, c.env
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		time.Sleep(headStart)
		msg, _ := userMessageLine(text("hello"), "")
		line, _ := json.Marshal(msg)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		t0 = time.Now()
		if _, err := stdin.Write(append(line, '\n')); err != nil {
			b.Fatal(err)
		}
		if !sc.Scan() {
			b.Fatal("the CLI printed nothing")
		}
		direct += time.Since(t0)
		for sc.Scan() { // to the end of the turn, then close
			var r struct{ Type string }
			if json.Unmarshal(sc.Bytes(), &r) == nil && r.Type == "result" {
				break
			}
		}
		stdin.Close()
		_ = cmd.Wait()
	}
	n := float64(b.N)
	apiMS, directMS := float64(api.Microseconds())/1000/n, float64(direct.Microseconds())/1000/n
	b.ReportMetric(apiMS, "api-first-event-ms")
	b.ReportMetric(directMS, "cli-first-line-ms")
	b.ReportMetric(apiMS-directMS, "overhead-ms")
}

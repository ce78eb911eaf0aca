package providertest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/provider/relay"
)

// testProcess is the processes step: POST /v1/processes with the
// provider on a host daemon. The process runs in a fresh sandbox of the
// provider through the inner daemon's processes API: it reads what is
// written to its stdin, writes both streams, leaves a file in its
// workspace and exits with a status of its own; while it runs, its
// workspace files are those of the daemon in its sandbox; the host
// streams its output, reports its exit, serves the files copied back, and the
// provider holds nothing once it has ended. A process on a terminal
// sees its size and a resize, and a signal ends a process as asked.
// An unknown provider is 422 unknown-provider, a policy nothing there
// enforces 422 provider-unsupported, with nothing left either.
func testProcess(t *testing.T, s *suite) {
	ctx := s.ctx(t)
	name := s.Provider.Name()
	dataDir := t.TempDir()
	h := s.startHost(t, dataDir, s.Provider)
	key, err := relay.LoadKey(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	s.owner = relay.OwnerOf(key)

	var ae *client.APIError
	_, err = h.c.StartProcess(ctx, client.StartProcess{Argv: []string{"true"}, Provider: "providertest-no-such"})
	if !errors.As(err, &ae) || ae.Status != 422 || ae.Type != client.ProblemUnknownProvider || !strings.Contains(ae.Detail, name) {
		t.Fatalf("process on an unknown provider: %v; want 422 unknown-provider naming %s", err, name)
	}

	script := `echo started; read line; echo "got $line"; echo oops >&2; cat in.txt > out.txt; echo kept >> out.txt; exit 3`
	p, err := h.c.StartProcess(ctx, client.StartProcess{Argv: []string{"sh", "-c", script}, Stdin: true, Provider: name,
		Files: map[string]string{"in.txt": "given\n"}, Policy: json.RawMessage(`"exec-default"`)})
	if err != nil {
		t.Fatalf("process on %s: %v", name, err)
	}
	if p.Sandbox.Provider != name || p.Sandbox.ID == "" || p.Sandbox.Runtime == "" || p.Status != client.ProcessRunning || !p.StdinOpen {
		t.Fatalf("started process = %+v; want it running in the provider's sandbox with its stdin open", p)
	}
	// It waits for its input: running, its workspace is served by the
	// daemon in its sandbox, changes made there, what leaves it refused.
	ws := client.ProcessWorkspace(p.ID)
	if got := readAll(ctx, t, h.c, ws, "in.txt"); got != "given\n" {
		t.Fatalf("in.txt of the running process on %s = %q", name, got)
	}
	if _, err := h.c.WriteFile(ctx, ws, "written.txt", []byte("by the client\n")); err != nil {
		t.Fatalf("write in the running process's workspace on %s: %v", name, err)
	}
	if l, err := h.c.ListFiles(ctx, ws, ".", 1); err != nil || len(l.Entries) != 2 {
		t.Fatalf("files of the running process on %s: %+v, %v; want in.txt and written.txt", name, l, err)
	}
	if _, err := h.c.StatFile(ctx, ws, "../x"); !errors.As(err, &ae) || ae.Status != 403 || ae.Type != client.ProblemOutsideWorkspace {
		t.Fatalf("a path out of the running process's workspace on %s: %v; want 403 outside-workspace", name, err)
	}
	if err := h.c.SendStdin(ctx, p.ID, "hello\n", true); err != nil {
		t.Fatalf("stdin of the process on %s: %v", name, err)
	}
	out, exit := follow(ctx, t, h.c, p.ID)
	if out["stdout"] != "started\ngot hello\n" || out["stderr"] != "oops\n" {
		t.Fatalf("process on %s wrote stdout %q, stderr %q; want what it read echoed", name, out["stdout"], out["stderr"])
	}
	if exit == nil || exit.ExitCode == nil || *exit.ExitCode != 3 || exit.Error != nil {
		t.Fatalf("exit of the process on %s = %+v; want status 3", name, exit)
	}
	w, err := h.c.Wait(ctx, p.ID)
	if err != nil || w.Status != client.ProcessExited || *w.ExitCode != 3 || w.Sandbox.Provider != name {
		t.Fatalf("wait for the process on %s = %+v, %v", name, w, err)
	}
	// Ended, its sandbox is gone; its workspace was copied back first.
	s.empty(ctx, t)
	if got := readAll(ctx, t, h.c, ws, "out.txt"); got != "given\nkept\n" {
		t.Fatalf("out.txt of the process on %s = %q, want its workspace copied back", name, got)
	}
	if got := readAll(ctx, t, h.c, ws, "written.txt"); got != "by the client\n" {
		t.Fatalf("written.txt of the process on %s = %q, want the client's write copied back", name, got)
	}
	if err := h.c.DeleteProcess(ctx, p.ID); err != nil {
		t.Fatalf("delete the process: %v", err)
	}

	// A terminal: its size, a resize, input, and the output as one
	// stream of the terminal's bytes.
	tp, err := h.c.StartProcess(ctx, client.StartProcess{Argv: []string{"sh", "-c", `stty size; read x; stty size; echo "x=$x"`},
		TTY: true, Rows: 30, Cols: 100, Provider: name})
	if err != nil {
		t.Fatalf("tty process on %s: %v", name, err)
	}
	// The resize only after the first size was read, or the first
	// stty may already see the new size.
	waitOutput(ctx, t, h.c, tp.ID, "30 100")
	if err := h.c.Resize(ctx, tp.ID, 40, 120); err != nil {
		t.Fatalf("resize the terminal on %s: %v", name, err)
	}
	if err := h.c.SendStdin(ctx, tp.ID, "abc\r", false); err != nil {
		t.Fatalf("type on the terminal on %s: %v", name, err)
	}
	out, exit = follow(ctx, t, h.c, tp.ID)
	if got := out["stdout"]; !strings.Contains(got, "30 100") || !strings.Contains(got, "40 120") || !strings.Contains(got, "x=abc") || out["stderr"] != "" {
		t.Fatalf("terminal of the process on %s showed %q (stderr %q); want both sizes and the input read", name, got, out["stderr"])
	}
	if exit == nil || exit.ExitCode == nil || *exit.ExitCode != 0 || !exit.TTY {
		t.Fatalf("exit of the tty process on %s = %+v", name, exit)
	}

	// A program the sandbox does not have is the caller's error, and
	// leaves nothing.
	_, err = h.c.StartProcess(ctx, client.StartProcess{Argv: []string{"agentbox-no-such-program"}, Provider: name})
	if !errors.As(err, &ae) || ae.Status != 422 || !strings.Contains(ae.Detail, "agentbox-no-such-program") {
		t.Fatalf("process of a program %s does not have: %v; want 422 naming it", name, err)
	}
	s.empty(ctx, t)

	// A signal ends a process as it would here.
	sp, err := h.c.StartProcess(ctx, client.StartProcess{Argv: []string{"sleep", "600"}, Provider: name})
	if err != nil {
		t.Fatalf("process on %s: %v", name, err)
	}
	if err := h.c.Signal(ctx, sp.ID, "SIGTERM"); err != nil {
		t.Fatalf("signal the process on %s: %v", name, err)
	}
	if w, err := h.c.Wait(ctx, sp.ID); err != nil || w.Signal != "SIGTERM" || *w.ExitCode != -1 {
		t.Fatalf("signalled process on %s = %+v, %v; want ended by SIGTERM", name, w, err)
	}
	s.empty(ctx, t)

	_, err = h.c.StartProcess(ctx, client.StartProcess{Argv: []string{"true"}, Provider: name, Policy: json.RawMessage(`{"version":1,"isolation":"microvm"}`)})
	if !errors.As(err, &ae) || ae.Status != 422 || ae.Type != client.ProblemProviderUnsupported || !strings.Contains(ae.Detail, name) || !strings.Contains(ae.Detail, "microvm") {
		t.Fatalf("process on %s under a policy nothing there enforces: %v; want 422 provider-unsupported naming the provider", name, err)
	}
	s.empty(ctx, t)
}

// follow reads a process's stream to its exit: the output by stream, and
// the exit.
func follow(ctx context.Context, t *testing.T, c *client.Client, id string) (map[string]string, *client.Process) {
	t.Helper()
	out := map[string]string{}
	for ev, err := range c.ProcessStream(ctx, id, 0) {
		if err != nil {
			t.Fatalf("stream of process %s: %v (so far %q)", id, err, out)
		}
		switch ev.Type {
		case "stdout", "stderr":
			out[ev.Type] += ev.Output.Data
		case "exit":
			return out, ev.Exit
		default:
			t.Fatalf("process %s: unexpected %s event", id, ev.Type)
		}
	}
	t.Fatalf("stream of process %s ended without its exit (so far %q)", id, out)
	return nil, nil
}

// waitOutput follows process id's output until it shows want.
func waitOutput(ctx context.Context, t *testing.T, c *client.Client, id, want string) {
	t.Helper()
	var out string
	for ev, err := range c.ProcessStream(ctx, id, 0) {
		if err != nil {
			t.Fatalf("stream of process %s: %v (so far %q)", id, err, out)
		}
		switch ev.Type {
		case "stdout", "stderr":
			out += ev.Output.Data
			if strings.Contains(out, want) {
				return
			}
		case "exit":
			t.Fatalf("process %s ended before it wrote %q (it wrote %q)", id, want, out)
		}
	}
	t.Fatalf("stream of process %s ended before %q (so far %q)", id, want, out)
}

// readAll reads a workspace file whole.
func readAll(ctx context.Context, t *testing.T, c *client.Client, ws, path string) string {
	t.Helper()
	r, err := c.ReadFile(ctx, ws, path, 0, 0)
	if err != nil {
		t.Fatalf("read %s of %s: %v", path, ws, err)
	}
	defer func() { _ = r.Close() }()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s of %s: %v", path, ws, err)
	}
	return string(b)
}

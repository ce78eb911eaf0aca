package agentbox_test

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/client"
)

// forgedPeerCode renames itself (comm, through prctl) and re-executes with
// an argv full of terminal escape sequences — an OSC 52 clipboard write,
// screen erase and cursor moves, a colour, a bidi override — then opens a
// connection the policy refuses, so the proxy names it in a violation.
const forgedPeerCode = `
import os, sys
STAGE2 = r'''
import ctypes, socket
ctypes.CDLL(None).prctl(15, b"\x1b[2J\x1b]52;c;x\x07", 0, 0, 0)
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
print(s.recv(200).split(b"\r\n")[0].decode())
'''
os.execv(sys.executable, ["python3\x1b]52;c;cHduZWQ=\x07", "-c", STAGE2, "\x1b[31m\u202egnp.exe\x1b[H"])
`

// TestSandboxReportedProcess: the process a violation names is what the
// sandboxed process says it is, so it reaches the API only sanitised: its
// control sequences and bidi override written as escapes, nothing a
// terminal would act on.
func TestSandboxReportedProcess(t *testing.T) {
	requireSandbox(t)
	srv := start(t, agentbox.Options{})
	res, err := srv.Client().Exec(t.Context(), client.ExecRequest{Language: "python", Code: forgedPeerCode})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Stdout, "403") {
		t.Fatalf("the refused CONNECT: stdout %q, stderr %q", res.Stdout, res.Stderr)
	}
	var p *client.SandboxProcess
	for _, v := range res.Violations {
		if v.Kind == "network" && v.Host == "example.com" {
			p = v.Process
		}
	}
	if p == nil {
		t.Fatalf("no network violation naming a process: %+v", res.Violations)
	}
	t.Logf("reported process: %+v", *p)
	if want := `\x1b[2J\x1b]52;c;x\x07`; p.Name != want {
		t.Errorf("name %q, want %q", p.Name, want)
	}
	for _, want := range []string{`python3\x1b]52;c;cHduZWQ=\x07 -c`, `\x1b[31m\u202egnp.exe\x1b[H`} {
		if !strings.Contains(p.CommandLine, want) {
			t.Errorf("command line %q lacks %q", p.CommandLine, want)
		}
	}
	for _, s := range []string{p.Name, p.CommandLine} {
		if i := strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r == '\u202e' }); i >= 0 {
			t.Errorf("%q holds a control or bidi character at %d", s, i)
		}
	}
	if len(p.Name) > 64 || len(p.CommandLine) > 1024 {
		t.Errorf("name of %d bytes, command line of %d", len(p.Name), len(p.CommandLine))
	}
}

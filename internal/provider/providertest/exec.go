package providertest

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/provider/relay"
)

// escapePath is where the exec step's code tries to write outside its
// workspace; the policy must refuse it inside the sandbox.
const escapePath = "/agentbox-providertest-escape"

// testExec is the "exec with a policy" step: POST /v1/exec with
// the provider on a host daemon. The code runs in a fresh sandbox of the
// provider under the request's policy, enforced there by the provider's
// sandbox (provider.PolicyMapper: Docker's container) or by the inner
// daemon's runtimes: it writes in its workspace, and its write outside it
// is refused inside. A policy nothing there enforces (isolation microvm)
// is 422 provider-unsupported naming the provider and the field; an
// unknown provider 422 unknown-provider. After each, nothing is left on
// the provider. The scripts use only the shell's builtins: a provider's
// image may have a shell and little else.
func testExec(t *testing.T, s *suite) {
	ctx := s.ctx(t)
	name := s.Provider.Name()
	dataDir := t.TempDir()
	h := s.startHost(t, dataDir, s.Provider)
	key, err := relay.LoadKey(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	s.owner = relay.OwnerOf(key)

	_, err = h.c.Exec(ctx, client.ExecRequest{Argv: []string{"true"}, Provider: "providertest-no-such"})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 422 || ae.Type != client.ProblemUnknownProvider || !strings.Contains(ae.Detail, name) {
		t.Fatalf("exec on an unknown provider: %v; want 422 unknown-provider naming %s", err, name)
	}

	script := `echo inside > inside.txt && read l < inside.txt && echo "$l" && if echo x > ` + escapePath + ` 2>/dev/null; then echo ESCAPED; else echo refused; fi`
	res, err := h.c.Exec(ctx, client.ExecRequest{Argv: []string{"sh", "-c", script}, Provider: name, Policy: json.RawMessage(`"exec-default"`)})
	if err != nil {
		t.Fatalf("exec on %s: %v", name, err)
	}
	if res.Stdout != "inside\nrefused\n" || res.ExitCode != 0 || res.Error != nil {
		t.Fatalf("exec on %s = exit %d, stdout %q, stderr %q, error %+v; want the workspace written and the write outside refused", name, res.ExitCode, res.Stdout, res.Stderr, res.Error)
	}
	if res.Sandbox.Provider != name || res.Sandbox.ID == "" || res.Sandbox.Runtime == "" {
		t.Fatalf("exec's sandbox = %+v; want the provider's sandbox and the inner runtime", res.Sandbox)
	}
	if _, err := os.Stat(escapePath); err == nil {
		t.Fatalf("%s exists on this machine", escapePath)
	}
	// The policy's timeout holds: the run is killed, with the reason.
	res, err = h.c.Exec(ctx, client.ExecRequest{Argv: []string{"sh", "-c", "while :; do :; done"}, Provider: name,
		Policy: json.RawMessage(`{"version":1,"resources":{"timeout":"1s"}}`)})
	if err != nil || res.Error == nil || res.Error.Code != "timeout" {
		t.Fatalf("exec on %s past its policy's timeout = %+v, %v; want error timeout", name, res, err)
	}
	streamed := ""
	sres, err := h.c.ExecStream(ctx, client.ExecRequest{Language: "bash", Code: "echo streamed", Provider: name}, func(ch client.OutputChunk) {
		streamed += ch.Data
	})
	if err != nil || streamed != "streamed\n" || sres.Stdout != "streamed\n" {
		t.Fatalf("streamed exec on %s: %+v, %v; output %q", name, sres, err, streamed)
	}
	s.empty(ctx, t)

	_, err = h.c.Exec(ctx, client.ExecRequest{Argv: []string{"true"}, Provider: name, Policy: json.RawMessage(`{"version":1,"isolation":"microvm"}`)})
	if !errors.As(err, &ae) || ae.Status != 422 || ae.Type != client.ProblemProviderUnsupported || !strings.Contains(ae.Detail, name) ||
		!strings.Contains(ae.Detail, "isolation") || !strings.Contains(ae.Detail, "microvm") {
		t.Fatalf("exec on %s under a policy nothing there enforces: %v; want 422 provider-unsupported naming the provider and the field", name, err)
	}
	t.Logf("refused, as it must be: %s", ae.Detail)
	s.empty(ctx, t)
}

package relay

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestFromInnerExit: the exit a provider's inner daemon reports is taken
// within bounds: a reason this host does not know is the sandbox's
// failure naming it, a long message is cut on a rune boundary, the
// violations are counted at most maxInnerViolations, a missing status is
// -1.
func TestFromInnerExit(t *testing.T) {
	code := func(n int) *int { return &n }
	many := make([]client.Violation, maxInnerViolations+50)
	for i := range many {
		many[i] = client.Violation{Kind: "filesystem", Detail: "x"}
	}
	for _, tc := range []struct {
		name       string
		in         client.Process
		wantCode   int
		wantReason string
		wantViol   int
	}{
		{"clean", client.Process{ExitCode: code(3)}, 3, "", 0},
		{"signalled", client.Process{ExitCode: code(-1), Signal: "SIGTERM"}, -1, "", 0},
		{"no status", client.Process{}, -1, "", 0},
		{"known reason", client.Process{ExitCode: code(-1), Error: &client.ExecError{Code: sandbox.ReasonTimeout, Message: "timed out"}}, -1, sandbox.ReasonTimeout, 0},
		{"unknown reason", client.Process{ExitCode: code(0), Error: &client.ExecError{Code: "all_fine_trust_me", Message: "m"}}, 0, sandbox.ReasonSandboxFailed, 0},
		{"long message", client.Process{ExitCode: code(1), Error: &client.ExecError{Code: sandbox.ReasonMemory, Message: strings.Repeat("é", maxReason)}}, 1, sandbox.ReasonMemory, 0},
		{"many violations", client.Process{ExitCode: code(0), Violations: many}, 0, "", maxInnerViolations},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exit, viol := fromInnerExit(tc.in)
			if exit.Code != tc.wantCode || exit.Reason != tc.wantReason || len(viol) != tc.wantViol {
				t.Fatalf("exit %+v with %d violations; want code %d, reason %q, %d violations", exit, len(viol), tc.wantCode, tc.wantReason, tc.wantViol)
			}
			if len(exit.Message) > maxReason || !utf8.ValidString(exit.Message) {
				t.Fatalf("message of %d bytes, valid UTF-8 %v", len(exit.Message), utf8.ValidString(exit.Message))
			}
			if tc.name == "unknown reason" && !strings.Contains(exit.Message, "all_fine_trust_me") {
				t.Fatalf("message %q does not name the inner reason", exit.Message)
			}
		})
	}
}

// TestCompleteUTF8: a stdin chunk never ends inside a UTF-8 sequence.
func TestCompleteUTF8(t *testing.T) {
	s := []byte("aé€😀")
	for n := 0; n <= len(s); n++ {
		cut := completeUTF8(s[:n])
		if !utf8.Valid(s[:cut]) || n-cut >= utf8.UTFMax {
			t.Fatalf("completeUTF8(%q) = %d", s[:n], cut)
		}
	}
}

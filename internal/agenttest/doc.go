// Package agenttest is the conformance suite every agent adapter must pass.
//
// Run runs the same subtests for every agent, one after another, in two
// variants, each on a stack of its own (the HTTP API on a real server with
// the adapter registered, the Go client over HTTP, one internal/fakellm
// server behind a scenario switcher), served by a Host:
//
//	host       EngineHost: a SQLite store and the session engine; the
//	           agent runs on the host, a child of the test process
//	sandboxed  a whole daemon (internal/daemon/daemontest): every session
//	           is created with the agent-default policy, so the agent runs
//	           in a sandbox (the process runtime) and reaches the model only
//	           through the egress proxy's route, the key held by the daemon
//	           (the adapter's options) and added by the proxy outside
//
// The subtests:
//
//	write             "write" in accept_edits: hello.txt is written, a
//	                  file_change item (a tool item without FileChanges),
//	                  the answer "done", end_turn; usage; the agent used
//	                  Target.Protocol with the LLM's key
//	permission_allow  "permission" in default: permission.requested (kind
//	                  command or tool) → allow → the file exists,
//	                  permission.resolved {allow, by user}, end_turn
//	permission_deny   the same → deny → no file, {deny, by user}, the
//	                  request's item is declined, the agent carries on
//	two_turns         "multi": the second answer shows the conversation went
//	                  on in the same session; seqs continue
//	interrupt         "slow": interrupt mid-stream → turn.completed
//	                  interrupted within Target.InterruptWithin, then a turn
//	                  works
//	crash             Target.KillAgent mid-turn → turn.completed error,
//	                  session.ended {error, exit_code or stderr_tail}, the
//	                  session is failed, a new session works
//	upstream_error    "error500" → error event(s), turn.completed error; the
//	                  next turn ("text") works
//	content           Stack.CheckContent: a real PNG reaches the model with
//	                  its bytes (Caps.Images), a workspace file's content
//	                  (Caps.Files); a part without its flag is refused 422
//	                  unsupported-content
//
// Every session a subtest creates is deleted at its end, and its whole log
// is then read back and checked twice: with CheckInvariants (gapless seqs,
// turn brackets, items started/completed in pairs, deltas adding up,
// permissions resolved once, nothing after session.ended) and against an
// expected shape (Shape, MatchShape) built from Target.Caps alone, so that
// all agents are held to the same stream structure. A flag set to false
// skips its assertions with a message; a true flag is always checked.
//
// In the sandboxed variant, every session's log must also show in its
// session.started the sandbox's runtime and mechanisms (none degraded),
// and the daemon's audit log must hold, for that session, model requests
// allowed on the proxy's route and the credential the proxy added to them
// (except for a session whose agent was killed: see daemontest's Check).
// The unsandboxed variant checks that session.started names no sandbox.
//
// Target.Sandboxed.Runtimes runs the sandboxed variant again on further
// isolation runtimes, as subtests sandboxed-NAME ("gvisor": agent-default
// with isolation gvisor, the host internal/daemon/daemontest registers
// with RegisterSandboxHostOn).
//
// By default the sandboxed variant runs QuickSubtests (write,
// permission_allow, crash), and QuickOtherRuntimes (write) on the
// further runtimes: AGENTBOX_CONFORMANCE=full runs all of them. It
// is skipped, with the reason, on a machine that cannot build sandboxes
// (the process runtime's probe), and fails when no sandboxed host is
// registered. What differs for an agent sandboxed is declared in
// Target.Sandboxed, each with its reason: Unsupported (the whole variant,
// checked: a sandboxed session must then be refused with
// agent.ErrNoSandbox), Skip (subtests by name; a name that is no subtest
// fails the run) and KillAgent.
//
// # Adding an agent
//
// In the adapter's package, add conformance_test.go:
//
//	func TestConformance(t *testing.T) {
//		agenttest.Run(t, agenttest.Target{
//			Name: Name,
//			New: func(t *testing.T, llm agenttest.LLM) agent.Adapter {
//				// Point the adapter at llm.URL("") (the switcher; the suite
//				// picks the scenario) with llm.Key(), through its options
//				// or through Env below.
//				return New(Options{BaseURL: llm.URL(""), APIKey: llm.Key(), HomeDir: t.TempDir()})
//			},
//			Caps:      capabilities,          // what Info() reports
//			Protocol:  fakellm.APIResponses,  // the API the CLI calls
//			URLSuffix: "/v1",                 // if its base URL carries a path
//		})
//	}
//
// and, for the sandboxed variant, an external test file (package x_test:
// the daemon imports the adapter, so its internal tests cannot import it)
// registering the daemon-backed host:
//
//	package x_test
//
//	import _ "github.com/agentbox/agentbox/internal/daemon/daemontest"
//
// Find the CLI with RequireInstalled, which fails (never skips) when it is
// missing, and pass install.Binary(name) as the adapter's Options.Binary.
// KillAgent defaults to KillAgentByCwd, which SIGKILLs the direct child of
// the test process running in the session's directory; set it when the
// adapter runs the agent differently (a wrapper script, a shared server).
// Sandboxed, the host's KillAgent SIGKILLs the processes the session's
// sandbox init started (Target.Sandboxed.KillAgent replaces it).
// The suite's fake LLM maps its abstract write/shell calls onto whatever
// tools the agent offers (see internal/fakellm), so the scenarios need no
// per-agent changes; if a subtest fails, fix the adapter (or the fake
// LLM's tool mapping), not the expected shape.
//
// # Shared test scaffolding
//
// An adapter's own end-to-end tests build the same stack as Run with
// NewStack (on EngineHost unless StackOptions.Host says otherwise) (Stack.SetScenario, Create, Turn, Answer; Items, FindItem,
// LastMessage and Dump read a turn's events), and its golden tests use
// ReadLines, GoldenEvents and Golden. Golden takes the package's own
// -update flag as a parameter: each package defines that flag itself.
package agenttest

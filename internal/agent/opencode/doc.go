// Package opencode drives OpenCode natively through its HTTP server
// (`opencode serve`): sessions are created with POST /session, turns are
// sent with POST /session/{id}/prompt_async, interrupted with POST
// /session/{id}/abort, approvals are answered with POST
// /permission/{id}/reply, and everything OpenCode says arrives on its SSE
// stream GET /event, which a pure Mapper translates into universal events.
//
// # Servers
//
// One `opencode serve --hostname 127.0.0.1 --port <free port>` runs per
// provider: sessions with the same base URL, API key, model and extra
// environment share it (OpenCode's config, which holds the provider, is
// per process). It is started lazily by the first session that needs it
// (1.3–2 s), health-checked (GET /global/health) and stopped (SIGTERM,
// then SIGKILL of its process group) when its last session closes or the
// adapter is closed. The working directory and the permission mode are
// per session, so they do not split servers: every request names the
// session's directory (?directory=), and each OpenCode session is created
// with the permission rules of its mode (POST /session {permission}),
// which OpenCode applies after its config's rules:
//
//	default        bash ask,   edit ask
//	accept_edits   bash ask,   edit allow
//	bypass         everything allow
//	plan           bash deny,  edit deny
//
// When a server dies, every session on it ends (agent.Exiter) with the
// exit code and the tail of its output, and the next session starts a
// fresh one. The server is protected by a random OPENCODE_SERVER_PASSWORD
// (HTTP basic auth) so other local users cannot drive it.
//
// The environment is built from scratch: PATH (the binary's directory and
// the system directories), HOME and XDG_{CONFIG,DATA,CACHE,STATE}_HOME
// under Options.Home, OPENCODE_CONFIG (a generated config with the
// provider "agentbox": @ai-sdk/openai-compatible at the base URL, the key
// read from an environment variable so it is not written to disk),
// OPENCODE_DISABLE_{MODELS_FETCH,AUTOUPDATE,LSP_DOWNLOAD,SHARE,
// DEFAULT_PLUGINS,CLAUDE_CODE,EXTERNAL_SKILLS,PROJECT_CONFIG,
// EMBEDDED_WEB_UI}=1, and npm_config_registry pointed at the provider's
// host so OpenCode's plugin lookups reach no other host. A session's Env
// OPENAI_BASE_URL and OPENAI_API_KEY override Options.BaseURL and APIKey;
// other variables are added to the server's environment (and so select a
// server of their own).
//
// # Sandboxed sessions
//
// A sandboxed session (agent.Config.Sandbox) gets a server of its own,
// started inside its sandbox through agent.Proc (`--port 0`: the port is
// read from its "listening on" line) and stopped with the session, with a
// home of its own (Home/sandboxed/ID, agent.SandboxNeeder) whose
// opencode.json names neither the upstream nor a key: it reads both from
// the server's environment ({env:AGENTBOX_OPENCODE_BASE_URL},
// {env:AGENTBOX_OPENCODE_API_KEY}), which holds the session's provider
// (agent.ProviderUser; in a sandbox the egress proxy's route and the
// placeholder) and the session's Env. The server listens on the loopback
// of the sandbox's network namespace, which the daemon cannot reach and
// the sandbox gets no route for: every HTTP connection of the daemon's
// client to it is a relay process started in the sandbox (the opencode
// binary as Bun, BUN_BE_BUN=1, running relayJS) that connects to the port
// there and copies bytes over its stdin and stdout (sandboxed.go). It
// needs nothing but a process's pipes, which every runtime gives; it is
// tested under the process runtime (TestSandboxedSessions).
//
// # Mapping
//
//	native (GET /event)                           universal
//	events of other sessions / of the server      nothing
//	message.updated (role)                        nothing (user message parts are then skipped:
//	                                              the engine records the input)
//	message.updated / session.error with error    error {code api_error|agent_error, retryable for
//	                                              429/5xx}; MessageAbortedError → nothing (interrupt)
//	message.part.updated text / reasoning         item.started message (assistant) / reasoning;
//	                                              item.completed with the full text once time.end is set
//	message.part.delta                            item.delta text (output for tool parts)
//	message.part.updated tool (pending → running  item.started once the input is known, item.delta
//	  → completed | error)                        output for a running bash's metadata.output,
//	                                              item.completed (failed on error, declined when
//	                                              its permission was denied):
//	  bash                                          command {command, cwd, output, exit_code}
//	  write, edit                                   file_change {path relative to cwd, add|update,
//	                                                diff: metadata.diff or the new file's diff}
//	  todowrite                                     plan {entries}
//	  webfetch, websearch                           web_search {query: the query or URL}
//	  anything else                                 tool_call {name, input, output}
//	message.part.updated step-finish              the turn's usage (tokens and cost summed over
//	                                              steps; the last finish reason "length" → max_tokens)
//	message.part.updated step-start, patch,       nothing
//	  snapshot
//	message.part.updated (other part types)       native "part/<type>"
//	session.status busy                           nothing
//	session.status retry                          nothing, until more than Options.MaxRetries:
//	                                              error {api_error, retryable}, abort, turn stop error
//	session.status idle                           end of turn (open items completed as failed); a
//	                                              turn that gave up or was interrupted ends
//	                                              Options.InterruptTimeout after its abort even
//	                                              without it, and the next prompt then waits (as
//	                                              long again) for that late idle before it posts
//	permission.asked                              Host.RequestPermission (bash → command, edit →
//	                                              file_write, else tool; options once / always /
//	                                              reject) → POST /permission/{id}/reply
//	question.asked                                native, and the question is rejected (not
//	                                              supported yet)
//	session.created/updated/diff/idle,            nothing
//	  permission.replied
//	anything else of the session                  native "<type>"
package opencode

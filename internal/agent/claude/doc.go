// Package claude drives the Claude Code CLI natively (not through ACP): it
// runs one long-lived `claude -p --input-format stream-json
// --output-format stream-json` process per session, speaks the CLI's
// stream-json protocol on its stdin and stdout (user messages, control
// requests for approvals, questions and interrupts), and translates what
// the CLI prints into universal events.
//
// The translation is a pure function of the CLI's output lines (Mapper),
// so it is tested against recorded transcripts without a process; the
// process is run by internal/agent/procrt, and the protocol (session.go)
// is tested with a helper process and, end to end, with the real CLI
// against internal/fakellm.
//
// At start the session sends the CLI the initialize control request its
// SDKs send first; the models its answer lists (aliases such as "sonnet",
// then the full names they resolve to) are the session's model list
// (agent.Cataloger). A CLI that does not answer within
// Options.InitTimeout runs without a list. A switch between turns is the
// set_model control request (agent.Configurer). Claude Code offers no
// modes here: its permission mode is agentbox's permission_mode, chosen at
// create under the policy, so a mode switch could undo what the policy
// chose; the output styles it lists are not offered either.
//
// # Mapping
//
//	native (stdout)                               universal
//	system/init (first, or a new session id)      native "system/init" {session_id, model, cwd, tools, …}; SetNativeSessionID
//	system/status "requesting"                    nothing (a progress tick with no content)
//	system/* (other)                              native "system/<subtype>"
//	stream_event content_block_start text         item.started message (assistant)
//	stream_event content_block_start thinking     item.started reasoning
//	stream_event text_delta / thinking_delta      item.delta text
//	stream_event content_block_start tool_use     item.started of the tool's kind (below)
//	stream_event input_json_delta                 item.delta input
//	stream_event message_stop (blocks still open) item.completed (failed "interrupted" for abandoned blocks)
//	assistant text / thinking                     item.completed with the full text (item.started first when nothing was streamed)
//	assistant tool_use                            the tool item's input (item.started when nothing was streamed)
//	assistant with is_api_error_message           error {code: api_error, retryable for 429/5xx/529}
//	assistant, other content blocks               native "assistant/<block type>"
//	user tool_result                              item.completed of the tool's item:
//	  Bash                                          command {command, cwd, output, exit_code}; failed on is_error
//	  Write, Edit, MultiEdit, NotebookEdit          file_change {path, kind add|update, unified diff}
//	  mcp__<server>__<tool>                         mcp_tool_call {server, name, input, output}
//	  TodoWrite, TaskCreate/TaskUpdate/TaskList     plan {entries}
//	  WebSearch, WebFetch                           web_search {query: the query or the URL}
//	  anything else                                 tool_call {name, input, output}
//	  a tool the user denied (tool_result_meta)     status declined
//	user (other content)                          native "user"
//	result                                        the turn's Result (stop reason, usage with cache tokens and cost);
//	                                              error event when is_error (unless an API error was already reported);
//	                                              every item still open is completed (failed)
//	control_request can_use_tool                  permission.requested through Host.RequestPermission, answered
//	                                              with a control_response allow (updatedInput) or deny
//	control_request can_use_tool AskUserQuestion  question.requested per question through Host.AskQuestion,
//	                                              answered with updatedInput.answers
//	control_request (any other subtype)           an error control_response (never left unanswered)
//	anything else                                 native "<type>" with the raw payload
//
// Interrupts (the turn's context cancelled) send the CLI's interrupt
// control request and wait for its result (InterruptTimeout, then the
// process group is killed); the turn returns StopInterrupted.
//
// # Process
//
// The CLI runs in the session's directory, in its own process group, with
// an environment built from scratch: PATH (the binary's directory and the
// system directories), HOME (Options.HomeDir, shared by the adapter's
// sessions, where the CLI keeps the transcripts --resume reads), the
// Anthropic base URL and key, switches that turn off telemetry, error
// reports and auto-updates, CLAUDE_CODE_ENABLE_TODO_TOOLS=1 (the task-list
// tools that become plan items), IS_SANDBOX=1 for bypass mode as root (the
// CLI refuses bypassPermissions as root without it), then Options.ExtraEnv
// and the session's own Env. A new session gets --session-id with a fresh
// UUID, so its native id is known before the first turn; a resumed one gets
// --resume. The process is one per session and lives across turns; when it
// dies on its own the session ends with its exit code and stderr tail.
package claude

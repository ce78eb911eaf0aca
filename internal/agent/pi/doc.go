// Package pi drives the pi coding agent (@mariozechner/pi-coding-agent)
// natively: one `pi --mode rpc` process per session, speaking pi's RPC
// protocol (JSON lines on stdin and stdout) and translating what pi prints
// into universal events. The process (start, lines, exit, interrupt's
// escalation, close) is run by internal/agent/procrt; this package is the
// protocol and the mapper.
//
// pi talks to an OpenAI-compatible Chat Completions provider that the
// adapter writes into a private agent directory (PI_CODING_AGENT_DIR:
// models.json, settings.json), with PI_OFFLINE=1 and PI_TELEMETRY=0 so that
// it makes no other traffic. pi has no approval system of its own: the
// package ships a small extension (extension.ts, embedded and loaded with
// -e) that asks the RPC client to confirm the tools the session's
// permission mode does not allow outright (default: bash, write and edit;
// accept_edits: bash; bypass: none; plan: bash, write and edit are refused
// without asking), and reports a file's content before a write or edit so
// that the file_change item carries a diff.
//
// # Mapping
//
//	native (stdout)                               universal
//	agent_start … agent_end                       one agentbox turn (Result from the last assistant message)
//	message_update text_start/_delta/_end         item.started / item.delta text / item.completed message (assistant)
//	message_update thinking_start/_delta/_end     the same as a reasoning item
//	message_end (assistant)                       usage added up; blocks never streamed reported whole;
//	                                              stopReason "error" → error {upstream_error, retryable for 408/429/5xx}
//	tool_execution_start bash                     item.started command {command, cwd}
//	tool_execution_update bash                    item.delta output (what is new in the output so far)
//	tool_execution_start write/edit               item.started file_change {path, kind}
//	tool_execution_start (other tools)            item.started tool_call {name, input}
//	tool_execution_end                            item.completed: completed, failed on isError, declined
//	                                              when the permission was denied; file_change with a diff
//	extension_ui_request confirm (ours)           host.RequestPermission → extension_ui_response {confirmed}
//	extension_ui_request notify (ours)            the file's old content, kept for the diff
//	extension_ui_request select/input/editor      answered {cancelled: true}
//	extension_error                               error {extension_error}
//	response                                      the answer to our command (prompt, abort, get_state)
//	turn_start, turn_end, queue_update            nothing (a pi turn is one model call)
//	anything else (compaction_*, auto_retry_*)    native
//
// Stop reasons: "stop"/"toolUse" → end_turn, "length" → max_tokens,
// "error" → error, "aborted" → interrupted. An interrupt sends pi's abort
// command; pi ends the run with agent_end (then answers the abort). Resume
// starts pi with --session <pi session id> in the adapter's shared session
// directory.
package pi

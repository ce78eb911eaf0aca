// Package acpserver makes agentbox itself an ACP (Agent Client Protocol)
// agent, so that an ACP client such as an editor can drive any agentbox
// agent, including the ones agentbox speaks to natively, with agentbox's
// durable sessions, policy and approvals in the path.
//
// It drives agentbox only through its public API (Backend, which
// *client.Client implements), so it works against an embedded, a local or
// a remote daemon. Two transports carry it: Serve on any reader and writer
// (`agentbox acp` uses its stdio), and Handler, an HTTP endpoint that
// switches a GET with "Upgrade: acp" to the protocol and then speaks
// newline-delimited JSON-RPC on the hijacked connection (Dial is its
// client side).
//
// # Mapping
//
//	ACP                                agentbox
//	initialize                         loadSession, image and embedded-context prompts
//	session/new {cwd}                  CreateSession {agent, cwd, model, permission mode, env}
//	session/load {sessionId}           the session's log replayed as updates; Resume when its agent is not running
//	session/prompt                     SendMessage, then the turn's events until turn.completed:
//	  message item.delta text            agent_message_chunk (user_message_chunk on load)
//	  reasoning item.delta text          agent_thought_chunk
//	  message/reasoning without deltas   one chunk with the completed text
//	  tool_call, command, file_change,   tool_call (kind, title, locations, rawInput) at item.started,
//	  web_search, mcp_tool_call          tool_call_update with output at item.delta, and at item.completed
//	                                     status completed/failed (declined is failed), diff and text content
//	  plan item                          plan
//	  error                              an agent_message_chunk telling the error
//	  permission.requested               session/request_permission (allow_once, allow_always only when
//	                                     offered, reject_once); the choice → AnswerPermission; a request
//	                                     settled elsewhere (permission.resolved) withdraws the dialog
//	  question.requested                 declined (ACP cannot ask questions)
//	  turn.completed                     stopReason: end_turn, max_tokens, cancelled (interrupted),
//	                                     refusal; a failed turn is a JSON-RPC error
//	session/cancel                     Interrupt; the prompt returns "cancelled" once the turn ended
//
// MCP servers in session/new are not passed on, and session modes, config
// options, session/list and session/resume are not offered.
package acpserver

// Package acp is the adapter for agents that speak the Agent Client
// Protocol (ACP) over stdio: Gemini CLI (gemini --acp), claude-code-acp,
// codex-acp, OpenCode (opencode acp) and any ACP binary added by
// configuration (FromConfig).
//
// One agent process runs per session, run by internal/agent/procrt (an
// agent.Proc, so inside the session's sandbox when it has one). The
// adapter speaks JSON-RPC through internal/acpwire's Conn and handles the
// agent's messages itself: initialize (advertising only the client
// methods it serves), session/new or session/load, session/set_mode and the model,
// session/prompt, session/cancel on an interrupt. Translator turns every
// session/update into universal events: message and thought chunks into
// streamed message and reasoning items, tool calls into tool_call, command
// and file_change items (ACP diffs become unified diffs), plans into plan
// items, and every other kind (available commands, mode and config
// changes, usage, unknown kinds) into native events. Permission requests go
// to the engine; the answer picks the agent's option by kind, never an
// "always" option unless the client named it.
//
// fs/read_text_file and fs/write_text_file are served (when an Agent asks
// for it and the session is not sandboxed) confined to the session's
// directory, symbolic links included. terminal/* (create, output,
// wait_for_exit, kill, release) is served when an Agent asks for it: each
// command is an agent.Proc in the session's sandbox and directory, killed
// with its process tree on kill, release or the end of the session. The
// built-in agents run their commands themselves and do not ask for it.
//
// Agents returns the built-in agents for the composition root.
package acp

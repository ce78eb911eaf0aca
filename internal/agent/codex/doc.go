// Package codex is the native adapter for OpenAI's Codex CLI.
//
// One `codex app-server` process per adapter (started on first use, in its
// own process group, with an environment built from scratch and a
// generated config.toml in the adapter's CODEX_HOME) serves every
// unsandboxed session: a session is a thread of it. A sandboxed session
// (agent.Config.Sandbox) gets a server of its own, started inside its
// sandbox through agent.Proc and stopped with the session, with a
// CODEX_HOME of its own (Home/sandboxed/ID, agent.SandboxNeeder) whose
// config.toml names no base URL: the server's command line names the
// session's provider (agent.ProviderUser: in a sandbox, the egress proxy's
// route), and its OPENAI_API_KEY holds the placeholder. Codex's own
// sandbox cannot run inside agentbox's, so such threads run with
// "danger-full-access" and agentbox's sandbox is the boundary. The two sides speak JSON-RPC 2.0 over JSON
// lines on stdio (rpc.go); the server omits the "jsonrpc" member, so the
// peer here neither requires nor sends it.
//
// Each thread's notifications are translated by a pure Mapper (mapper.go)
// into universal events. Approval requests the server sends
// (item/commandExecution/requestApproval, item/fileChange/requestApproval,
// item/permissions/requestApproval, mcpServer/elicitation/request and the
// legacy execCommandApproval/applyPatchApproval) are put to the client
// through agent.Host.RequestPermission and answered per request; a
// session-wide grant ("acceptForSession") is sent only when the client
// picked that option by its id, and it is offered only when the request
// lists it. Any other server request gets a JSON-RPC error reply.
//
// A session's OPENAI_BASE_URL / OPENAI_API_KEY (agent.Config.Env) select
// its provider: the base URL is a per-thread config override
// (model_providers.agentbox.base_url) at thread/start; the key is read by
// the server from an environment variable once per process, so sessions
// with a key other than the daemon's get a server process of their own
// (one per distinct key).
//
// Models are model/list's. Codex has no request that only sets a thread's
// model: a switch (agent.Configurer) is sent with the next turn/start,
// whose model holds for that turn and the thread's later ones; on it codex
// first compacts the thread with the previous model, then runs the turn on
// the new one.
//
// If a server process dies, every session on it ends (agent.Exiter, reason
// error, with the exit code and the tail of its stderr) and the next session
// starts a fresh process.
package codex

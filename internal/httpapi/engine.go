package httpapi

import (
	"context"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/engine"
)

// Engine is what the API needs from the session engine; *engine.Manager
// implements it.
type Engine interface {
	Agents(ctx context.Context) []agent.Info
	// AgentCatalog is one agent with the models and modes its sessions
	// announced (nil when none has).
	AgentCatalog(ctx context.Context, name string) (agent.Info, *engine.Catalog, error)
	Create(ctx context.Context, p engine.CreateParams) (engine.Session, error)
	// Configure changes a session's model and/or mode between turns.
	Configure(ctx context.Context, id, model, mode string) (engine.Session, error)
	Get(ctx context.Context, id string) (engine.Session, error)
	List(ctx context.Context, opts engine.ListOptions) ([]engine.Session, error)
	// Delete terminates a live session; with purge it also removes its log.
	Delete(ctx context.Context, id string, purge bool) error
	// Resume starts a new agent process for a session that is not live.
	// mcp, when given, are its MCP servers again with their values.
	Resume(ctx context.Context, id string, env map[string]string, mcp ...agent.MCPServer) (engine.Session, error)
	// Pause pauses a live session on a provider whose sandboxes pause.
	Pause(ctx context.Context, id string) (engine.Session, error)
	// Send starts a turn and returns its id at once.
	Send(ctx context.Context, id string, content []event.ContentPart) (turnID string, err error)
	Interrupt(ctx context.Context, id string) (turnID string, err error)
	AnswerPermission(ctx context.Context, id, pid string, ans agent.PermissionAnswer) (event.Event, error)
	AnswerQuestion(ctx context.Context, id, qid string, ans agent.Answer) (event.Event, error)
	Requests(ctx context.Context, id string, state engine.RequestState) ([]engine.Request, error)
	Events(ctx context.Context, id string, after int64, limit int) ([]event.Event, error)
	Subscribe(ctx context.Context, id string, after int64) (<-chan event.Event, error)
	// Network and SetNetwork read and replace a session's network rules.
	Network(ctx context.Context, id string) (engine.Network, error)
	SetNetwork(ctx context.Context, id string, allow []string) (engine.Network, error)
}

// LiveSandboxes is an optional ability of an Engine: what the sandbox of a
// live session has in force (as its session.started said). ok is false when
// the session is not live or runs on the host.
type LiveSandboxes interface {
	LiveSandbox(id string) (info event.SandboxInfo, ok bool)
}

var (
	_ Engine        = (*engine.Manager)(nil)
	_ LiveSandboxes = (*engine.Manager)(nil)
)

package httpapi

import (
	"encoding/json"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
)

// This file is the only place where engine, store and agent types meet the
// wire types of package client.

func toAgent(in agent.Info) client.Agent {
	c := in.Capabilities
	return client.Agent{
		Name:  in.Name,
		Title: in.Title,
		Capabilities: client.Capabilities{
			Text: c.Text, Deltas: c.Deltas, Reasoning: c.Reasoning, ToolCalls: c.ToolCalls,
			CommandOutput: c.CommandOutput, FileChanges: c.FileChanges, Diffs: c.Diffs,
			Permissions: c.Permissions, Questions: c.Questions, Images: c.Images, Files: c.Files,
			Plans: c.Plans, Usage: c.Usage, Resume: c.Resume, Interrupt: c.Interrupt,
			ModelList: c.ModelList, ModelSwitch: c.ModelSwitch, ModeSwitch: c.ModeSwitch,
		},
		Available: in.Available,
		Reason:    in.Reason,
		Installed: in.Installed,
		Version:   in.Version,
		Path:      in.Path,
	}
}

// toAgentDetail is an agent with what its sessions said it offers.
func toAgentDetail(in agent.Info, c *engine.Catalog) client.AgentDetail {
	out := client.AgentDetail{Agent: toAgent(in)}
	switch {
	case !in.Available:
		out.CatalogNote = "the agent is not available here"
	case c == nil && !in.Capabilities.ModelList:
		out.CatalogNote = "the agent does not say which models or modes it offers; the session's model and mode go to it as given"
	case c == nil:
		out.CatalogNote = "the agent announces its models and modes when a session starts; no session of it has started since the daemon did"
	default:
		at := c.At
		out.Models, out.Modes = c.Models, c.Modes
		out.DefaultModel, out.DefaultMode = c.DefaultModel, c.DefaultMode
		out.ModelsOpen = c.OpenModels
		out.CatalogSession, out.CatalogTime = c.SessionID, &at
	}
	return out
}

func toSession(s engine.Session) client.Session {
	return client.Session{
		ID:              s.ID,
		Agent:           s.Agent,
		Model:           s.Model,
		Mode:            s.Mode,
		PermissionMode:  s.PermissionMode,
		Cwd:             s.Cwd,
		Metadata:        s.Metadata,
		Status:          string(s.Status),
		NativeSessionID: s.NativeSessionID,
		CurrentTurnID:   s.CurrentTurnID,
		CreatedAt:       s.CreatedAt,
		UpdatedAt:       s.UpdatedAt,
		EndedAt:         s.EndedAt,
		Sandboxed:       len(s.Policy) > 0,
		Sandbox:         sandboxOf(s.Policy),
	}
}

func sandboxOf(raw json.RawMessage) *client.SessionSandbox {
	if len(raw) == 0 {
		return nil
	}
	return toSandbox(raw)
}

// toSession is toSession with what the sandbox of a live session has in
// force, when the engine can tell.
func (s *server) toSession(ss engine.Session) client.Session {
	out := toSession(ss)
	if out.Sandbox == nil {
		return out
	}
	for _, a := range ss.Adjusted {
		out.Sandbox.Adjusted = append(out.Sandbox.Adjusted, client.LimitAdjustment{Field: a.Field, Requested: a.Requested, Applied: a.Applied, By: a.By})
	}
	if ls, ok := s.eng.(LiveSandboxes); ok {
		if info, live := ls.LiveSandbox(ss.ID); live {
			if info.Runtime != "" {
				out.Sandbox.Runtime = info.Runtime
			}
			out.Sandbox.Mechanisms, out.Sandbox.Degraded = info.Mechanisms, info.Degraded
		}
	}
	return out
}

// toSandbox describes the sandbox of a session with an effective policy:
// the runtime the policy asks for and the policy's hash. The stored policy
// is the daemon's own output, so it is decoded without the schema check
// of a client's policy.
func toSandbox(raw json.RawMessage) *client.SessionSandbox {
	var p policy.Policy
	if err := json.Unmarshal(raw, &p); err != nil {
		return &client.SessionSandbox{}
	}
	return &client.SessionSandbox{Runtime: p.Isolation(), PolicyHash: p.Hash()}
}

func toRequest(r engine.Request) client.Request {
	return client.Request{
		ID:         r.ID,
		Kind:       string(r.Kind),
		State:      string(r.State),
		Payload:    rawOrNil(r.Payload),
		Resolution: rawOrNil(r.Resolution),
		CreatedAt:  r.CreatedAt,
		ResolvedAt: r.ResolvedAt,
	}
}

// rawOrNil keeps an absent payload absent (a nil json.RawMessage inside an
// interface would be written as null even with omitempty).
func rawOrNil(m json.RawMessage) any {
	if len(m) == 0 {
		return nil
	}
	return m
}

func toCreateParams(c client.CreateSession) engine.CreateParams {
	return engine.CreateParams{
		Agent:          c.Agent,
		Model:          c.Model,
		Mode:           c.Mode,
		PermissionMode: c.PermissionMode,
		Cwd:            c.Cwd,
		Metadata:       c.Metadata,
		Env:            c.Env,
		Policy:         c.Policy,
		PolicyDoc:      toPolicyDoc(c.PolicySource),
		MCPServers:     toMCPServers(c.MCPServers),
		Provider:       c.Provider,
	}
}

func toMCPServers(in []client.MCPServer) []agent.MCPServer {
	if len(in) == 0 {
		return nil
	}
	out := make([]agent.MCPServer, len(in))
	for i, s := range in {
		out[i] = agent.MCPServer{Name: s.Name, Type: s.Type, Command: s.Command, Args: s.Args, Env: s.Env, URL: s.URL, Headers: s.Headers}
	}
	return out
}

func toPolicyDoc(src *client.PolicySource) *engine.PolicyDoc {
	if src == nil {
		return nil
	}
	return &engine.PolicyDoc{Name: src.Name, Text: src.Text}
}

// toContent turns a validated SendMessage into content parts.
func toContent(m client.SendMessage) []event.ContentPart {
	if m.Text != "" {
		return []event.ContentPart{event.TextPart(m.Text)}
	}
	return m.Content
}

func toPermissionAnswer(a client.PermissionAnswer) agent.PermissionAnswer {
	return agent.PermissionAnswer{
		Decision: event.Decision(a.Decision),
		OptionID: a.OptionID,
		Message:  a.Message,
		By:       clientDecider(a.By),
	}
}

func toAnswer(a client.QuestionAnswer) agent.Answer {
	return agent.Answer{Text: a.Answer, OptionID: a.OptionID, Cancelled: a.Cancel, By: clientDecider(a.By)}
}

// clientDecider is who a client says decided: a person (user, the
// default) or a rule of the client's own (policy). A client cannot claim
// the daemon's deciders (timeout, daemon); the schema's enum refuses them.
func clientDecider(by string) event.DecidedBy {
	if by == string(event.ByPolicy) {
		return event.ByPolicy
	}
	return event.ByUser
}

// nonNil makes empty lists encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

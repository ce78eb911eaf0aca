package session

import (
	"context"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

// contentCapability names the capability flag a content part type needs.
var contentCapability = map[event.PartType]string{event.PartImage: "images", event.PartFile: "files"}

// accepts reports whether an agent with caps takes parts of type t.
func accepts(caps agent.Capabilities, t event.PartType) bool {
	switch t {
	case event.PartText:
		return true
	case event.PartImage:
		return caps.Images
	case event.PartFile:
		return caps.Files
	}
	return false
}

// checkContent is the one check of a message's parts against what its
// session's agent accepts (agent.Capabilities), made before any turn
// starts, or any stopped agent is resumed for it: a part the agent cannot
// take refuses the whole message (*ContentError naming the part), instead
// of the adapter dropping it or turning it into something else.
func (m *Manager) checkContent(ctx context.Context, agentName string, content []event.ContentPart) error {
	var caps *agent.Capabilities
	for i, p := range content {
		if p.Type == event.PartText {
			continue
		}
		if caps == nil {
			a, err := m.cfg.Agents.Get(agentName)
			if err != nil {
				return err
			}
			c := a.Info(ctx).Capabilities
			caps = &c
		}
		if !accepts(*caps, p.Type) {
			return &ContentError{Index: i, Type: p.Type, Agent: agentName}
		}
	}
	return nil
}

// hasAttachments reports whether content has a part other than text.
func hasAttachments(content []event.ContentPart) bool {
	for _, p := range content {
		if p.Type != event.PartText {
			return true
		}
	}
	return false
}

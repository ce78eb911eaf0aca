package codex

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

// Option ids offered to clients.
const (
	optAccept           = "accept"
	optAcceptForSession = "acceptForSession"
	optDecline          = "decline"
)

// approvalMethods are the server requests put to the client as permission
// requests.
var approvalMethods = map[string]bool{
	"item/commandExecution/requestApproval": true,
	"item/fileChange/requestApproval":       true,
	"item/permissions/requestApproval":      true,
	"mcpServer/elicitation/request":         true,
	"execCommandApproval":                   true,
	"applyPatchApproval":                    true,
}

type approvalParams struct {
	ItemID             string            `json:"itemId"`
	CallID             string            `json:"callId"` // legacy methods
	Command            json.RawMessage   `json:"command"`
	Cwd                string            `json:"cwd"`
	Reason             string            `json:"reason"`
	GrantRoot          string            `json:"grantRoot"`
	AvailableDecisions []json.RawMessage `json:"availableDecisions"`
	Permissions        json.RawMessage   `json:"permissions"`
	ServerName         string            `json:"serverName"`
	Message            string            `json:"message"`
	FileChanges        json.RawMessage   `json:"fileChanges"`
}

// permissionRequest builds what the engine asks the client. item is the
// universal item the request is about (nil if unknown).
func permissionRequest(method string, params json.RawMessage, item *event.Item) agent.PermissionRequest {
	var p approvalParams
	_ = json.Unmarshal(params, &p)
	req := agent.PermissionRequest{Kind: event.PermTool, Tool: method}
	if item != nil {
		req.ItemID = item.ID
	}
	if json.Valid(params) {
		req.Input = params
	}
	cmd := commandText(p.Command)
	if cmd == "" && item != nil {
		cmd = item.Command
	}
	switch method {
	case "item/commandExecution/requestApproval", "execCommandApproval":
		req.Kind, req.Tool = event.PermCommand, "shell"
		req.Title = "Run " + agent.Clip(cmd, 200)
		req.Detail = cmd
		if p.Cwd != "" {
			req.Detail += "\n(in " + p.Cwd + ")"
		}
	case "item/fileChange/requestApproval", "applyPatchApproval":
		req.Kind, req.Tool = event.PermFileWrite, "apply_patch"
		var paths []string
		if item != nil {
			for _, c := range item.Changes {
				paths = append(paths, c.Path)
			}
		}
		req.Title = "Change files"
		if len(paths) > 0 {
			req.Title = "Change " + strings.Join(paths, ", ")
		}
		if item != nil {
			var diffs []string
			for _, c := range item.Changes {
				diffs = append(diffs, fmt.Sprintf("%s (%s)\n%s", c.Path, c.Kind, c.Diff))
			}
			req.Detail = strings.Join(diffs, "\n")
		}
		if p.GrantRoot != "" {
			req.Title = "Allow writes under " + p.GrantRoot
		}
	case "item/permissions/requestApproval":
		req.Title = "Grant additional permissions"
		if len(p.Permissions) > 0 {
			req.Detail = string(p.Permissions)
		}
	case "mcpServer/elicitation/request":
		req.Title = "MCP server " + p.ServerName + " asks for input"
		req.Detail = p.Message
	default:
		req.Title = method
	}
	if p.Reason != "" {
		req.Detail = strings.TrimSpace(req.Detail + "\nReason: " + p.Reason)
	}
	req.Options = []event.PermissionOption{{ID: optAccept, Kind: event.OptionAllowOnce, Label: "Allow"}}
	if offersSessionGrant(p.AvailableDecisions) {
		req.Options = append(req.Options, event.PermissionOption{ID: optAcceptForSession, Kind: event.OptionAllowAlways, Label: "Allow for this session"})
	}
	req.Options = append(req.Options, event.PermissionOption{ID: optDecline, Kind: event.OptionDenyOnce, Label: "Deny"})
	return req
}

// offersSessionGrant reports whether the request lists acceptForSession.
func offersSessionGrant(decisions []json.RawMessage) bool {
	for _, d := range decisions {
		var s string
		if json.Unmarshal(d, &s) == nil && s == optAcceptForSession {
			return true
		}
	}
	return false
}

// commandText reads a command given as a string or an argv.
func commandText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var argv []string
	if json.Unmarshal(raw, &argv) == nil {
		return strings.Join(argv, " ")
	}
	return ""
}

// approvalResult is the reply to an approval request for the answer. A
// session-wide grant is sent only when the client picked it by id (and it
// was offered).
func approvalResult(method string, params json.RawMessage, ans agent.PermissionAnswer) any {
	allow := ans.Decision == event.DecisionAllow
	switch method {
	case "execCommandApproval", "applyPatchApproval":
		if allow {
			return map[string]string{"decision": "approved"}
		}
		return map[string]string{"decision": "denied"}
	case "item/permissions/requestApproval":
		var p approvalParams
		_ = json.Unmarshal(params, &p)
		if allow && len(p.Permissions) > 0 {
			return map[string]any{"permissions": p.Permissions, "scope": "turn"}
		}
		return map[string]any{"permissions": map[string]any{}, "scope": "turn"}
	case "mcpServer/elicitation/request":
		if allow {
			return map[string]any{"action": "accept", "content": map[string]any{}}
		}
		return map[string]any{"action": "decline"}
	}
	if !allow {
		return map[string]string{"decision": optDecline}
	}
	if ans.OptionID == optAcceptForSession {
		var p approvalParams
		_ = json.Unmarshal(params, &p)
		if offersSessionGrant(p.AvailableDecisions) {
			return map[string]string{"decision": optAcceptForSession}
		}
	}
	return map[string]string{"decision": optAccept}
}

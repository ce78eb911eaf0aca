package claude

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

// Approvals: the CLI asks with a can_use_tool control request (because it
// runs with --permission-prompt-tool stdio) and waits for a
// control_response. The functions here build the universal request from
// the CLI's and the CLI's answer from the universal decision; they do no
// I/O.

// Permission option ids offered to clients.
const (
	optAllow       = "allow"
	optAllowAlways = "allow_always"
	optDeny        = "deny"
)

// readFileFunc reads a file the CLI wants to change, for the diff shown in
// a permission request; ok is false when it does not exist or cannot be
// read.
type readFileFunc func(path string) (content string, ok bool)

// permissionRequest builds the universal request for a can_use_tool
// request. itemID is the tool call's item (may be empty); cwd makes paths
// relative; read (may be nil) lets a Write's diff show the file's current
// content.
func permissionRequest(req *canUseTool, itemID, cwd string, read readFileFunc) agent.PermissionRequest {
	name := orDefault(req.ToolName, "tool")
	m := &Mapper{cwd: cwd}
	in := decodeInput(req.Input)
	pr := agent.PermissionRequest{
		Kind: event.PermTool, Tool: name, ItemID: itemID, Input: req.Input,
		Title: orDefault(req.DisplayName, name), Detail: req.Description,
	}
	switch toolKind(name) {
	case event.ItemCommand:
		pr.Kind = event.PermCommand
		if in.Command != "" {
			pr.Title = name + ": " + firstLine(in.Command)
		}
		if in.Description != "" {
			pr.Detail = in.Description
		}
	case event.ItemFileChange:
		pr.Kind = event.PermFileWrite
		path := in.FilePath
		if name == "NotebookEdit" {
			path = in.NotebookPath
		}
		if path != "" {
			rel := m.rel(path)
			pr.Title = name + ": " + rel
			switch name {
			case "Write":
				old, exists := "", false
				if read != nil {
					old, exists = read(path)
				}
				if exists {
					pr.Detail = replaceDiff(rel, [][2]string{{old, in.Content}}, &old)
				} else {
					pr.Detail = newFileDiff(rel, in.Content)
				}
			case "Edit":
				var orig *string
				if read != nil {
					if s, ok := read(path); ok {
						orig = &s
					}
				}
				pr.Detail = replaceDiff(rel, [][2]string{{in.OldString, in.NewString}}, orig)
			}
		}
	default:
		if req.Description != "" && req.Description != name {
			pr.Title = orDefault(req.DisplayName, name) + ": " + firstLine(req.Description)
		}
	}
	if req.BlockedPath != "" && pr.Kind != event.PermFileWrite {
		pr.Detail = strings.TrimSpace(pr.Detail + "\n(writes " + m.rel(req.BlockedPath) + ")")
	}
	pr.Options = []event.PermissionOption{{ID: optAllow, Kind: event.OptionAllowOnce, Label: "Allow once"}}
	if req.hasSuggestions() {
		pr.Options = append(pr.Options, event.PermissionOption{ID: optAllowAlways, Kind: event.OptionAllowAlways, Label: "Allow and remember (as the CLI suggests)"})
	}
	pr.Options = append(pr.Options, event.PermissionOption{ID: optDeny, Kind: event.OptionDenyOnce, Label: "Deny"})
	return pr
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return agent.Clip(s, 200)
}

// permissionAnswer builds the CLI's answer to a can_use_tool request. The
// CLI's suggested rules are passed on only when the client picked the
// allow_always option by name.
func permissionAnswer(req *canUseTool, ans agent.PermissionAnswer) permissionResult {
	if ans.Decision == event.DecisionAllow {
		r := permissionResult{Behavior: "allow", UpdatedInput: req.Input}
		if len(r.UpdatedInput) == 0 {
			r.UpdatedInput = json.RawMessage(`{}`)
		}
		if ans.OptionID == optAllowAlways && req.hasSuggestions() {
			r.UpdatedPermissions = req.PermissionSuggestions
		}
		return r
	}
	msg := ans.Message
	if msg == "" {
		switch ans.By {
		case event.ByTimeout:
			msg = "The permission request timed out"
		case event.ByDaemon:
			msg = "The request was cancelled"
		case event.ByPolicy:
			msg = "Denied by policy"
		default:
			msg = "Denied by the user"
		}
	}
	return permissionResult{Behavior: "deny", Message: msg}
}

// Questions: the AskUserQuestion tool comes as a can_use_tool request; the
// answers go back in updatedInput.answers, keyed by question text.

type askInput struct {
	Questions []struct {
		Question    string `json:"question"`
		Header      string `json:"header"`
		MultiSelect bool   `json:"multiSelect"`
		Options     []struct {
			Label       string `json:"label"`
			Description string `json:"description"`
		} `json:"options"`
	} `json:"questions"`
}

// questions builds one universal question per question of the input.
func questions(input json.RawMessage, itemID string) ([]agent.Question, error) {
	var in askInput
	if err := json.Unmarshal(input, &in); err != nil {
		return nil, fmt.Errorf("AskUserQuestion input: %w", err)
	}
	if len(in.Questions) == 0 {
		return nil, fmt.Errorf("AskUserQuestion without questions")
	}
	var qs []agent.Question
	for _, q := range in.Questions {
		prompt := q.Question
		if q.Header != "" {
			prompt = q.Header + ": " + prompt
		}
		if q.MultiSelect {
			prompt += " (several answers allowed: separate them with commas)"
		}
		aq := agent.Question{Prompt: prompt, FreeText: true, ItemID: itemID}
		for i, o := range q.Options {
			label := o.Label
			if o.Description != "" {
				label += " — " + o.Description
			}
			aq.Options = append(aq.Options, event.QuestionOption{ID: strconv.Itoa(i + 1), Label: label})
		}
		qs = append(qs, aq)
	}
	return qs, nil
}

// questionAnswer builds the CLI's answer from the users' answers (one per
// question, in order). A question left unanswered denies the tool.
func questionAnswer(input json.RawMessage, answers []agent.Answer) permissionResult {
	var in askInput
	_ = json.Unmarshal(input, &in)
	obj := map[string]json.RawMessage{}
	_ = json.Unmarshal(input, &obj)
	got := map[string]string{}
	for i, q := range in.Questions {
		if i >= len(answers) || answers[i].Cancelled {
			return permissionResult{Behavior: "deny", Message: "The user did not answer the question"}
		}
		a := answers[i]
		text := a.Text
		if n, err := strconv.Atoi(a.OptionID); err == nil && n >= 1 && n <= len(q.Options) {
			text = q.Options[n-1].Label
		}
		got[q.Question] = text
	}
	obj["answers"], _ = json.Marshal(got)
	b, _ := json.Marshal(obj)
	return permissionResult{Behavior: "allow", UpdatedInput: b}
}

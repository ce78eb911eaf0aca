package acpwire_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/agentbox/agentbox/internal/acpwire"
)

// wirePair is one message built twice from the same values: with
// acpwire's types and with the reference SDK's (a test-only dependency).
type wirePair struct {
	name string
	ours any
	sdk  any
}

func ptr[T any](v T) *T { return &v }

// wirePairs covers every message agentbox sends or reads, each field it
// uses set at least once, and the omitempty cases (zero values, nil
// versus empty lists).
func wirePairs() []wirePair {
	meta := map[string]any{"claudeCode": map[string]any{"toolName": "Bash", "n": 1.5}, "a": []any{"x", 2.0}}
	rawIn := json.RawMessage(`{"z":1,"command":["/bin/bash","-lc","ls <a> & b"],"cwd":"/w"}`)
	oursContent := []acpwire.ToolCallContent{
		acpwire.ToolContent(acpwire.TextBlock("out")),
		acpwire.ToolDiffContent("/w/new.txt", "new\n"),
		acpwire.ToolDiffContent("/w/a.txt", "b\n", "a\n"),
	}
	sdkContent := []sdk.ToolCallContent{
		sdk.ToolContent(sdk.TextBlock("out")),
		sdk.ToolDiffContent("/w/new.txt", "new\n"),
		sdk.ToolDiffContent("/w/a.txt", "b\n", "a\n"),
	}
	oursLocs := []acpwire.ToolCallLocation{{Path: "/w/a.txt", Line: ptr(3)}, {Path: "/w/b.txt"}}
	sdkLocs := []sdk.ToolCallLocation{{Path: "/w/a.txt", Line: ptr(3)}, {Path: "/w/b.txt"}}
	mime := "text/plain"
	uri := "file:///w/img.png"

	oursBlocks := []acpwire.ContentBlock{
		acpwire.TextBlock("hello <world> & \u2028"),
		acpwire.ImageBlock("aGk=", "image/png"),
		{Image: &acpwire.ContentBlockImage{Data: "aGk=", MimeType: "image/png", Uri: &uri}},
		acpwire.ResourceLinkBlock("notes.txt", "file:///w/notes.txt"),
		acpwire.ResourceBlock(acpwire.EmbeddedResourceResource{TextResourceContents: &acpwire.TextResourceContents{Text: "t", Uri: "file:///w/t", MimeType: &mime}}),
		acpwire.ResourceBlock(acpwire.EmbeddedResourceResource{TextResourceContents: &acpwire.TextResourceContents{Text: "t", Uri: "file:///w/t"}}),
		acpwire.ResourceBlock(acpwire.EmbeddedResourceResource{BlobResourceContents: &acpwire.BlobResourceContents{Blob: "AAE=", Uri: "attachment:x", MimeType: &mime}}),
	}
	sdkImage := sdk.ImageBlock("aGk=", "image/png")
	sdkImage.Image.Uri = &uri
	sdkBlocks := []sdk.ContentBlock{
		sdk.TextBlock("hello <world> & \u2028"),
		sdk.ImageBlock("aGk=", "image/png"),
		sdkImage,
		sdk.ResourceLinkBlock("notes.txt", "file:///w/notes.txt"),
		sdk.ResourceBlock(sdk.EmbeddedResourceResource{TextResourceContents: &sdk.TextResourceContents{Text: "t", Uri: "file:///w/t", MimeType: &mime}}),
		sdk.ResourceBlock(sdk.EmbeddedResourceResource{TextResourceContents: &sdk.TextResourceContents{Text: "t", Uri: "file:///w/t"}}),
		sdk.ResourceBlock(sdk.EmbeddedResourceResource{BlobResourceContents: &sdk.BlobResourceContents{Blob: "AAE=", Uri: "attachment:x", MimeType: &mime}}),
	}

	oursMCP := []acpwire.McpServer{
		{Stdio: &acpwire.McpServerStdio{Name: "fs", Command: "/bin/mcp", Args: []string{"-v"}, Env: []acpwire.EnvVariable{{Name: "K", Value: "v"}}}},
		{Stdio: &acpwire.McpServerStdio{Name: "e", Command: "/bin/e", Args: []string{}, Env: []acpwire.EnvVariable{}}},
		{Http: &acpwire.McpServerHttpInline{Type: "http", Name: "h", Url: "http://127.0.0.1:1/mcp", Headers: []acpwire.HttpHeader{{Name: "Authorization", Value: "Bearer x"}}}},
		{Sse: &acpwire.McpServerSseInline{Type: "sse", Name: "s", Url: "http://127.0.0.1:1/sse", Headers: []acpwire.HttpHeader{}}},
	}
	sdkMCP := []sdk.McpServer{
		{Stdio: &sdk.McpServerStdio{Name: "fs", Command: "/bin/mcp", Args: []string{"-v"}, Env: []sdk.EnvVariable{{Name: "K", Value: "v"}}}},
		{Stdio: &sdk.McpServerStdio{Name: "e", Command: "/bin/e", Args: []string{}, Env: []sdk.EnvVariable{}}},
		{Http: &sdk.McpServerHttpInline{Type: "http", Name: "h", Url: "http://127.0.0.1:1/mcp", Headers: []sdk.HttpHeader{{Name: "Authorization", Value: "Bearer x"}}}},
		{Sse: &sdk.McpServerSseInline{Type: "sse", Name: "s", Url: "http://127.0.0.1:1/sse", Headers: []sdk.HttpHeader{}}},
	}

	modelCat, modeCat := acpwire.SessionConfigOptionCategoryModel, acpwire.SessionConfigOptionCategoryMode
	sModelCat, sModeCat := sdk.SessionConfigOptionCategoryModel, sdk.SessionConfigOptionCategoryMode
	desc := "fast"
	oursFlat := []acpwire.SessionConfigSelectOption{{Name: "GPT", Value: "gpt", Description: &desc}, {Name: "o", Value: "o"}}
	sdkFlat := sdk.SessionConfigSelectOptionsUngrouped{{Name: "GPT", Value: "gpt", Description: &desc}, {Name: "o", Value: "o"}}
	oursGroups := []acpwire.SessionConfigSelectGroup{{Group: "g", Name: "G", Options: []acpwire.SessionConfigSelectOption{{Name: "Plan", Value: "plan"}}}}
	sdkGroups := sdk.SessionConfigSelectOptionsGrouped{{Group: "g", Name: "G", Options: []sdk.SessionConfigSelectOption{{Name: "Plan", Value: "plan"}}}}
	oursOptions := []acpwire.SessionConfigOption{
		{Select: &acpwire.SessionConfigOptionSelect{Category: &modelCat, CurrentValue: "gpt", Id: "model", Name: "Model", Type: "select", Options: acpwire.SessionConfigSelectOptions{Ungrouped: &oursFlat}}},
		{Select: &acpwire.SessionConfigOptionSelect{Category: &modeCat, CurrentValue: "plan", Id: "mode", Name: "Mode", Description: &desc, Options: acpwire.SessionConfigSelectOptions{Grouped: &oursGroups}}},
	}
	sdkOptions := []sdk.SessionConfigOption{
		{Select: &sdk.SessionConfigOptionSelect{Category: &sModelCat, CurrentValue: "gpt", Id: "model", Name: "Model", Type: "select", Options: sdk.SessionConfigSelectOptions{Ungrouped: &sdkFlat}}},
		{Select: &sdk.SessionConfigOptionSelect{Category: &sModeCat, CurrentValue: "plan", Id: "mode", Name: "Mode", Description: &desc, Options: sdk.SessionConfigSelectOptions{Grouped: &sdkGroups}}},
	}
	oursModels := &acpwire.SessionModelState{CurrentModelId: "m1", AvailableModels: []acpwire.ModelInfo{{ModelId: "m1", Name: "M1", Description: &desc}, {ModelId: "m2", Name: "M2"}}}
	sdkModels := &sdk.SessionModelState{CurrentModelId: "m1", AvailableModels: []sdk.ModelInfo{{ModelId: "m1", Name: "M1", Description: &desc}, {ModelId: "m2", Name: "M2"}}}
	oursModes := &acpwire.SessionModeState{CurrentModeId: "ask", AvailableModes: []acpwire.SessionMode{{Id: "ask", Name: "Ask", Description: &desc}, {Id: "code", Name: "Code"}}}
	sdkModes := &sdk.SessionModeState{CurrentModeId: "ask", AvailableModes: []sdk.SessionMode{{Id: "ask", Name: "Ask", Description: &desc}, {Id: "code", Name: "Code"}}}

	kind, status, title := acpwire.ToolKindExecute, acpwire.ToolCallStatusPending, "Run `ls`"
	sKind, sStatus := sdk.ToolKindExecute, sdk.ToolCallStatusPending
	rawOut := map[string]any{"status": "completed", "exit_code": 2, "big": 12345678901234567890.0}
	code, sig := 3, "SIGKILL"

	return []wirePair{
		{"initialize request (client)", acpwire.InitializeRequest{ProtocolVersion: acpwire.ProtocolVersionNumber,
			ClientCapabilities: acpwire.ClientCapabilities{Fs: acpwire.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: true}, Terminal: true},
			ClientInfo:         &acpwire.Implementation{Name: "agentbox", Version: "v1"}},
			sdk.InitializeRequest{ProtocolVersion: sdk.ProtocolVersionNumber,
				ClientCapabilities: sdk.ClientCapabilities{Fs: sdk.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: true}, Terminal: true},
				ClientInfo:         &sdk.Implementation{Name: "agentbox", Version: "v1"}}},
		{"initialize request (bare)", acpwire.InitializeRequest{ProtocolVersion: 1}, sdk.InitializeRequest{ProtocolVersion: 1}},
		{"initialize response (server)", acpwire.InitializeResponse{ProtocolVersion: 1,
			AgentCapabilities: acpwire.AgentCapabilities{LoadSession: true, PromptCapabilities: acpwire.PromptCapabilities{Image: true, EmbeddedContext: true}},
			AgentInfo:         &acpwire.Implementation{Name: "agentbox", Title: ptr("agentbox (mock)"), Version: "v1"}, AuthMethods: []json.RawMessage{}},
			sdk.InitializeResponse{ProtocolVersion: 1,
				AgentCapabilities: sdk.AgentCapabilities{LoadSession: true, PromptCapabilities: sdk.PromptCapabilities{Image: true, EmbeddedContext: true}},
				AgentInfo:         &sdk.Implementation{Name: "agentbox", Title: ptr("agentbox (mock)"), Version: "v1"}, AuthMethods: []sdk.AuthMethod{}}},
		{"initialize response (mcp, no auth methods)", acpwire.InitializeResponse{ProtocolVersion: 1,
			AgentCapabilities: acpwire.AgentCapabilities{McpCapabilities: acpwire.McpCapabilities{Http: true, Sse: true}}},
			sdk.InitializeResponse{ProtocolVersion: 1,
				AgentCapabilities: sdk.AgentCapabilities{McpCapabilities: sdk.McpCapabilities{Http: true, Sse: true}}}},
		{"authenticate", acpwire.AuthenticateRequest{MethodId: "key"}, sdk.AuthenticateRequest{MethodId: "key"}},
		{"authenticate response", acpwire.AuthenticateResponse{}, sdk.AuthenticateResponse{}},
		{"session/new", acpwire.NewSessionRequest{Cwd: "/w", McpServers: oursMCP, Meta: meta},
			sdk.NewSessionRequest{Cwd: "/w", McpServers: sdkMCP, Meta: meta}},
		{"session/new (no servers)", acpwire.NewSessionRequest{Cwd: "/w", McpServers: []acpwire.McpServer{}},
			sdk.NewSessionRequest{Cwd: "/w", McpServers: []sdk.McpServer{}}},
		{"session/load", acpwire.LoadSessionRequest{Cwd: "/w", SessionId: "s1", McpServers: oursMCP[:1], Meta: meta},
			sdk.LoadSessionRequest{Cwd: "/w", SessionId: "s1", McpServers: sdkMCP[:1], Meta: meta}},
		{"session/new response", acpwire.NewSessionResponse{SessionId: "s1", ConfigOptions: oursOptions, Models: oursModels, Modes: oursModes},
			sdk.NewSessionResponse{SessionId: "s1", ConfigOptions: sdkOptions, Models: sdkModels, Modes: sdkModes}},
		{"session/new response (bare)", acpwire.NewSessionResponse{SessionId: "s1"}, sdk.NewSessionResponse{SessionId: "s1"}},
		{"session/load response", acpwire.LoadSessionResponse{Modes: oursModes}, sdk.LoadSessionResponse{Modes: sdkModes}},
		{"session/load response (bare)", acpwire.LoadSessionResponse{}, sdk.LoadSessionResponse{}},
		{"session/set_mode", acpwire.SetSessionModeRequest{SessionId: "s1", ModeId: "code"}, sdk.SetSessionModeRequest{SessionId: "s1", ModeId: "code"}},
		{"session/close", acpwire.CloseSessionRequest{SessionId: "s1"}, sdk.CloseSessionRequest{SessionId: "s1"}},
		{"session/close response", acpwire.CloseSessionResponse{}, sdk.CloseSessionResponse{}},
		{"session/prompt", acpwire.PromptRequest{SessionId: "s1", Prompt: oursBlocks}, sdk.PromptRequest{SessionId: "s1", Prompt: sdkBlocks}},
		{"session/prompt response", acpwire.PromptResponse{StopReason: acpwire.StopReasonEndTurn,
			Usage: &acpwire.Usage{InputTokens: 10, OutputTokens: 5, TotalTokens: 20, CachedReadTokens: ptr(4), CachedWriteTokens: ptr(1)},
			Meta:  map[string]any{"quota": map[string]any{"token_count": map[string]any{"input_tokens": 3.0}}}},
			sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn,
				Usage: &sdk.Usage{InputTokens: 10, OutputTokens: 5, TotalTokens: 20, CachedReadTokens: ptr(4), CachedWriteTokens: ptr(1)},
				Meta:  map[string]any{"quota": map[string]any{"token_count": map[string]any{"input_tokens": 3.0}}}}},
		{"session/prompt response (cancelled)", acpwire.PromptResponse{StopReason: acpwire.StopReasonCancelled}, sdk.PromptResponse{StopReason: sdk.StopReasonCancelled}},
		{"session/cancel", acpwire.CancelNotification{SessionId: "s1"}, sdk.CancelNotification{SessionId: "s1"}},
		{"update user_message_chunk", acpwire.SessionNotification{SessionId: "s1", Update: acpwire.UpdateUserMessageText("hi")},
			sdk.SessionNotification{SessionId: "s1", Update: sdk.UpdateUserMessageText("hi")}},
		{"update agent_message_chunk", acpwire.SessionNotification{SessionId: "s1", Update: acpwire.UpdateAgentMessageText("\n\n[agentbox] error: <x>\n")},
			sdk.SessionNotification{SessionId: "s1", Update: sdk.UpdateAgentMessageText("\n\n[agentbox] error: <x>\n")}},
		{"update agent_message_chunk (message id)", acpwire.SessionNotification{SessionId: "s1", Update: acpwire.SessionUpdate{AgentMessageChunk: &acpwire.SessionUpdateChunk{Content: acpwire.TextBlock("a"), MessageId: ptr("m1")}}},
			sdk.SessionNotification{SessionId: "s1", Update: sdk.SessionUpdate{AgentMessageChunk: &sdk.SessionUpdateAgentMessageChunk{Content: sdk.TextBlock("a"), MessageId: ptr("m1")}}}},
		{"update agent_thought_chunk", acpwire.SessionNotification{SessionId: "s1", Update: acpwire.UpdateAgentThoughtText("hmm")},
			sdk.SessionNotification{SessionId: "s1", Update: sdk.UpdateAgentThoughtText("hmm")}},
		{"update tool_call", acpwire.SessionNotification{SessionId: "s1", Update: acpwire.SessionUpdate{ToolCall: &acpwire.SessionUpdateToolCall{
			ToolCallId: "t1", Title: "Run ls", Kind: acpwire.ToolKindExecute, Status: acpwire.ToolCallStatusInProgress,
			Locations: oursLocs, RawInput: rawIn, RawOutput: rawOut, Content: oursContent, Meta: meta}}},
			sdk.SessionNotification{SessionId: "s1", Update: sdk.SessionUpdate{ToolCall: &sdk.SessionUpdateToolCall{
				ToolCallId: "t1", Title: "Run ls", Kind: sdk.ToolKindExecute, Status: sdk.ToolCallStatusInProgress,
				Locations: sdkLocs, RawInput: rawIn, RawOutput: rawOut, Content: sdkContent, Meta: meta}}}},
		{"update tool_call (pending, bare)", acpwire.SessionNotification{SessionId: "s1", Update: acpwire.SessionUpdate{ToolCall: &acpwire.SessionUpdateToolCall{
			ToolCallId: "p1", Title: "Allow?", Status: acpwire.ToolCallStatusPending}}},
			sdk.SessionNotification{SessionId: "s1", Update: sdk.StartToolCall("p1", "Allow?", sdk.WithStartStatus(sdk.ToolCallStatusPending))}},
		{"update tool_call_update", acpwire.SessionNotification{SessionId: "s1", Update: acpwire.SessionUpdate{ToolCallUpdate: &acpwire.SessionToolCallUpdate{
			ToolCallId: "t1", Status: ptr(acpwire.ToolCallStatusCompleted), Content: oursContent, Locations: oursLocs, RawOutput: rawOut,
			Kind: &kind, Title: &title, RawInput: map[string]any{"command": "ls"}, Meta: meta}}},
			sdk.SessionNotification{SessionId: "s1", Update: sdk.UpdateToolCall("t1", sdk.WithUpdateStatus(sdk.ToolCallStatusCompleted),
				sdk.WithUpdateContent(sdkContent), sdk.WithUpdateLocations(sdkLocs), sdk.WithUpdateRawOutput(rawOut),
				sdk.WithUpdateKind(sKind), sdk.WithUpdateTitle(title), sdk.WithUpdateRawInput(map[string]any{"command": "ls"}),
				func(u *sdk.SessionToolCallUpdate) { u.Meta = meta })}},
		{"update tool_call_update (in progress)", acpwire.SessionNotification{SessionId: "s1", Update: acpwire.SessionUpdate{ToolCallUpdate: &acpwire.SessionToolCallUpdate{
			ToolCallId: "t1", Status: ptr(acpwire.ToolCallStatusInProgress), Content: []acpwire.ToolCallContent{acpwire.ToolContent(acpwire.TextBlock("so far"))}}}},
			sdk.SessionNotification{SessionId: "s1", Update: sdk.UpdateToolCall("t1", sdk.WithUpdateStatus(sdk.ToolCallStatusInProgress),
				sdk.WithUpdateContent([]sdk.ToolCallContent{sdk.ToolContent(sdk.TextBlock("so far"))}))}},
		{"update plan", acpwire.SessionNotification{SessionId: "s1", Update: acpwire.UpdatePlan(
			acpwire.PlanEntry{Content: "a", Status: acpwire.PlanEntryStatusCompleted, Priority: acpwire.PlanEntryPriorityHigh},
			acpwire.PlanEntry{Content: "b", Status: acpwire.PlanEntryStatusInProgress, Priority: acpwire.PlanEntryPriorityMedium},
			acpwire.PlanEntry{Content: "c", Status: acpwire.PlanEntryStatusPending, Priority: acpwire.PlanEntryPriorityLow})},
			sdk.SessionNotification{SessionId: "s1", Update: sdk.UpdatePlan(
				sdk.PlanEntry{Content: "a", Status: sdk.PlanEntryStatusCompleted, Priority: sdk.PlanEntryPriorityHigh},
				sdk.PlanEntry{Content: "b", Status: sdk.PlanEntryStatusInProgress, Priority: sdk.PlanEntryPriorityMedium},
				sdk.PlanEntry{Content: "c", Status: sdk.PlanEntryStatusPending, Priority: sdk.PlanEntryPriorityLow})}},
		{"update plan (empty)", acpwire.SessionNotification{SessionId: "s1", Update: acpwire.UpdatePlan()},
			sdk.SessionNotification{SessionId: "s1", Update: sdk.UpdatePlan()}},
		{"usage_update", acpwire.SessionUsageUpdate{SessionUpdate: "usage_update", Size: 100, Used: 7, Cost: &acpwire.Cost{Amount: 0.25, Currency: "USD"}},
			sdk.SessionUsageUpdate{SessionUpdate: "usage_update", Size: 100, Used: 7, Cost: &sdk.Cost{Amount: 0.25, Currency: "USD"}}},
		{"session/request_permission", acpwire.RequestPermissionRequest{SessionId: "s1",
			Options: []acpwire.PermissionOption{{OptionId: "a", Kind: acpwire.PermissionOptionKindAllowOnce, Name: "Allow"},
				{OptionId: "aa", Kind: acpwire.PermissionOptionKindAllowAlways, Name: "Always"},
				{OptionId: "r", Kind: acpwire.PermissionOptionKindRejectOnce, Name: "Deny"},
				{OptionId: "rr", Kind: acpwire.PermissionOptionKindRejectAlways, Name: "Never"}},
			ToolCall: acpwire.ToolCallUpdate{ToolCallId: "t1", Title: &title, Kind: &kind, Status: &status, RawInput: rawIn,
				Content: oursContent, Locations: oursLocs, RawOutput: rawOut, Meta: meta}},
			sdk.RequestPermissionRequest{SessionId: "s1",
				Options: []sdk.PermissionOption{{OptionId: "a", Kind: sdk.PermissionOptionKindAllowOnce, Name: "Allow"},
					{OptionId: "aa", Kind: sdk.PermissionOptionKindAllowAlways, Name: "Always"},
					{OptionId: "r", Kind: sdk.PermissionOptionKindRejectOnce, Name: "Deny"},
					{OptionId: "rr", Kind: sdk.PermissionOptionKindRejectAlways, Name: "Never"}},
				ToolCall: sdk.ToolCallUpdate{ToolCallId: "t1", Title: &title, Kind: &sKind, Status: &sStatus, RawInput: rawIn,
					Content: sdkContent, Locations: sdkLocs, RawOutput: rawOut, Meta: meta}}},
		{"permission selected", acpwire.RequestPermissionResponse{Outcome: acpwire.Selected("a")},
			sdk.RequestPermissionResponse{Outcome: sdk.NewRequestPermissionOutcomeSelected("a")}},
		{"permission cancelled", acpwire.RequestPermissionResponse{Outcome: acpwire.Cancelled()},
			sdk.RequestPermissionResponse{Outcome: sdk.RequestPermissionOutcome{Cancelled: &sdk.RequestPermissionOutcomeCancelled{Outcome: "cancelled"}}}},
		{"fs/read_text_file", acpwire.ReadTextFileRequest{SessionId: "s1", Path: "/w/a", Line: ptr(2), Limit: ptr(5)},
			sdk.ReadTextFileRequest{SessionId: "s1", Path: "/w/a", Line: ptr(2), Limit: ptr(5)}},
		{"fs/read_text_file (whole)", acpwire.ReadTextFileRequest{SessionId: "s1", Path: "/w/a"}, sdk.ReadTextFileRequest{SessionId: "s1", Path: "/w/a"}},
		{"fs/read_text_file response", acpwire.ReadTextFileResponse{Content: "x\n"}, sdk.ReadTextFileResponse{Content: "x\n"}},
		{"fs/write_text_file", acpwire.WriteTextFileRequest{SessionId: "s1", Path: "/w/a", Content: ""}, sdk.WriteTextFileRequest{SessionId: "s1", Path: "/w/a", Content: ""}},
		{"fs/write_text_file response", acpwire.WriteTextFileResponse{}, sdk.WriteTextFileResponse{}},
		{"terminal/create", acpwire.CreateTerminalRequest{SessionId: "s1", Command: "ls", Args: []string{"-la"}, Cwd: ptr("/w"),
			Env: []acpwire.EnvVariable{{Name: "A", Value: "1"}}, OutputByteLimit: ptr(100)},
			sdk.CreateTerminalRequest{SessionId: "s1", Command: "ls", Args: []string{"-la"}, Cwd: ptr("/w"),
				Env: []sdk.EnvVariable{{Name: "A", Value: "1"}}, OutputByteLimit: ptr(100)}},
		{"terminal/create (bare)", acpwire.CreateTerminalRequest{SessionId: "s1", Command: "ls"}, sdk.CreateTerminalRequest{SessionId: "s1", Command: "ls"}},
		{"terminal/create response", acpwire.CreateTerminalResponse{TerminalId: "term_1"}, sdk.CreateTerminalResponse{TerminalId: "term_1"}},
		{"terminal/output", acpwire.TerminalOutputRequest{SessionId: "s1", TerminalId: "term_1"}, sdk.TerminalOutputRequest{SessionId: "s1", TerminalId: "term_1"}},
		{"terminal/output response (running)", acpwire.TerminalOutputResponse{Output: "o"}, sdk.TerminalOutputResponse{Output: "o"}},
		{"terminal/output response (exited)", acpwire.TerminalOutputResponse{Output: "o", Truncated: true, ExitStatus: &acpwire.TerminalExitStatus{ExitCode: &code}},
			sdk.TerminalOutputResponse{Output: "o", Truncated: true, ExitStatus: &sdk.TerminalExitStatus{ExitCode: &code}}},
		{"terminal/wait_for_exit", acpwire.WaitForTerminalExitRequest{SessionId: "s1", TerminalId: "term_1"}, sdk.WaitForTerminalExitRequest{SessionId: "s1", TerminalId: "term_1"}},
		{"terminal/wait_for_exit response", acpwire.WaitForTerminalExitResponse{Signal: &sig}, sdk.WaitForTerminalExitResponse{Signal: &sig}},
		{"terminal/kill", acpwire.KillTerminalRequest{SessionId: "s1", TerminalId: "term_1"}, sdk.KillTerminalRequest{SessionId: "s1", TerminalId: "term_1"}},
		{"terminal/kill response", acpwire.KillTerminalResponse{}, sdk.KillTerminalResponse{}},
		{"terminal/release", acpwire.ReleaseTerminalRequest{SessionId: "s1", TerminalId: "term_1"}, sdk.ReleaseTerminalRequest{SessionId: "s1", TerminalId: "term_1"}},
		{"terminal/release response", acpwire.ReleaseTerminalResponse{}, sdk.ReleaseTerminalResponse{}},
		{"error", acpwire.NewInvalidParams(map[string]any{"error": "cwd is required"}), sdk.NewInvalidParams(map[string]any{"error": "cwd is required"})},
		{"error method not found", acpwire.NewMethodNotFound("x/y"), sdk.NewMethodNotFound("x/y")},
		{"error internal", acpwire.NewInternalError(map[string]any{"error": "e"}), sdk.NewInternalError(map[string]any{"error": "e"})},
		{"error cancelled", acpwire.NewRequestCancelled(nil), sdk.NewRequestCancelled(nil)},
		{"error invalid request", acpwire.NewInvalidRequest(map[string]any{"error": "busy"}), sdk.NewInvalidRequest(map[string]any{"error": "busy"})},
	}
}

// TestWireCompatible proves that acpwire writes every message agentbox
// uses byte for byte as the reference SDK does, and that each side reads
// what the other wrote back to the same bytes.
func TestWireCompatible(t *testing.T) {
	for _, p := range wirePairs() {
		t.Run(p.name, func(t *testing.T) {
			ours, err := json.Marshal(p.ours)
			if err != nil {
				t.Fatalf("acpwire: %v", err)
			}
			ref, err := json.Marshal(p.sdk)
			if err != nil {
				t.Fatalf("sdk: %v", err)
			}
			if !bytes.Equal(ours, ref) {
				t.Fatalf("the bytes differ\nacpwire: %s\nsdk:     %s", ours, ref)
			}
			// Each side reads the other's bytes and writes them again as
			// the writer itself does after reading them (values of type
			// any, such as rawInput, come back with sorted keys on both).
			for _, rt := range []struct {
				what       string
				reader     any
				readerSide any
			}{{"acpwire reads the sdk's bytes", p.ours, p.sdk}, {"the sdk reads acpwire's bytes", p.sdk, p.ours}} {
				got, err := roundTrip(ref, rt.reader)
				if err != nil {
					t.Fatalf("%s: %s: %v", rt.what, ref, err)
				}
				want, err := roundTrip(ref, rt.readerSide)
				if err != nil {
					t.Fatalf("%s: %v", rt.what, err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%s and writes them again\ngot:  %s\nwant: %s", rt.what, got, want)
				}
			}
		})
	}
}

// roundTrip decodes b into a new value of like's type and encodes it.
func roundTrip(b []byte, like any) ([]byte, error) {
	v := reflect.New(reflect.TypeOf(like))
	if err := json.Unmarshal(b, v.Interface()); err != nil {
		return nil, err
	}
	return json.Marshal(v.Elem().Interface())
}

// TestErrorText: a JSON-RPC error reads as the SDK's did (agentbox puts
// it in messages users see).
func TestErrorText(t *testing.T) {
	for _, p := range wirePairs() {
		o, ok := p.ours.(*acpwire.RequestError)
		if !ok {
			continue
		}
		if got, want := o.Error(), p.sdk.(*sdk.RequestError).Error(); got != want {
			t.Errorf("%s: %q, sdk %q", p.name, got, want)
		}
	}
}

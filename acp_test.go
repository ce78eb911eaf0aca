package agentbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/internal/acpserver"
)

// TestACPEndpoint drives the daemon's own GET /v1/acp with the ACP SDK's
// client side, behind the daemon's bearer token, through a prompt of the
// mock agent.
func TestACPEndpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// The editor's folder is in a workspace root of the global policy.
	root := t.TempDir()
	srv, err := agentbox.Start(ctx, agentbox.Options{DataDir: t.TempDir(), Token: "s3cret", GlobalPolicy: globalPolicy(t, root)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	if _, err := acpserver.Dial(ctx, srv.URL()+"/v1/acp?agent=mock", "wrong"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("dial with a wrong token: %v, want a 401", err)
	}
	conn, err := acpserver.Dial(ctx, srv.URL()+"/v1/acp?agent=mock", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := acp.NewClientSideConnection(&acpEditor{}, conn, conn)
	if _, err := c.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	ns, err := c.NewSession(ctx, acp.NewSessionRequest{Cwd: root, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatalf("session/new: %v", err)
	}
	resp, err := c.Prompt(ctx, acp.PromptRequest{SessionId: ns.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock("hello")}})
	if err != nil {
		t.Fatalf("prompt: %v", err)
	}
	if resp.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("stop reason %q, want end_turn", resp.StopReason)
	}
	// The session is an ordinary agentbox session: its log is in the store.
	evs, err := srv.Client().Events(ctx, string(ns.SessionId), 0, 0)
	if err != nil || len(evs.Events) == 0 {
		t.Fatalf("events of the ACP session: %d, %v", len(evs.Events), err)
	}
}

// acpEditor is the editor side: it allows nothing and ignores updates.
type acpEditor struct{}

func (acpEditor) SessionUpdate(context.Context, acp.SessionNotification) error { return nil }
func (acpEditor) RequestPermission(context.Context, acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Cancelled: &acp.RequestPermissionOutcomeCancelled{}}}, nil
}
func (acpEditor) ReadTextFile(context.Context, acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return acp.ReadTextFileResponse{}, nil
}
func (acpEditor) WriteTextFile(context.Context, acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return acp.WriteTextFileResponse{}, nil
}
func (acpEditor) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, nil
}
func (acpEditor) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, nil
}
func (acpEditor) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, nil
}
func (acpEditor) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, nil
}
func (acpEditor) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, nil
}

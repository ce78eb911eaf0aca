package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
)

// TestCustomACPAgent adds an ACP agent through --agents-file and drives it
// through the API. The agent is this very binary's `agentbox acp`, pointed
// back at the daemon with its mock agent: the configured-agent path (ACP
// client adapter) and the ACP server endpoint meet end to end, with real
// processes and stdio.
func TestCustomACPAgent(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	file := filepath.Join(dir, "agents.yaml")
	// The nested CLI finds the daemon's token where it would on the
	// command line: in the token file of the data directory.
	conf := fmt.Sprintf("acp:\n  - name: nested\n    title: agentbox inside agentbox\n    command: %s\n    args: [acp, --agent, mock, --url, 'http://127.0.0.1:%d']\n    env: {AGENTBOX_DATA_DIR: %q}\n", binary, port, dir)
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemonOn(t, dir, port, "--agents-file", file)
	agents, err := d.c.Agents(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, a := range agents.Agents {
		found = found || (a.Name == "nested" && a.Available)
	}
	if !found {
		t.Fatalf("the configured agent is not listed as available: %+v", agents)
	}
	s, err := d.c.CreateSession(t.Context(), client.CreateSession{Agent: "nested"})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := d.c.Send(t.Context(), s.ID, "hello from the outside")
	if err != nil {
		t.Fatal(err)
	}
	var text string
	tc, err := d.c.WaitTurn(t.Context(), s.ID, tr.TurnID, 0, func(e event.Event) error {
		if e.Type == event.TypeItemCompleted {
			p, _ := e.Decode()
			if it := p.(*event.ItemCompleted).Item; it.Kind == event.ItemMessage && it.Role == event.RoleAssistant {
				for _, c := range it.Content {
					text += c.Text
				}
			}
		}
		return nil
	})
	if err != nil || tc.StopReason != event.StopEndTurn {
		t.Fatalf("turn: %+v, %v", tc, err)
	}
	if text == "" {
		t.Fatalf("no assistant message came back through the nested agent")
	}
	// The inner session is an ordinary session of the same daemon.
	list, err := d.c.ListSessions(t.Context(), client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agentsSeen := map[string]bool{}
	for _, s := range list.Sessions {
		agentsSeen[s.Agent] = true
	}
	if !agentsSeen["mock"] || !agentsSeen["nested"] {
		t.Errorf("sessions by agent %v, want the outer (nested) and the inner (mock) one", agentsSeen)
	}
}

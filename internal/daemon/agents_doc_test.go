package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/golden"
)

// TestAgentsDocUpToDate keeps docs/agents.md, the capability matrix, equal
// to what the registered adapters declare.
func TestAgentsDocUpToDate(t *testing.T) {
	got := agentsDoc(Agents(t.TempDir(), func(string) string { return "" }, nil))
	path := filepath.Join("..", "..", "docs", "agents.md")
	if golden.Update() {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/agents.md is stale; run ./scripts/update-golden (or go test ./internal/daemon -update)\n%s", got)
	}
}

// agentsDoc renders the capability matrix: one row per flag, one column per
// agent, from agent.Capabilities' JSON names.
func agentsDoc(r *agent.Registry) []byte {
	var b strings.Builder
	b.WriteString("# Agents and what they can do\n\n")
	b.WriteString("Generated from each adapter's capability flags by `internal/daemon/agents_doc_test.go`\n")
	b.WriteString("(`./scripts/update-golden` rewrites it; a test fails when it is stale). A ✓ means the adapter\n")
	b.WriteString("produces or accepts the thing and its tests check it: golden transcripts of the agent's native\n")
	b.WriteString("output, e2e tests with the real CLI and the fake LLM, and the shared conformance suite\n")
	b.WriteString("(`internal/agenttest`); – means it does not. The adapters' package docs say which test\n")
	b.WriteString("backs each flag.\n\n")
	b.WriteString("`images` and `files` say which content parts of a message reach the agent: a message with a part\n")
	b.WriteString("the session's agent does not take is refused whole (422 `unsupported-content`, naming the part,\n")
	b.WriteString("e.g. `content[1]: agent mock does not accept image parts`), never sent without it.\n")
	b.WriteString("An image or file part carries its bytes (`data`, base64), an http(s) `uri`, or a `path` in the\n")
	b.WriteString("session's workspace, which the daemon reads into `data` before any agent sees the message; a path\n")
	b.WriteString("(or `file:` URI, or symbolic link) leading out of the workspace, or naming anything but a regular\n")
	b.WriteString("file of at most 16 MiB, is refused (422). Each ✓ is checked at the fake model by the conformance\n")
	b.WriteString("suite's `content` subtest (sandboxed too with `AGENTBOX_CONFORMANCE=full`): the image's bytes and\n")
	b.WriteString("the file's content must arrive, in the agent's own form; a – by the subtest refusing the part.\n\n")
	b.WriteString("`model list`: the agent says which models and modes it offers a session, in its own words; the daemon\n")
	b.WriteString("never makes a list up. `session.started` carries it, `GET /v1/agents/{name}` shows the latest one\n")
	b.WriteString("(none before a session of the agent has started), and once known a create or `PATCH` naming a\n")
	b.WriteString("model or mode not on it answers 422 (`unknown-model`, `unknown-mode`) before any process starts,\n")
	b.WriteString("except a model for an agent whose list is open (`models_open`: claude and codex take model names\n")
	b.WriteString("they do not list, such as a dated full name or a custom provider's model).\n")
	b.WriteString("Other agents take the session's model and mode as given and say themselves when they refuse it.\n")
	b.WriteString("pi, opencode and opencode-acp offer the models of the provider configuration agentbox generates\n")
	b.WriteString("for them: their default model and those of `serve --agent-models` (e.g. `pi=gpt-5,gpt-5-mini;opencode=gpt-5`).\n")
	b.WriteString("`model switch` and `mode switch`: `PATCH /v1/sessions/{id}` changes them between turns, carried to\n")
	b.WriteString("the running agent natively and recorded as `session.configured` (422 `switch-unsupported` without).\n\n")
	b.WriteString("`mcp` says the agent takes the session's `mcp_servers` (given at create) in its native form:\n")
	b.WriteString("claude `--mcp-config` with `--strict-mcp-config` (values in its environment, expanded by the CLI),\n")
	b.WriteString("codex the thread's `mcp_servers` config (stdio and http; its tools as the namespace `mcp__NAME`),\n")
	b.WriteString("opencode the `mcp` section of its inline config (`OPENCODE_CONFIG_CONTENT`), the ACP agents the\n")
	b.WriteString("`mcpServers` of `session/new` and `session/load` (http and sse only when the agent declares them).\n")
	b.WriteString("An agent without it (pi has no MCP support) refuses a create with MCP servers (422 `mcp-unsupported`,\n")
	b.WriteString("naming the agent), never starts without them.\n\n")
	names := r.Names()
	infos := make([]agent.Info, len(names))
	for i, n := range names {
		a, _ := r.Get(n)
		infos[i] = a.Info(context.Background())
	}
	b.WriteString("| capability |")
	for i, n := range names {
		fmt.Fprintf(&b, " %s (`%s`) |", infos[i].Title, n)
	}
	b.WriteString("\n|---|")
	b.WriteString(strings.Repeat("---|", len(names)))
	b.WriteString("\n")
	ct := reflect.TypeFor[agent.Capabilities]()
	for f := range ct.Fields() {
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		fmt.Fprintf(&b, "| %s |", strings.ReplaceAll(name, "_", " "))
		for i := range names {
			mark := "–"
			if reflect.ValueOf(infos[i].Capabilities).FieldByIndex(f.Index).Bool() {
				mark = "✓"
			}
			fmt.Fprintf(&b, " %s |", mark)
		}
		b.WriteString("\n")
	}
	return []byte(b.String())
}

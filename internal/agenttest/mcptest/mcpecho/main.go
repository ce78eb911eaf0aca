// Command mcpecho is the MCP server of agentbox's tests (see package
// mcptest): a stdio server with one tool, echo, that answers with its
// argument, the value of MCPTEST_TOKEN, its pid namespace and cgroup, and
// writes mcpecho.txt into its working directory when asked to (write).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

type request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var r request
		if err := json.Unmarshal(in.Bytes(), &r); err != nil || len(r.ID) == 0 {
			continue // a notification, or not JSON-RPC
		}
		res, rpcErr := answer(r)
		msg := map[string]any{"jsonrpc": "2.0", "id": r.ID}
		if rpcErr != nil {
			msg["error"] = rpcErr
		} else {
			msg["result"] = res
		}
		if err := out.Encode(msg); err != nil {
			os.Exit(1)
		}
	}
}

func answer(r request) (any, any) {
	switch r.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(r.Params, &p)
		if p.ProtocolVersion == "" {
			p.ProtocolVersion = "2025-06-18"
		}
		return map[string]any{
			"protocolVersion": p.ProtocolVersion,
			"capabilities":    map[string]any{"tools": map[string]any{}},
			"serverInfo":      map[string]any{"name": "mcpecho", "version": "1.0.0"},
		}, nil
	case "ping":
		return map[string]any{}, nil
	case "tools/list":
		return map[string]any{"tools": []any{map[string]any{
			"name":        "echo",
			"description": "Echoes its text and says where the server runs.",
			"inputSchema": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"text":  map[string]any{"type": "string"},
					"write": map[string]any{"type": "boolean"},
				},
				"required": []string{"text"},
			},
		}}}, nil
	case "tools/call":
		var p struct {
			Name      string `json:"name"`
			Arguments struct {
				Text  string `json:"text"`
				Write bool   `json:"write"`
			} `json:"arguments"`
		}
		if err := json.Unmarshal(r.Params, &p); err != nil || p.Name != "echo" {
			return nil, map[string]any{"code": -32602, "message": "unknown tool"}
		}
		pidns, _ := os.Readlink("/proc/self/ns/pid")
		cg, _ := os.ReadFile("/proc/self/cgroup")
		text := fmt.Sprintf("mcpecho: %s token=%s pidns=%s cgroup=%s", p.Arguments.Text, os.Getenv("MCPTEST_TOKEN"), pidns, strings.TrimSpace(string(cg)))
		if p.Arguments.Write {
			if err := os.WriteFile("mcpecho.txt", []byte(text+"\n"), 0o644); err != nil {
				text += " write-error=" + err.Error()
			}
		}
		return map[string]any{"content": []any{map[string]any{"type": "text", "text": text}}}, nil
	}
	return nil, map[string]any{"code": -32601, "message": "method not found"}
}

package fakellm_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/agentbox/agentbox/internal/fakellm"
	"github.com/agentbox/agentbox/internal/golden"
)

var (
	idRE      = regexp.MustCompile(`fake[0-9a-f]{24}`)
	createdRE = regexp.MustCompile(`"(created|created_at)":\d+`)
)

// normalise replaces each distinct id by <id1>, <id2>, … in order of
// appearance, and timestamps by 0.
func normalise(b []byte) []byte {
	ids := map[string]string{}
	b = idRE.ReplaceAllFunc(b, func(m []byte) []byte {
		if _, ok := ids[string(m)]; !ok {
			ids[string(m)] = fmt.Sprintf("<id%d>", len(ids)+1)
		}
		return []byte(ids[string(m)])
	})
	return createdRE.ReplaceAll(b, []byte(`"$1":0`))
}

// TestGolden pins the exact wire output of one scenario per API: a turn
// with thinking, text and a write call, streamed and not.
func TestGolden(t *testing.T) {
	sc := &fakellm.Scenario{Turns: []fakellm.Turn{{
		Thinking: "Plan: write it.",
		Text:     "Writing hello.txt.",
		Calls:    []fakellm.Call{{Kind: fakellm.KindWrite, Path: "hello.txt", Content: "hi"}},
	}}}
	srv := start(t, fakellm.Options{Default: "golden", Scenarios: map[string]*fakellm.Scenario{"golden": sc}})
	cases := []struct {
		api, agent string
		variants   []string // request paths: "" = the protocol's own
	}{
		{"anthropic", "claude", nil},
		{"responses", "codex", nil},
		{"chat", "opencode", nil},
		{"gemini", "gemini", []string{"/v1beta/models/gemini-test:streamGenerateContent"}},
	}
	for _, tc := range cases {
		t.Run(tc.api, func(t *testing.T) {
			p := protocolByName(tc.api)
			var out bytes.Buffer
			conv := []msg{{role: "user", text: "Create the file please"}}
			tools := agents(t)[tc.agent].Tools
			type req struct {
				path   string
				stream bool
			}
			reqs := []req{{p.path(true), true}, {p.path(false), false}}
			for _, v := range tc.variants {
				reqs = append(reqs, req{v, true})
			}
			for _, r := range reqs {
				status, h, b := post(t, srv.URL()+r.path, p.body(tools, conv, r.stream), nil)
				fmt.Fprintf(&out, "=== POST %s (stream=%v)\n%d %s\n\n%s\n", r.path, r.stream, status, h.Get("Content-Type"), normalise(b))
			}
			file := filepath.Join("testdata", tc.api+".golden")
			if golden.Update() {
				if err := os.WriteFile(file, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if !bytes.Equal(out.Bytes(), want) {
				t.Errorf("%s differs (go test -run Golden -update to rewrite):\n%s", file, out.Bytes())
			}
		})
	}
}

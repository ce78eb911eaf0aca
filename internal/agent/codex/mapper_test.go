package codex

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agenttest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// replay feeds a transcript through a Mapper the way a session does and
// plays the engine's part for approvals: an approval request becomes
// permission.requested, the client's reply that follows in the transcript
// ({"_sent": …}) its resolution; other server requests are recorded as the
// error reply a session sends. Item ids are numbered.
func replay(t *testing.T, lines [][]byte) (evs []event.Event, results []agent.Result) {
	t.Helper()
	m := NewMapper()
	n := 0
	m.NewID = func() string { n++; return fmt.Sprintf("item_%d", n) }
	perms := map[string]string{} // request id → perm id
	for _, line := range lines {
		var sent struct {
			Sent *message `json:"_sent"`
		}
		if json.Unmarshal(line, &sent) == nil && sent.Sent != nil {
			id := perms[string(sent.Sent.ID)]
			if id == "" || sent.Sent.Method != "" {
				continue
			}
			var r struct {
				Decision string `json:"decision"`
			}
			_ = json.Unmarshal(sent.Sent.Result, &r)
			dec := event.DecisionAllow
			if r.Decision == optDecline || r.Decision == "cancel" {
				dec = event.DecisionDeny
			}
			evs = append(evs, event.New(event.SourceDaemon, &event.PermissionResolved{ID: id, Decision: dec, By: event.ByUser, OptionID: r.Decision}))
			continue
		}
		msg, err := parseMessage(line)
		if err != nil {
			t.Fatalf("bad line %s: %v", line, err)
		}
		switch {
		case msg.Method == "":
			// a response to one of our requests
		case msg.isRequest() && approvalMethods[msg.Method]:
			var p approvalParams
			_ = json.Unmarshal(msg.Params, &p)
			req := permissionRequest(msg.Method, msg.Params, m.Item(p.ItemID))
			req.ID = fmt.Sprintf("perm_%d", len(perms)+1)
			perms[string(msg.ID)] = req.ID
			req.Input = nil // the whole request; noise in the golden
			evs = append(evs, event.New(event.SourceDaemon, &req))
		case msg.isRequest():
			evs = append(evs, event.New(event.SourceDaemon, &event.Native{NativeType: "(replied with an error to " + msg.Method + ")"}))
		default:
			out := m.Map(msg.Method, msg.Params)
			evs = append(evs, out.Events...)
			if out.Result != nil {
				results = append(results, *out.Result)
			}
		}
	}
	return evs, results
}

func readLines(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if l := bytes.TrimSpace(sc.Bytes()); len(l) > 0 {
			lines = append(lines, bytes.Clone(l))
		}
	}
	return lines
}

// TestGolden replays every transcript in testdata/transcripts and compares
// the universal events (and turn results) with testdata/NAME.golden.
func TestGolden(t *testing.T) {
	paths, _ := filepath.Glob("testdata/transcripts/*.jsonl")
	if len(paths) == 0 {
		t.Fatal("no transcripts")
	}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".jsonl")
		t.Run(name, func(t *testing.T) {
			evs, results := replay(t, readLines(t, p))
			var sb strings.Builder
			for _, e := range evs {
				if !json.Valid(e.Data) {
					t.Fatalf("invalid data %s", e.Data)
				}
				if _, err := e.Decode(); err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&sb, "%s %s %s\n", e.Type, e.Source, e.Data)
			}
			for _, r := range results {
				b, _ := json.Marshal(r)
				fmt.Fprintf(&sb, "result %s\n", b)
			}
			agenttest.Golden(t, filepath.Join("testdata", name+".golden"), []byte(sb.String()), *update)
		})
	}
}

func TestApprovalResult(t *testing.T) {
	allowAlways := agent.PermissionAnswer{Decision: event.DecisionAllow, OptionID: optAcceptForSession}
	listed := json.RawMessage(`{"itemId":"c","availableDecisions":["accept","acceptForSession","decline"]}`)
	unlisted := json.RawMessage(`{"itemId":"c","availableDecisions":["accept","decline"]}`)
	cases := []struct {
		method string
		params json.RawMessage
		ans    agent.PermissionAnswer
		want   string
	}{
		{"item/commandExecution/requestApproval", listed, allowAlways, `{"decision":"acceptForSession"}`},
		{"item/commandExecution/requestApproval", unlisted, allowAlways, `{"decision":"accept"}`},
		{"item/commandExecution/requestApproval", listed, agent.PermissionAnswer{Decision: event.DecisionAllow}, `{"decision":"accept"}`},
		{"item/commandExecution/requestApproval", listed, agent.PermissionAnswer{Decision: event.DecisionDeny}, `{"decision":"decline"}`},
		{"item/fileChange/requestApproval", json.RawMessage(`{}`), allowAlways, `{"decision":"accept"}`},
		{"execCommandApproval", json.RawMessage(`{}`), agent.PermissionAnswer{Decision: event.DecisionDeny}, `{"decision":"denied"}`},
		{"mcpServer/elicitation/request", json.RawMessage(`{}`), agent.PermissionAnswer{Decision: event.DecisionDeny}, `{"action":"decline"}`},
	}
	for _, c := range cases {
		b, _ := json.Marshal(approvalResult(c.method, c.params, c.ans))
		if string(b) != c.want {
			t.Errorf("%s %s %+v: %s, want %s", c.method, c.params, c.ans, b, c.want)
		}
	}
	req := permissionRequest("item/commandExecution/requestApproval", listed, nil)
	if len(req.Options) != 3 || req.Options[1].Kind != event.OptionAllowAlways {
		t.Errorf("options %+v", req.Options)
	}
	req = permissionRequest("item/commandExecution/requestApproval", unlisted, nil)
	for _, o := range req.Options {
		if o.Kind == event.OptionAllowAlways {
			t.Errorf("offered %+v", o)
		}
	}
}

func TestConfigTOML(t *testing.T) {
	zero := 0
	got := configTOML(Options{BaseURL: "http://ignored/v1", Model: "m", Retries: &zero}, `http://h/"x"/v1`)
	if strings.Contains(got, "ignored") {
		t.Errorf("config.toml names Options.BaseURL rather than its argument:\n%s", got)
	}
	// A sandboxed session's config names no base URL (its command line does).
	if own := configTOML(Options{BaseURL: "http://upstream/v1"}, ""); strings.Contains(own, "base_url") || strings.Contains(own, "upstream") {
		t.Errorf("a sandboxed session's config.toml names a base URL:\n%s", own)
	}
	for _, want := range []string{`model = "m"`, `model_provider = "agentbox"`, "[features]\nplugins = false", "[analytics]\nenabled = false",
		`base_url = "http://h/\"x\"/v1"`, `env_key = "OPENAI_API_KEY"`, `wire_api = "responses"`, "request_max_retries = 0"} {
		if !strings.Contains(got, want) {
			t.Errorf("config.toml lacks %q:\n%s", want, got)
		}
	}
}

func TestServerCommandEnv(t *testing.T) {
	t.Setenv("SECRET_OF_THE_DAEMON", "x")
	c := serverCommand("/opt/codex/bin/codex", "/var/h", "k")
	want := []string{"CODEX_HOME=/var/h", "HOME=/var/h", "OPENAI_API_KEY=k", "PATH=/opt/codex/bin:/usr/local/bin:/usr/bin:/bin"}
	if strings.Join(c.env, " ") != strings.Join(want, " ") {
		t.Errorf("env %q, want %q", c.env, want)
	}
}

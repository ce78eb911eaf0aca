package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent/install"
)

func TestParseAgentModels(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    map[string][]string
		wantErr string
	}{
		{"", map[string][]string{}, ""},
		{" pi = gpt-5 , gpt-5-mini ;; opencode=gpt-5,gpt-5 ", map[string][]string{"pi": {"gpt-5", "gpt-5-mini"}, "opencode": {"gpt-5"}}, ""},
		{"opencode-acp=org/model:v1@x+y_z.2", map[string][]string{"opencode-acp": {"org/model:v1@x+y_z.2"}}, ""},
		{"claude=opus", nil, `agent "claude" does not take declared models`},
		{"codex=gpt-5", nil, "does not take declared models"},
		{"pi", nil, "want NAME=MODEL"},
		{"pi=a;pi=b", nil, "given twice"},
		{"pi=", nil, "want 1 to 200 bytes"},
		{"pi=a,,b", nil, "want 1 to 200 bytes"},
		{"pi=--help", nil, "not starting with -"},
		{`pi=a"b`, nil, "is not allowed"},
		{"pi=a b", nil, "is not allowed"},
		{"pi=a\nb", nil, "is not allowed"},
		{"pi=" + strings.Repeat("m", 201), nil, "want 1 to 200 bytes"},
		{"pi=" + manyModels(65), nil, "at most 64"},
		{"pi=" + manyModels(64), map[string][]string{"pi": strings.Split(manyModels(64), ",")}, ""},
	} {
		got, err := ParseAgentModels(c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("ParseAgentModels(%q) = %v, %v; want an error with %q", c.in, got, err, c.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseAgentModels(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

// manyModels is n distinct model ids, comma-separated.
func manyModels(n int) string {
	ms := make([]string, n)
	for i := range ms {
		ms[i] = fmt.Sprintf("m%d", i)
	}
	return strings.Join(ms, ",")
}

// TestAgentModelsReachAgents: models given to the daemon (serve
// --agent-models) are declared in the provider configuration of pi,
// opencode and opencode-acp, which list them themselves: each real CLI's
// session.started names them.
func TestAgentModelsReachAgents(t *testing.T) {
	for _, name := range modelDeclarers {
		cli := name
		if name == "opencode-acp" {
			cli = "opencode"
		}
		if _, ok, err := install.Lookup(cli); err != nil || !ok {
			t.Fatalf("the %s CLI is not installed in the agent cache (run `go run ./cmd/agentbox agents install %s`): %v", cli, cli, err)
		}
	}
	// The agents are not asked to answer: the provider only has to exist.
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
	t.Setenv("OPENAI_API_KEY", "sk-agentbox-test")
	dataDir := t.TempDir()
	declared := map[string][]string{}
	for _, name := range modelDeclarers {
		declared[name] = []string{"agentbox-declared-" + name}
	}
	d, err := New(t.Context(), Config{Listen: "127.0.0.1:0", DataDir: dataDir, InsecureNoAuth: true,
		AgentModels: declared, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	}()
	c, err := client.New(d.URL())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range modelDeclarers {
		t.Run(name, func(t *testing.T) {
			cwd := filepath.Join(dataDir, "workspaces", name)
			if err := os.MkdirAll(cwd, 0o755); err != nil {
				t.Fatal(err)
			}
			ses, err := c.CreateSession(t.Context(), client.CreateSession{Agent: name, Cwd: cwd})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.DeleteSession(context.Background(), ses.ID, false) }()
			page, err := c.Events(t.Context(), ses.ID, 0, 1)
			if err != nil || len(page.Events) == 0 {
				t.Fatalf("events: %v %+v", err, page)
			}
			p, _ := page.Events[0].Decode()
			started, ok := p.(*event.SessionStarted)
			if !ok || !slices.ContainsFunc(started.Models, func(c event.Choice) bool {
				// opencode-acp names a model provider/model.
				return c.ID == declared[name][0] || c.ID == "agentbox/"+declared[name][0]
			}) {
				t.Fatalf("session.started %+v does not list %s", p, declared[name][0])
			}
		})
	}
}

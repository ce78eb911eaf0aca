package main

import (
	"encoding/json"
	"net/http"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/logging"
)

// TestServeJSONLogs: `serve --json --log-level debug` (the global --json
// flag means --log-format json) writes only JSON lines; every line about a
// request carries its id; the daemon's token, sent in a header or a query,
// is in no line.
func TestServeJSONLogs(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "--json", "--log-level", "debug")
	ctx := t.Context()
	s, err := d.c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.ListSessions(ctx, client.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := d.c.DeleteSession(ctx, s.ID, true); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(d.url + "/v1/sessions/" + s.ID + "/events/stream?access_token=" + d.token + "&after=999999")
	if err == nil {
		resp.Body.Close()
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()

	logs := d.log.String()
	if strings.Contains(logs, d.token) {
		t.Fatalf("the token is in the log:\n%s", logs)
	}
	requests := 0
	for line := range strings.Lines(logs) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON line: %v\n%s", err, line)
		}
		if rec["msg"] != "http request" {
			continue
		}
		requests++
		if id, _ := rec[logging.RequestIDKey].(string); id == "" {
			t.Errorf("request line without %s: %s", logging.RequestIDKey, line)
		}
	}
	if requests < 5 {
		t.Fatalf("%d request lines, want one for each of the 5+ requests:\n%s", requests, logs)
	}
}

// TestServeGovernsProcs: once its start is done, `serve` sizes the Go
// scheduler to its load (internal/procs) and starts at one P; it says so
// in its debug log. An embedding program's daemon does not (GovernProcs).
func TestServeGovernsProcs(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: nothing to govern")
	}
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		t.Skip("GOMAXPROCS is set: the daemon leaves it alone")
	}
	d := startDaemon(t, t.TempDir(), "--log-level", "debug")
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(d.log.String(), "procs: one P") {
		if time.Now().After(deadline) {
			t.Fatalf("no \"procs: one P\" line 20 s after the first answer:\n%s", d.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

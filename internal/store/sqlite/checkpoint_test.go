package sqlite

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/event"
)

// TestWriteBackBeforeFinish checks the order of the checkpointer's steps
// (checkpoint.go): it writes the database file back after each of its
// checkpoints, so that before it asks the writer to finish a restart (whose
// checkpoint syncs the database file inside the writer's pause) both of its
// checkpoints were written back.
func TestWriteBackBeforeFinish(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentbox.db")
	var mu sync.Mutex
	var steps []string
	s := open(t, path, Options{checkpointPages: 20, restartPages: 100, checkpointHook: func(step string) {
		mu.Lock()
		defer mu.Unlock()
		steps = append(steps, step)
	}})
	createSession(t, s, "ses_1")
	big := event.Event{Type: event.TypeNative, Data: json.RawMessage(`"` + strings.Repeat("x", 2000) + `"`)}
	for range 200 { // about 2,000 pages of log: several restarts
		if _, err := s.Append(t.Context(), "ses_1", slices.Repeat([]event.Event{big}, 10)...); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	finishes := 0
	for i, step := range steps {
		if step != "finish" {
			continue
		}
		finishes++
		if i < 2 || steps[i-1] != "written back" || steps[i-2] != "written back" {
			t.Errorf("step %d: finish after %q, want it after two write-backs", i, steps[max(0, i-2):i])
		}
	}
	if finishes == 0 {
		t.Errorf("no restart asked for; steps: %q", steps)
	}
}

package agenttest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/agentbox/agentbox/event"
)

// ReadLines returns the non-blank lines of the file at path (a transcript,
// one JSON object a line), each as it is in the file.
func ReadLines(t testing.TB, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) > 0 {
			lines = append(lines, bytes.Clone(sc.Bytes()))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// GoldenEvents renders events as golden lines: one JSON object a line
// with the event's type, source and data.
func GoldenEvents(t testing.TB, evs []event.Event) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, e := range evs {
		j, err := json.Marshal(struct {
			Type   event.Type      `json:"type"`
			Source event.Source    `json:"source"`
			Data   json.RawMessage `json:"data"`
		}{e.Type, e.Source, e.Data})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

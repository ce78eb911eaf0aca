package process

import (
	"encoding/json"
	"testing"
)

func TestDecodeMessage(t *testing.T) {
	tests := []struct {
		in      string
		wantErr bool
	}{
		{`{"op":"ready","mechanisms":["userns"]}`, false},
		{`{"op":"exit","id":3,"code":2}`, false},
		{``, true},
		{`{"op":"bogus"}`, true},
		{`{"op":"started","pid":-4}`, true},
		{`not json`, true},
	}
	for _, tt := range tests {
		_, err := decodeMessage([]byte(tt.in))
		if (err != nil) != tt.wantErr {
			t.Errorf("decodeMessage(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
		}
	}
}

// FuzzDecodeMessage: the supervisor parses packets from the init, which
// runs inside the sandbox; no packet may crash it, and what it accepts
// must round-trip.
func FuzzDecodeMessage(f *testing.F) {
	f.Add([]byte(`{"op":"exit","id":1,"code":0,"signal":9,"max_rss":100,"cpu_ms":3}`))
	f.Add([]byte(`{"op":"started","id":2,"pid":7,"error":"x"}`))
	f.Add([]byte(`{"op":"ready","missing":"landlock","error":"no"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage(b)
		if err != nil {
			return
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeMessage(again); err != nil {
			t.Fatalf("accepted %q but not its re-encoding: %v", b, err)
		}
	})
}

package policy

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	global, err := Parse("global.yaml", []byte("version: 1\nresources:\n  pids: 32\n"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		raw     string
		wantErr string
		check   func(t *testing.T, p *Policy)
	}{
		{name: "empty uses the fallback preset", raw: ``, check: func(t *testing.T, p *Policy) {
			if p.Resources.Pids == 0 || p.Resources.Pids > 32 {
				t.Errorf("pids %d, want the global's cap of 32 at most", p.Resources.Pids)
			}
		}},
		{name: "null uses the fallback preset", raw: `null`},
		{name: "preset by name", raw: `"strict"`},
		{name: "unknown preset", raw: `"lax"`, wantErr: `unknown policy preset "lax"`},
		{name: "inline object", raw: `{"version":1,"resources":{"pids":1000}}`, check: func(t *testing.T, p *Policy) {
			if p.Resources.Pids != 32 {
				t.Errorf("pids %d, want 32 (the global's limit wins)", p.Resources.Pids)
			}
		}},
		{name: "inline object with an unknown field", raw: `{"version":1,"bogus":true}`, wantErr: "request.policy:1:"},
		{name: "looser than global", raw: `{"version":1,"network":{"mode":"host"}}`, wantErr: "network"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Resolve("request.policy", json.RawMessage(tc.raw), "exec-default", global)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, p)
			}
		})
	}
}

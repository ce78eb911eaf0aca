package yamldoc

import (
	"testing"
)

func TestMarshal(t *testing.T) {
	type inner struct {
		B []string         `json:"b,omitempty"`
		C map[string]any   `json:"c,omitempty"`
		E []map[string]int `json:"e,omitempty"`
	}
	v := struct {
		A     string `json:"a"`
		In    inner  `json:"in"`
		Empty []int  `json:"empty"`
		None  any    `json:"none"`
		N     float64
	}{
		A:     "plain text",
		In:    inner{B: []string{"x", "*.pem", "true", "1.5", "0755", "a: b", " lead", "# c", "é", "", "-", "line\nbreak", "\u0085", "'q'", "\"dq\"", "yes", "~", "null"}, C: map[string]any{"k": 1, "key with: colon": false}, E: []map[string]int{{"x": 1, "y": 2}}},
		Empty: []int{},
		N:     1e21,
	}
	got, err := Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `a: plain text
in:
  b:
    - x
    - "*.pem"
    - "true"
    - "1.5"
    - "0755"
    - "a: b"
    - " lead"
    - "# c"
    - "é"
    - ""
    - "-"
    - "line\nbreak"
    - "\u0085"
    - "'q'"
    - "\"dq\""
    - yes
    - "~"
    - "null"
  c:
    k: 1
    "key with: colon": false
  e:
    - x: 1
      y: 2
empty: []
none: null
N: 1.0e+21
`
	if string(got) != want {
		t.Errorf("Marshal:\n%s\nwant:\n%s", got, want)
	}
	// What Marshal writes, Decode reads back to the same value.
	var back, orig any
	if err := Decode(got, &back, Limits{}); err != nil {
		t.Fatal(err)
	}
	tree, err := Parse([]byte(want), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if orig, err = Value(tree); err != nil || !sameValue(orig, back) {
		t.Errorf("round trip: %#v, want %#v (%v)", back, orig, err)
	}
	js, _ := normal(v)
	if !sameValue(js, back) {
		t.Errorf("round trip: %#v, want %#v", back, js)
	}
}

package mock

import (
	"strings"
	"testing"
)

// FuzzScript feeds arbitrary user text to the script selection and parser:
// whatever a client sends, it must not panic, and an accepted script must
// validate.
func FuzzScript(f *testing.F) {
	for _, s := range []string{
		"hello", "/scenario all", "/scenario long 5", "/scenario long -1", "/scenario nope",
		`/mock [{"kind":"text","text":"hi"}]`, `/mock [{"kind":"long","count":99999999}]`,
		`/mock [{"kind":"sleep","duration":"1ms"}] trailing`, `/mock {"kind":"text"}`,
		`/mock [{"kind":"write","path":"../x","content":"y"}]`, `/mock [{"kind":"sleep","duration":-5}]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		steps, err := script(text)
		if err != nil {
			return
		}
		if strings.HasPrefix(strings.TrimSpace(text), scriptCommand+" ") {
			if err := validate(steps); err != nil {
				t.Fatalf("accepted an invalid script %q: %v", text, err)
			}
		}
	})
}

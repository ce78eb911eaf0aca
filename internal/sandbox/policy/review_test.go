package policy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/sandbox/workspace"
)

func TestEffectiveReviewExempt(t *testing.T) {
	for _, tc := range []struct {
		name, global, req string
		want              []string // nil: Effective fails
		err               string
	}{
		{name: "both unset: the defaults", global: "version: 1\n", req: "version: 1\n", want: DefaultReviewExempt()},
		{name: "global none, request unset: none", global: "version: 1\nfilesystem: {review_exempt: []}\n", req: "version: 1\n", want: []string{}},
		{
			name:   "global narrows, request unset: the defaults it grants",
			global: "version: 1\nfilesystem: {review_exempt: ['**/.venv/**', '**/.gitignore']}\n", req: "version: 1\n",
			want: []string{"**/.gitignore"},
		},
		{
			name:   "request within global",
			global: "version: 1\nfilesystem: {review_exempt: ['**/.venv/**', '**/.gitignore']}\n",
			req:    "version: 1\nfilesystem: {review_exempt: ['**/.venv/**']}\n", want: []string{"**/.venv/**"},
		},
		{name: "request asks for none", global: "version: 1\n", req: "version: 1\nfilesystem: {review_exempt: []}\n", want: []string{}},
		{
			name: "request beyond the defaults", global: "version: 1\n",
			req: "version: 1\nfilesystem: {review_exempt: ['**/.venv/**', '**/.gitignore']}\n",
			err: `filesystem.review_exempt[0]: "**/.venv/**" is not granted by the global policy`,
		},
		{
			name: "request beyond global", global: "version: 1\nfilesystem: {review_exempt: []}\n",
			req: "version: 1\nfilesystem: {review_exempt: ['**/.gitignore']}\n",
			err: `filesystem.review_exempt[0]: "**/.gitignore" is not granted by the global policy (global filesystem.review_exempt: [])`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Effective(mustParse(t, tc.global), mustParse(t, tc.req))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Effective = %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// The effective policy is stored as JSON and read back when
			// the sandbox is made (and on resume): "none" must stay none.
			b, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			back, err := Parse("stored", b)
			if err != nil {
				t.Fatalf("Parse(%s): %v", b, err)
			}
			spec, err := back.Compile(t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, spec.ReviewExempt); diff != "" {
				t.Errorf("compiled review_exempt (-want +got):\n%s\nstored as %s", diff, b)
			}
		})
	}
}

func TestReviewExemptHash(t *testing.T) {
	none := mustParse(t, "version: 1\nfilesystem: {review_exempt: []}\n")
	unset := mustParse(t, "version: 1\n")
	spelled := mustParse(t, "version: 1\nfilesystem: {review_exempt: ["+strings.Join(quoteAll(DefaultReviewExempt()), ", ")+"]}\n")
	if none.Hash() == unset.Hash() {
		t.Error("a policy exempting nothing hashes like one with the defaults")
	}
	if spelled.Hash() != unset.Hash() {
		t.Error("the defaults spelled out hash differently from unset")
	}
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = "'" + s + "'"
	}
	return out
}

func TestReviewExemptValidated(t *testing.T) {
	_, err := Parse("p.yaml", []byte("version: 1\nfilesystem: {review_exempt: ['/abs', 'ok/**']}\n"))
	if err == nil || !strings.Contains(err.Error(), "filesystem.review_exempt[0]") {
		t.Fatalf("Parse = %v, want an error naming filesystem.review_exempt[0]", err)
	}
	for _, p := range DefaultReviewExempt() {
		if err := workspace.ValidatePattern(p); err != nil {
			t.Errorf("default %q: %v", p, err)
		}
	}
}

package egress

import (
	"net/http"
	"slices"
	"strings"
)

// substitute puts each credential's value in place of its placeholder in
// h, and returns the names of those it used. A credential is put only in
// its own header, and only where that header's whole value is its Format
// around the placeholder (the scheme compared without regard to case), so
// a sandbox cannot have a value copied into a header an upstream might
// echo, or into another credential's header.
func substitute(h http.Header, creds []Secret) []string {
	var used []string
	for _, c := range creds {
		key := http.CanonicalHeaderKey(c.Header)
		want := Secret{Value: Placeholder(c.Name), Format: c.Format}.headerValue()
		for i, v := range h[key] {
			if strings.EqualFold(strings.TrimSpace(v), want) {
				h[key][i] = c.headerValue()
				if !slices.Contains(used, c.Name) {
					used = append(used, c.Name)
				}
			}
		}
	}
	return used
}

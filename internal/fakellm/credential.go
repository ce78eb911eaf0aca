package fakellm

import (
	"crypto/subtle"
	"net/http"
	"strings"
)

// Credential is one credential Options.Credentials accepts.
type Credential struct {
	// Header is the header that carries it ("Authorization", "x-api-key",
	// "x-goog-api-key", "api-key"), or "?key" for the query parameter.
	Header string
	// Value is the header's whole value, e.g. "Bearer tok".
	Value string
	// Requires are headers that must come with it, each holding the given
	// item in its comma-separated list, e.g. {"anthropic-beta":
	// "oauth-2025-04-20"} for an Anthropic OAuth token.
	Requires map[string]string
}

// credentialPlaces are where a request carries credentials.
var credentialPlaces = []string{"Authorization", "X-Api-Key", "X-Goog-Api-Key", "Api-Key", "?key"}

// values returns what r carries at place.
func values(r *http.Request, place string) []string {
	if place == "?key" {
		return r.URL.Query()["key"]
	}
	return r.Header.Values(place)
}

// checkCredentials returns why r does not satisfy creds, "" if it does (or
// creds is empty). The message never holds a value.
func checkCredentials(creds []Credential, r *http.Request) string {
	if len(creds) == 0 {
		return ""
	}
	matched := false
	for _, place := range credentialPlaces {
		for _, v := range values(r, place) {
			c, ok := findCredential(creds, place, v)
			if !ok {
				return "fakellm: wrong credential in " + place + " (not one this server accepts there)"
			}
			for h, item := range c.Requires {
				if !listHas(r.Header.Values(h), item) {
					return "fakellm: the credential in " + place + " needs " + h + ": " + item
				}
			}
			matched = true
		}
	}
	if !matched {
		return "fakellm: no credential (this server requires one)"
	}
	return ""
}

func findCredential(creds []Credential, place, v string) (Credential, bool) {
	for _, c := range creds {
		if strings.EqualFold(c.Header, place) && subtle.ConstantTimeCompare([]byte(c.Value), []byte(v)) == 1 {
			return c, true
		}
	}
	return Credential{}, false
}

// listHas reports whether the comma-separated lists in vs hold item.
func listHas(vs []string, item string) bool {
	for _, v := range vs {
		for _, f := range strings.Split(v, ",") {
			if strings.TrimSpace(f) == item {
				return true
			}
		}
	}
	return false
}

// Package yamldoctest holds the documents the bounds of package yamldoc
// are tested with: parser bombs small enough to be sent as a policy
// (under the API's 256 KiB limit on policy_source), shared by the tests
// of yamldoc, of the policy parser and of the API.
package yamldoctest

import (
	"strconv"
	"strings"
)

// PolicyBombs are documents whose parse, without bounds, took gigabytes
// or minutes with the YAML parser agentbox used before yamldoc
// (goccy/go-yaml: its cost grew with the square of the nesting depth, and
// with a long key times the values under it; 200 KB of brackets grew the
// daemon past 24 GiB). Each goes over one of a policy's Limits, except
// those named in Invalid. Each is under 256 KiB; the JSON ones ("nested
// JSON") are valid JSON objects, so they can be sent inline too.
func PolicyBombs() map[string]string {
	const n = 200_000
	var staircase, keys strings.Builder
	for i := range 700 {
		staircase.WriteString(strings.Repeat(" ", i) + "a:\n")
	}
	keys.WriteString("version: 1\nenv: {set: {")
	for i := range 20_000 {
		keys.WriteString("K" + strconv.Itoa(i) + ": v, ")
	}
	keys.WriteString("}}\n")
	return map[string]string{
		"brackets":                strings.Repeat("[", n),
		"braces":                  strings.Repeat("{a: ", n/4),
		"mixed":                   strings.Repeat("[{a: ", n/5),
		"dashes in a flow":        "version: 1\nnetwork: {allow: [" + strings.Repeat("- ", n/2) + "x]}\n",
		"block dashes":            strings.Repeat("- ", n/2) + "x\n",
		"block nesting":           staircase.String(),
		"many keys":               keys.String(),
		"long key over values":    "{" + strings.Repeat("k", 200_000) + ": [" + strings.Repeat("a,", 8000) + "]}",
		"nested JSON":             strings.Repeat(`{"a":`, 9000) + "1" + strings.Repeat("}", 9000),
		"after a valid beginning": "version: 1\nresources: {memory: 1Gi}\nnetwork:\n  allow: " + strings.Repeat("[", n),
	}
}

// Invalid names the bombs that are not YAML agentbox reads at all: the
// parser refuses them at their first wrong token (a "- " entry inside a
// flow collection), before any limit is reached.
var Invalid = map[string]bool{"dashes in a flow": true}

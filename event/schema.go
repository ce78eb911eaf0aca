package event

import (
	"bytes"
	_ "embed" // for the schema file
)

// The schema is generated from the types of this package by a test; after
// changing a type, regenerate it (and docs/events.md) with:
//
//go:generate go test -run "Test(Schema|Docs)UpToDate" -update .

//go:embed schema/event.v1.json
var jsonSchema []byte

// JSONSchema returns the JSON Schema (draft 2020-12) of the event envelope and
// of each event type's data, as committed in schema/event.v1.json. The
// returned slice is a copy the caller may keep or modify.
func JSONSchema() []byte { return bytes.Clone(jsonSchema) }

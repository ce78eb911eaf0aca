// Package yamldoc decodes the strict YAML subset agentbox's documents are
// written in (policies, the --config file, the agents and secrets files):
// block mappings and sequences, flow [..] and {..}, plain, single- and
// double-quoted scalars, literal (|) and folded (>) block scalars,
// comments and an optional leading "---", with the YAML 1.2 core schema
// for scalars (true/false, null/~, integers, floats; yes/no/on/off are
// strings).
//
// What YAML has beyond that is refused with an error at its line and
// column: anchors, aliases, tags, merge keys, directives, more than one
// document, complex keys (collections as keys, "? "), a key given twice,
// tabs in indentation, integers whose meaning changed between YAML 1.1
// and 1.2 (010, 0b1), and text that is not UTF-8.
//
// Parse reads a document into Nodes, each with its line and column. The
// parser reads every byte a bounded number of times and refuses a
// document past its Limits (bytes, nesting depth, nodes, key length) as
// soon as it goes over: any input is refused or parsed in time linear in
// its size and memory bounded by the limits. Value turns a Node into the
// plain values encoding/json makes (map[string]any, []any, string,
// json.Number, bool, nil); Decode reads a document into a Go value
// through them, strictly (unknown fields are errors).
package yamldoc

import (
	"fmt"
)

// Limits bound one document. A zero field takes the value of Default.
type Limits struct {
	Bytes    int // the largest document
	Depth    int // collections nested in collections
	Nodes    int // scalars and collections
	KeyBytes int // the longest mapping key
}

// Default is what a document of agentbox's gets unless its reader says
// otherwise: far above any real policy, agents or secrets file.
var Default = Limits{Bytes: 1 << 20, Depth: 64, Nodes: 1 << 16, KeyBytes: 1 << 10}

func (l Limits) withDefaults() Limits {
	if l.Bytes <= 0 {
		l.Bytes = Default.Bytes
	}
	if l.Depth <= 0 {
		l.Depth = Default.Depth
	}
	if l.Nodes <= 0 {
		l.Nodes = Default.Nodes
	}
	if l.KeyBytes <= 0 {
		l.KeyBytes = Default.KeyBytes
	}
	return l
}

// Kind is what a Node is.
type Kind uint8

const (
	Scalar Kind = iota
	Mapping
	Sequence
)

// Tag is what a scalar resolves to in the YAML 1.2 core schema.
type Tag uint8

const (
	Str Tag = iota
	Null
	Bool
	Int
	Float
)

// Style is how a scalar is written.
type Style uint8

const (
	Plain Style = iota
	SingleQuoted
	DoubleQuoted
	Literal
	Folded
)

// Node is one value of a document and where it starts.
type Node struct {
	Kind      Kind
	Line, Col int // 1-based; columns count characters

	// Scalars.
	Tag   Tag
	Style Style
	Text  string // the scalar's content, escapes and folding applied
	raw   string // a plain scalar's text before resolve

	// Collections.
	Flow  bool
	Pairs []Pair  // Mapping, in text order
	Items []*Node // Sequence
}

// Pair is a mapping's key (always a scalar) and value.
type Pair struct {
	Key, Value *Node
}

// Error is a document refused, at the place of the problem.
type Error struct {
	Line, Column int // 1-based
	Message      string
	// Path is the keys and sequence indexes from the root to the value
	// the problem is in (or at), for callers that name fields.
	Path []string
}

func (e *Error) Error() string { return fmt.Sprintf("%d:%d: %s", e.Line, e.Column, e.Message) }

func (n *Node) String() string {
	switch n.Kind {
	case Mapping:
		return "a mapping"
	case Sequence:
		return "a sequence"
	}
	switch n.Tag {
	case Null:
		return "null"
	case Bool:
		return "a boolean"
	case Int:
		return "an integer"
	case Float:
		return "a number"
	}
	return "a string"
}

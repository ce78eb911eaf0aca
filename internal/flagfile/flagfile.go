// Package flagfile sets a command's flags from a YAML configuration file
// whose keys are the flags' names, so that every flag can come from the
// file; its errors name the file and line.
package flagfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/spf13/pflag"

	"github.com/agentbox/agentbox/internal/doclimit"
)

// Limits bound a configuration file before it is parsed: a few dozen
// flags take a few kilobytes.
var Limits = doclimit.Limits{Bytes: 256 << 10, Depth: 8, Tokens: 1 << 12}

// Entry is one key of a file: the value as a flag would take it on the
// command line, and where it is.
type Entry struct {
	Key   string
	Value string
	Line  int
}

// Parse reads a file's entries: a mapping (or an empty document) of names
// to single values (strings, numbers, booleans); a list or a mapping as a
// value, a key given twice or a document that is not a mapping is an
// error with its line. name is used in errors.
func Parse(name string, data []byte) ([]Entry, error) {
	if err := doclimit.Check(data, Limits); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, fmt.Errorf("%s", located(name, yaml.FormatError(err, false, false)))
	}
	var entries []Entry
	seen := map[string]int{}
	for i, doc := range f.Docs {
		if i > 0 {
			return nil, fmt.Errorf("%s:%d: one YAML document only", name, line(doc))
		}
		var values []*ast.MappingValueNode
		switch b := doc.Body.(type) {
		case nil:
		case *ast.MappingNode:
			values = b.Values
		case *ast.MappingValueNode:
			values = []*ast.MappingValueNode{b}
		default:
			return nil, fmt.Errorf("%s:%d: want a mapping of flag names to values (listen: 127.0.0.1:7777)", name, line(b))
		}
		for _, mv := range values {
			var key string
			if err := yaml.NodeToValue(mv.Key, &key); err != nil || key == "" {
				return nil, fmt.Errorf("%s:%d: a key must be a flag name", name, line(mv.Key))
			}
			ln := line(mv.Key)
			if prev, dup := seen[key]; dup {
				return nil, fmt.Errorf("%s:%d: %s given again (first on line %d)", name, ln, key, prev)
			}
			seen[key] = ln
			v, err := scalar(mv.Value)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %s: %w", name, ln, key, err)
			}
			entries = append(entries, Entry{Key: key, Value: v, Line: ln})
		}
	}
	return entries, nil
}

// scalar is a single value as its command-line text.
func scalar(n ast.Node) (string, error) {
	var v any
	if n == nil {
		return "", errors.New("no value")
	}
	if err := yaml.NodeToValue(n, &v); err != nil {
		return "", errors.New(yaml.FormatError(err, false, false))
	}
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case uint64:
		return strconv.FormatUint(v, 10), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	case nil:
		return "", errors.New("no value")
	default:
		return "", fmt.Errorf("want a single value (a string, number or boolean), not a %T; a list is one string, comma-separated", v)
	}
}

// located turns the parser's "[line:col] message" into "name:line:col:
// message", the form of the other errors.
func located(name, msg string) string {
	if m := position.FindStringSubmatch(msg); m != nil {
		return name + ":" + m[1] + ":" + m[2] + ": " + strings.TrimSpace(msg[len(m[0]):])
	}
	return name + ": " + msg
}

var position = regexp.MustCompile(`^\[(\d+):(\d+)\]`)

func line(n ast.Node) int {
	if n == nil || n.GetToken() == nil {
		return 1
	}
	return n.GetToken().Position.Line
}

// Apply sets the flags of fs the file names. keys are the names a file
// may give; a flag already set (on the command line, or by the
// environment: fs.Changed) keeps its value. A key not in keys, or a value
// the flag refuses, is an error with the file's name and line.
func Apply(fs *pflag.FlagSet, name string, entries []Entry, keys map[string]bool) error {
	for _, e := range entries {
		if !keys[e.Key] || fs.Lookup(e.Key) == nil {
			return fmt.Errorf("%s:%d: unknown key %q: keys are the names of the command's flags (see --help)", name, e.Line, e.Key)
		}
		if fs.Changed(e.Key) {
			continue
		}
		if err := fs.Set(e.Key, e.Value); err != nil {
			return fmt.Errorf("%s:%d: %s: %w", name, e.Line, e.Key, err)
		}
	}
	return nil
}

// Load reads and parses the file at path.
func Load(path string) ([]Entry, os.FileInfo, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s: not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(fh, int64(Limits.Bytes)+1))
	if err != nil {
		return nil, nil, err
	}
	entries, err := Parse(path, data)
	return entries, fi, err
}

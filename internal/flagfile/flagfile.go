// Package flagfile sets a command's flags from a YAML configuration file
// whose keys are the flags' names, so that every flag can come from the
// file; its errors name the file and line.
package flagfile

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/agentbox/agentbox/internal/yamldoc"
)

// Limits bound a configuration file as it is parsed: a few dozen flags
// take a few kilobytes.
var Limits = yamldoc.Limits{Bytes: 256 << 10, Depth: 8, Nodes: 1 << 12}

// Entry is one key of a file: the value as a flag would take it on the
// command line, and where it is.
type Entry struct {
	Key   string
	Value string
	Line  int
}

// Parse reads a file's entries: a mapping (or an empty document) of names
// to single values (strings, numbers, booleans), in the YAML subset of
// package yamldoc; a list or a mapping as a value, a key given twice or a
// document that is not a mapping is an error with its line. name is used
// in errors.
func Parse(name string, data []byte) ([]Entry, error) {
	doc, err := yamldoc.Parse(data, Limits)
	if err != nil {
		return nil, fmt.Errorf("%s:%w", name, err)
	}
	if doc == nil {
		return nil, nil
	}
	if doc.Kind != yamldoc.Mapping {
		return nil, fmt.Errorf("%s:%d: want a mapping of flag names to values (listen: 127.0.0.1:7777)", name, doc.Line)
	}
	entries := make([]Entry, 0, len(doc.Pairs))
	for _, kv := range doc.Pairs {
		key, ln := kv.Key.Text, kv.Key.Line
		if key == "" {
			return nil, fmt.Errorf("%s:%d: a key must be a flag name", name, ln)
		}
		v, err := scalar(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %s: %w", name, ln, key, err)
		}
		entries = append(entries, Entry{Key: key, Value: v, Line: ln})
	}
	return entries, nil
}

// scalar is a single value as its command-line text.
func scalar(n *yamldoc.Node) (string, error) {
	switch {
	case n.Kind != yamldoc.Scalar:
		return "", fmt.Errorf("want a single value (a string, number or boolean), not %s; a list is one string, comma-separated", n)
	case n.Tag == yamldoc.Null:
		return "", errors.New("no value")
	}
	return n.Text, nil
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

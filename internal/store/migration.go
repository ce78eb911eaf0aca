package store

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one versioned schema step of a store. Both stores keep their
// steps as embedded files named NNNN_description.sql, numbered 1, 2, 3...
// without gaps, with the same versions for the same change, and record the
// applied ones in a schema_migrations table (version, name, applied_at); each
// applies the missing ones at open, in one transaction, and refuses a
// database whose version is newer than its own.
type Migration struct {
	Version int
	Name    string // file name
	SQL     string
}

// LoadMigrations reads the *.sql files of fsys's directory dir, sorted by
// version, and checks their numbering.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, name := range names {
		base := path.Base(name)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive version and '_'", base)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: base, SQL: string(b)})
	}
	// sort.Slice (the same pdqsort) rather than slices.SortFunc: one sort shared
	// by every element type instead of a copy for this one (12-17 KB of the binary).
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i := range ms {
		if ms[i].Version != i+1 {
			return nil, fmt.Errorf("migration %s: versions must be 1, 2, 3... without gaps", ms[i].Name)
		}
	}
	return ms, nil
}

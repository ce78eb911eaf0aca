package acp

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The client side of fs/read_text_file and fs/write_text_file: the agent
// reads and writes files through agentbox, which confines it to the
// session's directory. os.Root refuses every path that leaves it, through
// ".." or through a symbolic link, so a link inside the directory cannot
// point the agent elsewhere.

// maxReadFile bounds a file read through fs/read_text_file.
const maxReadFile = 16 << 20

var errOutside = errors.New("the path is outside the session's directory")

// confinedFS serves files under one directory.
type confinedFS struct {
	dir string
}

// rel returns path relative to the directory, or errOutside.
func (c confinedFS) rel(path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("%q is not an absolute path", path)
	}
	rel, err := filepath.Rel(c.dir, filepath.Clean(path))
	if err != nil || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%s: %w (%s)", path, errOutside, c.dir)
	}
	return rel, nil
}

// ReadText returns the file's text, from 1-based line (0: the first) and at
// most limit lines (0: all).
func (c confinedFS) ReadText(path string, line, limit int) (string, error) {
	rel, err := c.rel(path)
	if err != nil {
		return "", err
	}
	root, err := os.OpenRoot(c.dir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	f, err := root.Open(rel)
	if err != nil {
		return "", confinedErr(path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxReadFile+1))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxReadFile {
		return "", fmt.Errorf("%s is larger than %d bytes", path, maxReadFile)
	}
	s := string(b)
	if line <= 1 && limit <= 0 {
		return s, nil
	}
	lines := strings.SplitAfter(s, "\n")
	from := max(line-1, 0)
	if from >= len(lines) {
		return "", nil
	}
	lines = lines[from:]
	if limit > 0 && limit < len(lines) {
		lines = lines[:limit]
	}
	return strings.Join(lines, ""), nil
}

// WriteText writes the file, creating it and its parent directories.
func (c confinedFS) WriteText(path, content string) error {
	rel, err := c.rel(path)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(c.dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if d := filepath.Dir(rel); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return confinedErr(path, err)
		}
	}
	f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return confinedErr(path, err)
	}
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// confinedErr says that a path escaped through a link in plain words.
func confinedErr(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "escapes") {
		return fmt.Errorf("%s: %w (through a symbolic link)", path, errOutside)
	}
	return fmt.Errorf("%s: %w", path, err)
}

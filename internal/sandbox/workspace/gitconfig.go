package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// A reader for git's configuration syntax, bounded, for the host's own
// config files only (never for what a sandbox wrote): the commit needs
// core.hooksPath, include.path, includeIf.*.path and the command-valued
// keys. It follows git 2.39's parser (config.c: git_parse_source,
// get_base_var, get_extended_base_var, get_value, parse_value) character
// for character, so that it reads every value git reads; the tests check it
// against "git config --list".

// Bounds of the reader. Git itself has no size limit; host files bigger
// than this are not configuration anyone wrote by hand, and reading them
// would cost the daemon memory on every commit.
const (
	maxConfigBytes   = 1 << 20
	maxConfigEntries = 1 << 14
	// maxIncludeDepth is git's own limit (MAX_INCLUDE_DEPTH).
	maxIncludeDepth = 10
	// maxConfigFiles bounds the files one commit reads (all repositories
	// and includes together); a workspace whose configuration holds more
	// is not committed (hostgit.go).
	maxConfigFiles = 4096
)

var (
	errConfigTooBig     = errors.New("git config: file too large")
	errConfigTooManyEnt = errors.New("git config: too many entries")
)

// configEntry is one variable: Key is "section.name" or
// "section.subsection.name" with section and name lower-cased, as git
// config --list prints it. NoValue is a bare "name" line (boolean true).
type configEntry struct {
	Key, Value string
	NoValue    bool
}

// parseGitConfig parses one config file. On a syntax error it returns the
// entries before it and an error (git rejects the whole file then, so
// nothing after it is read by git either).
func parseGitConfig(data []byte) ([]configEntry, error) {
	if len(data) > maxConfigBytes {
		return nil, errConfigTooBig
	}
	p := &configParser{data: data}
	err := p.parse()
	return p.entries, err
}

type configParser struct {
	data    []byte
	pos     int
	eof     bool
	line    int
	entries []configEntry
}

const eofByte = -1

func (p *configParser) fgetc() int {
	if p.pos >= len(p.data) {
		p.pos++ // so an ungetc after EOF is balanced
		return eofByte
	}
	c := int(p.data[p.pos])
	p.pos++
	return c
}

func (p *configParser) ungetc() { p.pos-- }

// next is git's get_next_char: CRLF is LF, EOF is a final LF.
func (p *configParser) next() int {
	c := p.fgetc()
	if c == '\r' {
		c = p.fgetc()
		if c != '\n' {
			p.ungetc()
			c = '\r'
		}
	}
	if c == '\n' {
		p.line++
	}
	if c == eofByte {
		p.eof = true
		p.line++
		c = '\n'
	}
	return c
}

// git's sane_ctype classes.
func gitSpace(c int) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
func gitAlpha(c int) bool { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }
func gitDigit(c int) bool { return c >= '0' && c <= '9' }
func keyChar(c int) bool  { return gitAlpha(c) || gitDigit(c) || c == '-' }

func lower(c int) byte {
	if c >= 'A' && c <= 'Z' {
		return byte(c + 'a' - 'A')
	}
	return byte(c)
}

func (p *configParser) fail() error {
	return fmt.Errorf("git config: bad config line %d", p.line)
}

func (p *configParser) parse() error {
	var section []byte
	comment := false
	bom := []byte{0xef, 0xbb, 0xbf}
	bomAt := 0
	for {
		c := p.next()
		if bomAt >= 0 {
			if bomAt < len(bom) && c == int(bom[bomAt]) && !p.eof {
				bomAt++
				continue
			}
			if bomAt != 0 && bomAt != len(bom) {
				return p.fail() // a partial BOM
			}
			bomAt = -1
		}
		if c == '\n' {
			if p.eof {
				return nil
			}
			comment = false
			continue
		}
		if comment {
			continue
		}
		if gitSpace(c) {
			continue
		}
		if c == '#' || c == ';' {
			comment = true
			continue
		}
		if c == '[' {
			var ok bool
			section, ok = p.baseVar()
			if !ok || len(section) < 1 {
				return p.fail()
			}
			section = append(section, '.')
			continue
		}
		if !gitAlpha(c) {
			return p.fail()
		}
		key := append(append([]byte(nil), section...), lower(c))
		if !p.value(key) {
			return p.fail()
		}
		if len(p.entries) > maxConfigEntries {
			return fmt.Errorf("%w: more than %d", errConfigTooManyEnt, maxConfigEntries)
		}
	}
}

// baseVar reads a section header after "[".
func (p *configParser) baseVar() ([]byte, bool) {
	var name []byte
	for {
		c := p.next()
		if p.eof {
			return nil, false
		}
		if c == ']' {
			return name, true
		}
		if gitSpace(c) {
			return p.extendedBaseVar(name, c)
		}
		if !keyChar(c) && c != '.' {
			return nil, false
		}
		name = append(name, lower(c))
	}
}

// extendedBaseVar reads `[section "subsection"]` after the space.
func (p *configParser) extendedBaseVar(name []byte, c int) ([]byte, bool) {
	for {
		if c == '\n' {
			return nil, false
		}
		c = p.next()
		if !gitSpace(c) {
			break
		}
	}
	if c != '"' {
		return nil, false
	}
	name = append(name, '.')
	for {
		c := p.next()
		if c == '\n' {
			return nil, false
		}
		if c == '"' {
			break
		}
		if c == '\\' {
			c = p.next()
			if c == '\n' {
				return nil, false
			}
		}
		name = append(name, byte(c))
	}
	if p.next() != ']' {
		return nil, false
	}
	return name, true
}

// value reads the rest of a variable's name and its value.
func (p *configParser) value(key []byte) bool {
	var c int
	for {
		c = p.next()
		if p.eof || !keyChar(c) {
			break
		}
		key = append(key, lower(c))
	}
	for c == ' ' || c == '\t' {
		c = p.next()
	}
	if c == '\n' {
		p.entries = append(p.entries, configEntry{Key: cString(key), NoValue: true})
		return true
	}
	if c != '=' {
		return false
	}
	v, ok := p.parseValue()
	if !ok {
		return false
	}
	p.entries = append(p.entries, configEntry{Key: cString(key), Value: cString([]byte(v))})
	return true
}

// cString is what git's callbacks see of a name or value: a C string, cut
// at the first NUL byte.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

func (p *configParser) parseValue() (string, bool) {
	var b strings.Builder
	quote, comment := false, false
	space := 0
	for {
		c := p.next()
		if c == '\n' {
			if quote {
				return "", false
			}
			return b.String(), true
		}
		if comment {
			continue
		}
		if gitSpace(c) && !quote {
			if b.Len() > 0 {
				space++
			}
			continue
		}
		if !quote && (c == ';' || c == '#') {
			comment = true
			continue
		}
		for ; space > 0; space-- {
			b.WriteByte(' ')
		}
		if c == '\\' {
			c = p.next()
			switch c {
			case '\n':
				continue
			case 't':
				c = '\t'
			case 'b':
				c = '\b'
			case 'n':
				c = '\n'
			case '\\', '"':
			default:
				return "", false
			}
			b.WriteByte(byte(c))
			continue
		}
		if c == '"' {
			quote = !quote
			continue
		}
		b.WriteByte(byte(c))
	}
}

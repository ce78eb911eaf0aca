package yamldoc

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Parse reads one document. An empty document (nothing but comments and
// blank lines) is a nil Node and no error. A refused document is an
// *Error.
func Parse(data []byte, l Limits) (*Node, error) {
	l = l.withDefaults()
	if len(data) > l.Bytes {
		return nil, &Error{Line: 1, Column: 1, Message: fmt.Sprintf("the document is %d bytes; the limit is %d", len(data), l.Bytes)}
	}
	p := &parser{l: l, line: 1, col: 1, fresh: true}
	if err := p.load(data); err != nil {
		return nil, err
	}
	n, err := p.document()
	if err != nil {
		return nil, err
	}
	return n, nil
}

type parser struct {
	l     Limits
	src   []byte
	i     int
	line  int
	col   int
	fresh bool // only indentation so far on the current line
	nodes int
	depth int
	flows int      // open flow collections
	path  []string // the keys and indexes of the value being read
}

// failure carries an *Error up through the recursive descent; document
// recovers it.
type failure struct{ err *Error }

func (p *parser) failAt(line, col int, format string, args ...any) {
	panic(failure{&Error{Line: line, Column: col, Message: fmt.Sprintf(format, args...), Path: slices.Clone(p.path)}})
}

func (p *parser) fail(format string, args ...any) { p.failAt(p.line, p.col, format, args...) }

// load checks the text is UTF-8 without control characters and turns
// CRLF and CR into LF (which changes no line or column; a text without
// CR is used as it is).
func (p *parser) load(data []byte) error {
	data = bytes.TrimPrefix(data, []byte("\uFEFF"))
	line, col := 1, 1
	var src []byte
	copying := bytes.IndexByte(data, '\r') >= 0
	if copying {
		src = make([]byte, 0, len(data))
	}
	for i := 0; i < len(data); {
		c := data[i]
		if c == '\r' {
			src = append(src, '\n')
			if i+1 < len(data) && data[i+1] == '\n' {
				i++
			}
			i++
			line, col = line+1, 1
			continue
		}
		size := 1
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\n' && c != '\t' || c == 0x7f {
				return &Error{Line: line, Column: col, Message: fmt.Sprintf("control character %#02x", c)}
			}
		} else {
			var r rune
			r, size = utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && size == 1 {
				return &Error{Line: line, Column: col, Message: "the document is not UTF-8"}
			}
			if r == '\uFEFF' || r >= 0x80 && r < 0xa0 {
				return &Error{Line: line, Column: col, Message: fmt.Sprintf("control character %U", r)}
			}
		}
		if copying {
			src = append(src, data[i:i+size]...)
		}
		i += size
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	if !copying {
		src = data
	}
	p.src = src
	return nil
}

func (p *parser) document() (root *Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(failure)
			if !ok {
				panic(r)
			}
			root, err = nil, f.err
		}
	}()
	p.skipBlank()
	if p.fresh && p.col == 1 && p.cur() == '%' {
		p.fail("YAML directives (%%) are not accepted")
	}
	if p.marker("---") {
		p.advN(3)
		p.skipBlank()
	}
	if p.eof() || p.marker("...") {
		return p.end(nil), nil
	}
	root = p.block(-1, true)
	return p.end(root), nil
}

// end checks nothing but an optional "..." follows the document.
func (p *parser) end(root *Node) *Node {
	p.skipBlank()
	if p.marker("...") {
		p.advN(3)
		p.skipBlank()
	}
	switch {
	case p.eof():
		return root
	case p.marker("---"):
		p.fail("one YAML document only: another starts here")
	case p.col > 1 && p.fresh && root != nil:
		p.fail("unexpected indentation: this line is indented deeper than the one it follows")
	}
	p.fail("unexpected %s: the document has ended (is it indented less than what it belongs to?)", p.what())
	return nil
}

// what names the token at the cursor for an error.
func (p *parser) what() string {
	if p.eof() {
		return "end of the document"
	}
	r, _ := utf8.DecodeRune(p.src[p.i:])
	return strconv.QuoteRune(r)
}

func (p *parser) eof() bool { return p.i >= len(p.src) }

func (p *parser) cur() byte {
	if p.i < len(p.src) {
		return p.src[p.i]
	}
	return 0
}

func (p *parser) peek(n int) byte {
	if p.i+n < len(p.src) {
		return p.src[p.i+n]
	}
	return 0
}

// blankAt reports whether the byte n ahead ends a token: the end, a
// space, a tab or a line break.
func (p *parser) blankAt(n int) bool {
	c := p.peek(n)
	return p.i+n >= len(p.src) || c == ' ' || c == '\t' || c == '\n'
}

func (p *parser) adv() {
	c := p.src[p.i]
	p.i++
	switch {
	case c == '\n':
		p.line, p.col, p.fresh = p.line+1, 1, true
	case c&0xc0 != 0x80:
		p.col++
	}
	if c != ' ' && c != '\t' && c != '\n' {
		p.fresh = false
	}
}

func (p *parser) advN(n int) {
	for ; n > 0 && !p.eof(); n-- {
		p.adv()
	}
}

// marker reports a document marker ("---" or "...") at the start of the
// current line.
func (p *parser) marker(m string) bool {
	return p.col == 1 && bytes.HasPrefix(p.src[p.i:], []byte(m)) && p.blankAt(3)
}

func (p *parser) skipSpaces() {
	for c := p.cur(); (c == ' ' || c == '\t') && !p.eof(); c = p.cur() {
		p.adv()
	}
}

// skipBlank moves past spaces, comments and line breaks to the next
// content. A tab in the indentation of a line with content is refused.
func (p *parser) skipBlank() {
	tabLine, tabCol := 0, 0
	for !p.eof() {
		switch p.cur() {
		case ' ':
			p.adv()
		case '\t':
			// In a flow collection (JSON) lines are not indented: tabs
			// are white space like spaces.
			if p.fresh && tabLine == 0 && p.flows == 0 {
				tabLine, tabCol = p.line, p.col
			}
			p.adv()
		case '\n':
			tabLine = 0
			p.adv()
		case '#':
			if p.i > 0 && !isBlank(p.src[p.i-1]) {
				p.fail("a comment needs a space before its #")
			}
			for !p.eof() && p.cur() != '\n' {
				p.adv()
			}
		default:
			if tabLine != 0 {
				p.failAt(tabLine, tabCol, "a tab in indentation: YAML indents with spaces only")
			}
			if p.fresh && p.cur() == ':' && p.blankAt(1) {
				p.fail("a mapping key must fit on one line, with its colon")
			}
			return
		}
	}
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' }

// endOfLine checks nothing but a comment follows a value on its line.
func (p *parser) endOfLine() {
	p.skipSpaces()
	if !p.eof() && p.cur() != '\n' && p.cur() != '#' {
		if p.cur() == ':' {
			p.fail("a mapping cannot start on the line of a key or after a value: put it on the next line, indented")
		}
		p.fail("unexpected %s after the value", p.what())
	}
	if p.cur() == '#' && !isBlank(p.src[p.i-1]) {
		p.fail("a comment needs a space before its #")
	}
}

func (p *parser) node(kind Kind, line, col int) *Node {
	p.nodes++
	if p.nodes > p.l.Nodes {
		p.failAt(line, col, "the document has more than %d values", p.l.Nodes)
	}
	return &Node{Kind: kind, Line: line, Col: col}
}

func (p *parser) enter(line, col int) {
	p.depth++
	if p.depth > p.l.Depth {
		p.failAt(line, col, "collections are nested more than %d levels deep", p.l.Depth)
	}
}

// refuseIndicator refuses the YAML features the subset leaves out, at the
// indicator that starts one.
func (p *parser) refuseIndicator() {
	switch c := p.cur(); c {
	case '&':
		p.fail("YAML anchors (&name) are not accepted")
	case '*':
		p.fail("YAML aliases (*name) are not accepted")
	case '!':
		p.fail("YAML tags (!tag) are not accepted")
	case '%':
		p.fail("YAML directives (%%) are not accepted")
	case '@', '`':
		p.fail("%q is reserved in YAML: quote the value", c)
	case '?':
		if p.blankAt(1) {
			p.fail("complex mapping keys (? key) are not accepted")
		}
	}
}

// block parses the node at the cursor, the first content of its line or
// what follows "- " or "key: ", whose parent is indented by parent
// spaces. With mapOK a scalar followed by ": " starts a block mapping.
func (p *parser) block(parent int, mapOK bool) *Node {
	ind := p.col - 1
	line, col := p.line, p.col
	p.refuseIndicator()
	switch c := p.cur(); {
	case c == '-' && p.blankAt(1):
		if !mapOK {
			p.fail("a block sequence cannot start on the line of its key: put it on the next line")
		}
		return p.blockSeq(ind)
	case c == '|' || c == '>':
		return p.blockScalar(parent)
	case c == '[' || c == '{':
		n := p.flow()
		p.skipSpaces()
		if p.cur() == ':' {
			p.failAt(line, col, "complex mapping keys (a collection as a key) are not accepted")
		}
		p.endOfLine()
		return n
	}
	key, plainEnd := p.scalar(false)
	p.skipSpaces()
	if p.cur() == ':' && !p.blankAt(1) && key.Style != Plain {
		p.fail("a space must follow the colon after a key")
	}
	if p.cur() == ':' && p.blankAt(1) {
		if !mapOK {
			p.fail("a mapping cannot start on the line of a key: put it on the next line, indented")
		}
		if key.Line != p.line {
			p.failAt(line, col, "a mapping key must fit on one line")
		}
		return p.blockMap(ind, key)
	}
	if plainEnd {
		p.continuePlain(key, parent, false)
	}
	p.endOfLine()
	return key
}

// scalar reads a quoted scalar, or one line of a plain one; plainEnd
// reports a plain scalar that reached the end of its line, which the
// next lines may continue.
func (p *parser) scalar(flow bool) (n *Node, plainEnd bool) {
	n = p.node(Scalar, p.line, p.col)
	switch p.cur() {
	case '"', '\'':
		p.quoted(n)
		return n, false
	case '|', '>':
		p.fail("a block scalar (%c) cannot be inside [...] or {...}", p.cur())
	case ',', ']', '}':
		p.fail("unexpected %s", p.what())
	case '-', ':':
		if p.blankAt(1) || flow && strings.IndexByte(",[]{}", p.peek(1)) >= 0 {
			if p.cur() == ':' {
				p.fail("a null key (nothing before the colon)")
			}
			p.fail("unexpected %s", p.what())
		}
	case '#':
		p.fail("unexpected comment")
	}
	n.Text = p.plainLine(flow)
	n.raw = n.Text
	p.resolve(n)
	return n, p.eof() || p.cur() == '\n'
}

// plainLine reads a plain scalar up to the end of its line, a comment,
// ": " or (in a flow collection) a flow indicator.
func (p *parser) plainLine(flow bool) string {
	start, end := p.i, p.i
	for !p.eof() {
		c := p.cur()
		if c == '\n' {
			break
		}
		if c == ':' && (p.blankAt(1) || flow && strings.IndexByte(",[]{}", p.peek(1)) >= 0) {
			break
		}
		if flow && strings.IndexByte(",[]{}", c) >= 0 {
			break
		}
		if c == '#' && p.i > start && isBlank(p.src[p.i-1]) {
			break
		}
		p.adv()
		if c != ' ' && c != '\t' {
			end = p.i
		}
	}
	return string(p.src[start:end])
}

// continuePlain folds the lines that continue a plain scalar into it:
// each more indented than parent (in a block), not a comment.
func (p *parser) continuePlain(n *Node, parent int, flow bool) {
	var b strings.Builder
	b.WriteString(n.raw)
	more := false
	for {
		si, sl, sc, sf := p.i, p.line, p.col, p.fresh
		empties := -1
		for !p.eof() && (p.cur() == '\n' || p.cur() == ' ' || p.cur() == '\t') {
			if p.cur() == '\n' {
				empties++
			}
			p.adv()
		}
		stop := p.eof() || p.cur() == '#' || p.marker("---") || p.marker("...") ||
			!flow && p.col-1 <= parent ||
			flow && strings.IndexByte(",[]{}:", p.cur()) >= 0
		if stop {
			p.i, p.line, p.col, p.fresh = si, sl, sc, sf
			break
		}
		seg := p.plainLine(flow)
		if seg == "" {
			p.i, p.line, p.col, p.fresh = si, sl, sc, sf
			break
		}
		if empties == 0 {
			b.WriteByte(' ')
		} else {
			b.WriteString(strings.Repeat("\n", empties))
		}
		b.WriteString(seg)
		more = true
		if p.eof() || p.cur() != '\n' {
			break
		}
	}
	if more {
		n.Text = b.String()
		n.raw = n.Text
		p.resolve(n)
	}
}

// quoted reads a single- or double-quoted scalar, which may span lines.
func (p *parser) quoted(n *Node) {
	q := p.cur()
	n.Style = SingleQuoted
	if q == '"' {
		n.Style = DoubleQuoted
	}
	p.adv()
	var b []byte
	keep := 0 // b[:keep] is not trailing white space a line break trims
	for {
		if p.eof() {
			p.failAt(n.Line, n.Col, "a quoted string that does not end")
		}
		c := p.cur()
		switch {
		case c == q && q == '\'' && p.peek(1) == '\'':
			b = append(b, '\'')
			p.advN(2)
			keep = len(b)
		case c == q:
			p.adv()
			n.Text = string(b)
			return
		case c == '\\' && q == '"':
			p.adv()
			if p.cur() == '\n' {
				// An escaped line break: nothing, but the empty lines
				// after it are line feeds.
				p.adv()
				for p.skipSpaces(); p.cur() == '\n'; p.skipSpaces() {
					b = append(b, '\n')
					p.adv()
				}
				keep = len(b)
				continue
			}
			b = p.escape(b)
			keep = len(b)
		case c == '\n':
			b = b[:keep]
			empties := 0
			p.adv()
			for {
				p.skipSpaces()
				if p.cur() != '\n' {
					break
				}
				empties++
				p.adv()
			}
			if p.marker("---") || p.marker("...") {
				p.fail("a document marker inside a quoted string")
			}
			if empties == 0 {
				b = append(b, ' ')
			} else {
				b = append(b, strings.Repeat("\n", empties)...)
			}
			keep = len(b)
		default:
			start := p.i
			p.adv()
			for !p.eof() && p.src[p.i]&0xc0 == 0x80 {
				p.adv()
			}
			b = append(b, p.src[start:p.i]...)
			if c != ' ' && c != '\t' {
				keep = len(b)
			}
		}
	}
}

// escape reads the escape after a backslash in a double-quoted scalar.
func (p *parser) escape(b []byte) []byte {
	c := p.cur()
	line, col := p.line, p.col-1
	if p.eof() {
		p.failAt(line, col, "a quoted string that does not end")
	}
	simple := map[byte]string{'0': "\x00", 'a': "\a", 'b': "\b", 't': "\t", '\t': "\t", 'n': "\n", 'v': "\v",
		'f': "\f", 'r': "\r", 'e': "\x1b", ' ': " ", '"': "\"", '/': "/", '\\': "\\",
		'N': "\u0085", '_': "\u00a0", 'L': "\u2028", 'P': "\u2029"}
	if s, ok := simple[c]; ok {
		p.adv()
		return append(b, s...)
	}
	digits := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
	if digits == 0 {
		p.failAt(line, col, "unknown escape \\%c", c)
	}
	p.adv()
	if p.i+digits > len(p.src) {
		p.failAt(line, col, "escape \\%c needs %d hexadecimal digits", c, digits)
	}
	v, err := strconv.ParseUint(string(p.src[p.i:p.i+digits]), 16, 32)
	if err != nil {
		p.failAt(line, col, "escape \\%c needs %d hexadecimal digits", c, digits)
	}
	r := rune(v)
	p.advN(digits)
	if c == 'u' && r >= 0xd800 && r < 0xdc00 && p.cur() == '\\' && p.peek(1) == 'u' && p.i+6 <= len(p.src) {
		// A UTF-16 surrogate pair, as JSON writes characters past U+FFFF.
		if lo, err := strconv.ParseUint(string(p.src[p.i+2:p.i+6]), 16, 32); err == nil && lo >= 0xdc00 && lo < 0xe000 {
			r = utf16.DecodeRune(r, rune(lo))
			p.advN(6)
		}
	}
	if !utf8.ValidRune(r) {
		p.failAt(line, col, "escape \\%c%X is not a character", c, v)
	}
	return utf8.AppendRune(b, r)
}

// blockScalar reads a literal (|) or folded (>) block scalar whose parent
// is indented by parent spaces.
func (p *parser) blockScalar(parent int) *Node {
	n := p.node(Scalar, p.line, p.col)
	n.Style = Literal
	if p.cur() == '>' {
		n.Style = Folded
	}
	p.adv()
	chomp, indent := byte(0), 0
	for !p.eof() && !isBlank(p.cur()) {
		switch c := p.cur(); {
		case (c == '+' || c == '-') && chomp == 0:
			chomp = c
		case c >= '1' && c <= '9' && indent == 0:
			indent = max(parent, 0) + int(c-'0')
		default:
			p.fail("a block scalar's header is | or > with an optional + or - and indentation digit")
		}
		p.adv()
	}
	p.endOfLine()
	for !p.eof() && p.cur() != '\n' {
		p.adv()
	}
	if !p.eof() {
		p.adv()
	}
	type textLine struct {
		text string
		more bool // more indented (or starting with a tab): kept as is when folded
	}
	var lines []textLine
	lastBreak := false // the last text line ends with a line break
	for !p.eof() {
		si, sl, sc, sf := p.i, p.line, p.col, p.fresh
		spaces := 0
		for p.cur() == ' ' && (indent == 0 || spaces < indent) {
			spaces++
			p.adv()
		}
		if p.eof() || p.cur() == '\n' {
			lines = append(lines, textLine{})
			if !p.eof() {
				p.adv()
			}
			continue
		}
		if indent == 0 {
			if spaces <= parent {
				p.i, p.line, p.col, p.fresh = si, sl, sc, sf
				break
			}
			indent = spaces
		} else if spaces < indent {
			p.i, p.line, p.col, p.fresh = si, sl, sc, sf
			break
		}
		if indent == 0 || p.col == 1 && (p.marker("---") || p.marker("...")) {
			p.i, p.line, p.col, p.fresh = si, sl, sc, sf
			break
		}
		start := p.i
		for !p.eof() && p.cur() != '\n' {
			p.adv()
		}
		text := string(p.src[start:p.i])
		lines = append(lines, textLine{text: text, more: text[0] == ' ' || text[0] == '\t'})
		lastBreak = !p.eof()
		if !p.eof() {
			p.adv()
		}
	}
	// The content ends at the last line with text; the empty lines after
	// it are what chomping keeps or drops.
	last := len(lines) - 1
	for last >= 0 && lines[last].text == "" {
		last--
	}
	trailing := len(lines) - 1 - last
	var b strings.Builder
	empties, prevMore := 0, true
	for i, l := range lines[:last+1] {
		if l.text == "" {
			empties++
			continue
		}
		switch {
		case i == empties: // the first text line
			b.WriteString(strings.Repeat("\n", empties))
		case n.Style == Literal || prevMore || l.more:
			b.WriteString(strings.Repeat("\n", empties+1))
		case empties == 0:
			b.WriteByte(' ')
		default:
			b.WriteString(strings.Repeat("\n", empties))
		}
		b.WriteString(l.text)
		empties, prevMore = 0, l.more
	}
	switch {
	case chomp == '-':
	case chomp == '+':
		if last >= 0 && lastBreak {
			b.WriteByte('\n')
		}
		b.WriteString(strings.Repeat("\n", trailing))
	case last >= 0 && lastBreak:
		b.WriteByte('\n')
	}
	n.Text = b.String()
	p.fresh = true
	return n
}

// blockSeq reads a block sequence whose entries' dashes are at column
// ind+1.
func (p *parser) blockSeq(ind int) *Node {
	seq := p.node(Sequence, p.line, p.col)
	p.enter(p.line, p.col)
	for {
		dl, dc := p.line, p.col
		p.path = append(p.path, strconv.Itoa(len(seq.Items)))
		p.adv() // the dash
		p.skipSpaces()
		var item *Node
		if p.eof() || p.cur() == '\n' || p.cur() == '#' {
			p.skipBlank()
			if !p.eof() && p.col-1 > ind && !p.marker("---") && !p.marker("...") {
				item = p.block(ind, true)
			} else {
				if !p.eof() && p.col-1 == ind && (p.cur() != '-' || !p.blankAt(1)) && !p.marker("---") && !p.marker("...") {
					// goccy and libyaml read the line as the entry's.
					p.failAt(dl, dc, "an empty sequence entry followed by a line at its dash's column: write - null, or indent the entry's content")
				}
				item = p.node(Scalar, dl, dc+2)
				item.Tag = Null
			}
		} else {
			item = p.block(ind, true)
		}
		seq.Items = append(seq.Items, item)
		p.path = p.path[:len(p.path)-1]
		p.skipBlank()
		if p.eof() || p.col-1 < ind || p.marker("---") || p.marker("...") {
			break
		}
		if p.col-1 > ind {
			p.fail("unexpected indentation: not an entry of the sequence at line %d, nor of a collection inside it", seq.Line)
		}
		if p.cur() != '-' || !p.blankAt(1) {
			break
		}
	}
	p.depth--
	return seq
}

// blockMap reads a block mapping whose keys are at column ind+1, from its
// first key, with the cursor at its ':'.
func (p *parser) blockMap(ind int, key *Node) *Node {
	m := p.node(Mapping, key.Line, key.Col)
	p.enter(key.Line, key.Col)
	seen := map[string]*Node{}
	for {
		p.checkKey(key, seen)
		p.path = append(p.path, key.Text)
		cl, cc := p.line, p.col
		p.adv() // the colon
		p.skipSpaces()
		var value *Node
		if p.eof() || p.cur() == '\n' || p.cur() == '#' {
			p.skipBlank()
			switch {
			case p.eof() || p.marker("---") || p.marker("..."):
			case p.col-1 > ind:
				value = p.block(ind, true)
			case p.col-1 == ind && p.cur() == '-' && p.blankAt(1):
				value = p.blockSeq(ind)
			}
			if value == nil {
				value = p.node(Scalar, cl, cc+2)
				value.Tag = Null
			}
		} else {
			value = p.block(ind, false)
		}
		m.Pairs = append(m.Pairs, Pair{Key: key, Value: value})
		p.path = p.path[:len(p.path)-1]
		p.skipBlank()
		if p.eof() || p.col-1 < ind || p.marker("---") || p.marker("...") {
			break
		}
		if p.col-1 > ind {
			p.fail("unexpected indentation: not a key of the mapping at line %d, nor inside one of its values", m.Line)
		}
		if p.cur() == '-' && p.blankAt(1) {
			p.fail("a sequence entry where a key of the mapping at line %d was expected", m.Line)
		}
		key = p.key(false)
	}
	p.depth--
	return m
}

// key reads a mapping key and leaves the cursor at its ':'.
func (p *parser) key(flow bool) *Node {
	p.refuseIndicator()
	if c := p.cur(); c == '[' || c == '{' {
		p.fail("complex mapping keys (a collection as a key) are not accepted")
	}
	line, col := p.line, p.col
	k, _ := p.scalar(flow)
	if k.Line != p.line {
		p.failAt(line, col, "a mapping key must fit on one line")
	}
	p.skipSpaces()
	if p.cur() == ':' && !flow && !p.blankAt(1) && k.Style != Plain {
		p.fail("a space must follow the colon after a key")
	}
	if p.cur() != ':' || k.Style == Plain && !p.blankAt(1) && (!flow || strings.IndexByte(",]}", p.peek(1)) < 0) {
		p.failAt(line, col, "want key: value")
	}
	return k
}

// checkKey refuses a merge key, a null key, an over-long key and a key
// given twice. A plain key is its text as written ("0x10", not "16").
func (p *parser) checkKey(k *Node, seen map[string]*Node) {
	if k.Style == Plain {
		if k.Tag == Null {
			p.failAt(k.Line, k.Col, "a null key (%q)", k.raw)
		}
		if k.Tag != Str && k.Text != k.raw {
			p.failAt(k.Line, k.Col, "the key %s reads as %s %s: quote it", k.raw, k, k.Text)
		}
		k.Text = k.raw
	}
	if k.Style == Plain && k.Text == "<<" {
		p.failAt(k.Line, k.Col, "YAML merge keys (<<) are not accepted")
	}
	if len(k.Text) > p.l.KeyBytes {
		p.failAt(k.Line, k.Col, "a key of more than %d bytes", p.l.KeyBytes)
	}
	if first, dup := seen[k.Text]; dup {
		p.failAt(k.Line, k.Col, "key %q given twice (first at %d:%d)", k.Text, first.Line, first.Col)
	}
	seen[k.Text] = k
}

// flow reads a flow collection, [...] or {...}, which may span lines.
func (p *parser) flow() *Node {
	open := p.cur()
	kind := Sequence
	if open == '{' {
		kind = Mapping
	}
	n := p.node(kind, p.line, p.col)
	n.Flow = true
	p.enter(p.line, p.col)
	p.flows++
	p.adv()
	var seen map[string]*Node
	if kind == Mapping {
		seen = map[string]*Node{}
	}
	for {
		p.skipBlank()
		if p.eof() {
			p.failAt(n.Line, n.Col, "%c without its closing %c", open, map[byte]byte{'[': ']', '{': '}'}[open])
		}
		if c := p.cur(); c == ']' && kind == Sequence || c == '}' && kind == Mapping {
			p.adv()
			break
		}
		if kind == Sequence {
			p.path = append(p.path, strconv.Itoa(len(n.Items)))
			n.Items = append(n.Items, p.flowNode())
			p.path = p.path[:len(p.path)-1]
			p.skipBlank()
			if p.cur() == ':' {
				p.fail("a key: value pair inside [...]: write it as {key: value}")
			}
		} else {
			k := p.key(true)
			p.checkKey(k, seen)
			p.path = append(p.path, k.Text)
			cl, cc := p.line, p.col
			p.adv()
			p.skipBlank()
			var v *Node
			if c := p.cur(); c == ',' || c == '}' {
				v = p.node(Scalar, cl, cc+1)
				v.Tag = Null
			} else {
				v = p.flowNode()
			}
			n.Pairs = append(n.Pairs, Pair{Key: k, Value: v})
			p.path = p.path[:len(p.path)-1]
			p.skipBlank()
		}
		switch c := p.cur(); {
		case c == ',':
			p.adv()
			p.skipBlank()
			if p.cur() == ',' {
				p.fail("an empty entry (two commas)")
			}
		case c == ']' && kind == Sequence || c == '}' && kind == Mapping:
		case p.eof():
		default:
			p.fail("unexpected %s: want , or %c", p.what(), map[byte]byte{'[': ']', '{': '}'}[open])
		}
	}
	p.depth--
	p.flows--
	return n
}

// flowNode reads a value inside a flow collection.
func (p *parser) flowNode() *Node {
	p.refuseIndicator()
	switch p.cur() {
	case '[', '{':
		return p.flow()
	case '?':
		p.fail("complex mapping keys (? key) are not accepted")
	}
	n, plainEnd := p.scalar(true)
	if plainEnd {
		p.continuePlain(n, -1, true)
	}
	return n
}

// resolve gives a plain scalar its core-schema tag, and a number its
// canonical text; it refuses numbers whose meaning differs between YAML
// 1.1 and 1.2, and numbers out of range.
func (p *parser) resolve(n *Node) {
	n.Tag = Str
	s := n.Text
	switch s {
	case "", "~", "null", "Null", "NULL":
		n.Tag, n.Text = Null, ""
		return
	case "true", "True", "TRUE":
		n.Tag, n.Text = Bool, "true"
		return
	case "false", "False", "FALSE":
		n.Tag, n.Text = Bool, "false"
		return
	case ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF":
		n.Tag, n.Text = Float, "+Inf"
		return
	case "-.inf", "-.Inf", "-.INF":
		n.Tag, n.Text = Float, "-Inf"
		return
	case ".nan", ".NaN", ".NAN":
		n.Tag, n.Text = Float, "NaN"
		return
	}
	c := s[0]
	if (c < '0' || c > '9') && c != '-' && c != '+' && c != '.' {
		return
	}
	digits := strings.TrimLeft(s, "+-")
	if len(s)-len(digits) > 1 {
		return
	}
	switch {
	case isDigits(digits, 10):
		if len(digits) > 1 && digits[0] == '0' {
			p.failAt(n.Line, n.Col, "%s: a number with a leading zero is octal in YAML 1.1 and decimal in 1.2: quote it, or write it without the zero (or as 0o...)", s)
		}
		s = strings.TrimPrefix(s, "+")
		if _, err := strconv.ParseInt(s, 10, 64); err != nil {
			if _, err := strconv.ParseUint(s, 10, 64); err != nil {
				p.failAt(n.Line, n.Col, "%s: integer out of range", n.Text)
			}
		}
		n.Tag, n.Text = Int, s
	case s != digits:
		// A sign before 0x or 0o: a string in the core schema.
		if isFloat(digits) {
			p.float(n)
		} else if strings.HasPrefix(digits, "0x") || strings.HasPrefix(digits, "0o") || strings.HasPrefix(digits, "0b") || looksNumeric(digits) {
			p.failAt(n.Line, n.Col, "%s: not a number in YAML 1.2, but one in YAML 1.1: quote it", s)
		}
	case len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o') && isDigits(s[2:], map[byte]int{'x': 16, 'o': 8}[s[1]]):
		v, err := strconv.ParseUint(s[2:], map[byte]int{'x': 16, 'o': 8}[s[1]], 64)
		if err != nil {
			p.failAt(n.Line, n.Col, "%s: integer out of range", s)
		}
		n.Tag, n.Text = Int, strconv.FormatUint(v, 10)
	case isFloat(s):
		p.float(n)
	case strings.HasPrefix(s, "0b") || looksNumeric(s):
		p.failAt(n.Line, n.Col, "%s: not a number in YAML 1.2, but one in YAML 1.1: quote it", s)
	}
}

// looksNumeric reports the YAML 1.1 number forms the core schema reads
// as strings: digit separators (1_000, 1_0.5) and base 60 (1:30, 1:30.5).
func looksNumeric(s string) bool {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return false
	}
	parts := strings.Split(s, ":")
	head := strings.ReplaceAll(parts[0], "_", "")
	if len(parts) == 1 {
		ip, fp, _ := strings.Cut(head, ".")
		return strings.Contains(s, "_") && isDigits10(ip) && (fp == "" || isDigits10(fp))
	}
	if !isDigits10(head) {
		return false
	}
	for i, part := range parts[1:] {
		if i == len(parts)-2 {
			part, _, _ = strings.Cut(part, ".")
		}
		if part == "" || len(part) > 2 || !isDigits10(part) || part[0] > '5' && len(part) == 2 {
			return false
		}
	}
	return true
}

func (p *parser) float(n *Node) {
	if m, _, _ := strings.Cut(strings.ToLower(n.Text), "e"); len(m) < len(n.Text) && !strings.Contains(m, ".") {
		p.failAt(n.Line, n.Col, "%s: a number in YAML 1.2 and JSON, a string in YAML 1.1: write it with a dot (1.0e3) or quote it", n.Text)
	}
	f, err := strconv.ParseFloat(n.Text, 64)
	if err != nil || math.IsInf(f, 0) {
		p.failAt(n.Line, n.Col, "%s: number out of range", n.Text)
	}
	// Canonical, and read back the same: 1.0e+21, not 1e+21.
	t := strconv.FormatFloat(f, 'g', -1, 64)
	if m, e, ok := strings.Cut(t, "e"); ok && !strings.Contains(m, ".") {
		t = m + ".0e" + e
	}
	n.Tag, n.Text = Float, t
}

func isDigits(s string, base int) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		var d int
		switch {
		case c >= '0' && c <= '9':
			d = int(c - '0')
		case c >= 'a' && c <= 'f':
			d = int(c-'a') + 10
		case c >= 'A' && c <= 'F':
			d = int(c-'A') + 10
		default:
			return false
		}
		if d >= base {
			return false
		}
	}
	return true
}

// isFloat matches the core schema's floats:
// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
func isFloat(s string) bool {
	s = strings.TrimLeft(s, "+-")
	mant, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
	ip, fp, dot := strings.Cut(mant, ".")
	switch {
	case !dot && !isDigits10(ip):
		return false
	case dot && ip == "" && !isDigits10(fp):
		return false
	case dot && ip != "" && (!isDigits10(ip) || fp != "" && !isDigits10(fp)):
		return false
	}
	if hasExp {
		if exp != "" && (exp[0] == '+' || exp[0] == '-') {
			exp = exp[1:]
		}
		return isDigits10(exp)
	}
	return true
}

func isDigits10(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

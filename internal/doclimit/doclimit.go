// Package doclimit bounds the YAML and JSON documents agentbox reads from API
// callers and operators (policies, the agents file, the secrets file) before
// any parser sees them.
//
// A YAML parser's memory and time are not proportional to its input: 200 KB
// of nested brackets made the daemon's parser (github.com/goccy/go-yaml) take
// more than 24 GiB, because its cost grows with the square of the nesting
// depth. Check is a single linear pass over the bytes, in constant memory,
// that measures what makes parsers blow up (size, nesting depth, token
// count, aliases) and refuses the document, with its line and column, before
// it is parsed. JSON is read as the YAML it is.
//
// The scan follows the tokenizer of the parser the documents go to: a
// bracket or a dash inside a quoted string, a comment, a block scalar or a
// plain scalar is content, not structure, exactly when the tokenizer says
// so. FuzzCheck holds it to that: whatever Check accepts, the tokenizer
// finds no deeper nesting and no more tokens than the limits.
package doclimit

import (
	"fmt"
	"unicode/utf8"
)

// Limits bound one document. A zero field takes the value of Default.
type Limits struct {
	// Bytes is the largest document.
	Bytes int
	// Depth bounds nesting: of flow collections ([ and {) with the
	// sequence entries ("- ") written inside them, and, for block
	// collections, the number of distinct indentation columns at which
	// their keys and entries start.
	Depth int
	// Tokens bounds the number of scalars and indicators (brackets,
	// commas, colons, dashes, anchors, tags, comments, document markers).
	Tokens int
	// Paths bounds the total length of the paths of the document's
	// tokens: the keys and indexes from the root to each, which parsers
	// build for every value. A long key over many values is what it
	// stops. Each token counts its path four times, each level of it 8
	// bytes besides its key.
	Paths int
}

// Default is what agentbox accepts in every document: far above any real
// policy, agents or secrets file, and low enough that the parsers' cost
// stays within a few tens of megabytes and milliseconds.
var Default = Limits{Bytes: 1 << 20, Depth: 64, Tokens: 1 << 16, Paths: 1 << 24}

func (l Limits) withDefaults() Limits {
	if l.Bytes <= 0 {
		l.Bytes = Default.Bytes
	}
	if l.Depth <= 0 {
		l.Depth = Default.Depth
	}
	if l.Tokens <= 0 {
		l.Tokens = Default.Tokens
	}
	if l.Paths <= 0 {
		l.Paths = Default.Paths
	}
	return l
}

// Error is a document refused by Check, at the place where it went over a
// limit.
type Error struct {
	Line, Column int // 1-based
	Message      string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d:%d: %s", e.Line, e.Column, e.Message)
}

// Check returns nil when data is within l, and an *Error saying which limit
// it exceeds, and where, otherwise.
func Check(data []byte, l Limits) error {
	l = l.withDefaults()
	if len(data) > l.Bytes {
		return &Error{Line: 1, Column: 1, Message: fmt.Sprintf("the document is %d bytes; the limit is %d", len(data), l.Bytes)}
	}
	s := &scanner{l: l, src: data, line: 1, col: 1, lineStart: true, columns: map[int]bool{}}
	return s.run()
}

// scanner mirrors, in constant memory, the state of the YAML tokenizer that
// decides what is structure: whether a plain scalar is pending (its
// "buffer"), its flow counters, the column of the last block indicator or
// key, and the indentation state of the line.
type scanner struct {
	l   Limits
	src []byte
	i   int

	line, col int  // of src[i]; columns count characters
	lineStart bool // only indentation so far on this line
	indent    int  // spaces before the first character of the line

	plain      bool // a plain scalar is pending
	plainCol   int  // the column it started at
	plainStart int  // and its offset
	quoteCol   int  // column of the last token, when it was a quoted scalar (else 0)
	quoteLen   int  // and its length
	colon      bool // the last token was a mapping value indicator

	lastDelim  int  // column of the last block entry, key indicator or key
	first      bool // the current character is the first of its line
	up         bool // ... and it is right of lastDelim
	block      bool // in a block scalar (or a plain scalar read as folded text)
	blockFirst int  // the column of its content, once known (else 0)
	name       bool // in an anchor or tag name, which whitespace ends
	directive  bool // on a %directive line

	seqs, maps int         // the tokenizer's flow counters (seqs may go negative)
	open       []flowLevel // the open flow collections, innermost last
	entries    int         // sequence entries open in the current flow entry
	nested     int         // len(open) + the entries held in open

	columns map[int]bool // columns of block structure
	tokens  int

	// The path of the current token: the keys of the open block
	// collections that can hold it and of the open flow collections.
	blockKeys []blockKey
	pathLen   int  // the keys' lengths, in blockKeys and open
	paths     int  // the paths of the tokens so far
	keyCol    int  // a key indicator ("? ") waiting for its key, at this column
	keyFlow   bool // ... inside a flow collection
}

type flowLevel struct {
	entries int // the entries open around the collection
	key     int // the length of the key of its current entry
}

type blockKey struct {
	col, len int
	key      bool // a key, or else a sequence entry or key indicator
}

func (s *scanner) errorf(format string, args ...any) error {
	return &Error{Line: s.line, Column: s.col, Message: fmt.Sprintf(format, args...)}
}

func (s *scanner) flow() bool { return s.seqs > 0 || s.maps > 0 }

// peek returns the byte n bytes ahead, or 0 past the end.
func (s *scanner) peek(n int) byte {
	if s.i+n < len(s.src) {
		return s.src[s.i+n]
	}
	return 0
}

func isNewline(c byte) bool { return c == '\n' || c == '\r' }

// blankAfter reports whether the byte n bytes ahead ends a token: end of
// input, space, tab or line break.
func (s *scanner) blankAfter(n int) bool {
	c := s.peek(n)
	return s.i+n >= len(s.src) || c == ' ' || c == '\t' || isNewline(c)
}

// advance moves past n characters on the current line. Characters are
// counted as the tokenizer counts them: a byte that is not UTF-8 is one.
func (s *scanner) advance(n int) {
	for ; n > 0 && s.i < len(s.src); n-- {
		_, size := utf8.DecodeRune(s.src[s.i:])
		s.i += size
		s.col++
	}
}

// newline moves past a line break (CR, LF or CRLF).
func (s *scanner) newline() {
	if s.src[s.i] == '\r' && s.peek(1) == '\n' {
		s.i++
	}
	s.i++
	s.line++
	s.col, s.indent = 1, 0
	s.lineStart = true
	if s.name || s.directive {
		s.plain = false
	}
	s.name, s.directive = false, false
}

// token counts one token and starts a new one: a pending plain scalar
// ends.
func (s *scanner) token() error {
	if err := s.endPlain(); err != nil {
		return err
	}
	s.quoteCol, s.colon = 0, false
	s.tokens++
	if s.tokens > s.l.Tokens {
		return s.errorf("the document has more than %d tokens (scalars, brackets, commas, colons, dashes, ...)", s.l.Tokens)
	}
	return s.charge(0)
}

// charge adds the path of a token, with extra bytes of its own, to the
// total. A parser makes up to four nodes of a token (a key, its value and
// the pair), each with the path.
func (s *scanner) charge(extra int) error {
	s.paths += 4 * (s.pathLen + extra + 8*(1+len(s.blockKeys)+len(s.open)))
	if s.paths > s.l.Paths {
		return s.errorf("the paths of the document's values (their keys from the root) add up to more than %d bytes: too many values under long keys", s.l.Paths)
	}
	return nil
}

// endPlain ends a pending plain scalar.
func (s *scanner) endPlain() error {
	if !s.plain {
		return nil
	}
	s.plain = false
	return s.endScalar(decodedLen(s.src[s.plainStart:s.i]))
}

// endScalar accounts for a scalar of n bytes that just ended: it is in its
// own path when it is a key, and a key indicator waiting for its key takes
// it.
func (s *scanner) endScalar(n int) error {
	if s.keyCol != 0 {
		if s.keyFlow {
			s.flowKey(n)
		} else {
			s.blockPath(s.keyCol, n, true)
		}
		s.keyCol = 0
	}
	return s.charge(n)
}

// blockPath records a block key (or, with key false, a sequence entry or
// key indicator) of n bytes at col: it ends the block collections right
// of col and, for a key, those at col; what is left may hold it.
func (s *scanner) blockPath(col, n int, key bool) {
	for len(s.blockKeys) > 0 {
		top := s.blockKeys[len(s.blockKeys)-1]
		if top.col < col || top.col == col && !key && top.key {
			break
		}
		s.pathLen -= top.len
		s.blockKeys = s.blockKeys[:len(s.blockKeys)-1]
	}
	s.blockKeys = append(s.blockKeys, blockKey{col: col, len: n, key: key})
	s.pathLen += n
}

// flowKey records the key of the current entry of the innermost flow
// collection (0: none, after a comma).
func (s *scanner) flowKey(n int) {
	if k := len(s.open); k > 0 {
		s.pathLen += n - s.open[k-1].key
		s.open[k-1].key = n
	}
}

// consume counts a token of n bytes at the current one and moves past it.
func (s *scanner) consume(n int) error {
	if err := s.token(); err != nil {
		return err
	}
	s.advance(n)
	return nil
}

// content consumes one byte of a plain scalar, starting one if none is
// pending.
func (s *scanner) content() error {
	if !s.plain {
		col := s.col
		if err := s.token(); err != nil {
			return err
		}
		s.plain, s.plainCol, s.plainStart = true, col, s.i
	}
	s.advance(1)
	return nil
}

// structure records a column at which a block collection may start.
func (s *scanner) structure(col int) error {
	if s.flow() || s.columns[col] {
		return nil
	}
	s.columns[col] = true
	if len(s.columns) > s.l.Depth {
		return s.errorf("block collections are nested more than %d levels deep (keys and entries start at %d different columns)", s.l.Depth, len(s.columns))
	}
	return nil
}

func (s *scanner) tooDeep() error {
	return s.errorf("collections are nested more than %d levels deep", s.l.Depth)
}

// openFlow starts a flow collection.
func (s *scanner) openFlow() error {
	if len(s.open) >= s.l.Depth {
		return s.tooDeep()
	}
	s.open = append(s.open, flowLevel{entries: s.entries})
	s.nested += 1 + s.entries
	s.entries = 0
	if s.nested > s.l.Depth {
		return s.tooDeep()
	}
	return nil
}

// closeFlow ends the innermost flow collection, if any is open.
func (s *scanner) closeFlow() {
	if n := len(s.open); n > 0 {
		s.entries = s.open[n-1].entries
		s.pathLen -= s.open[n-1].key
		s.open = s.open[:n-1]
		s.nested -= 1 + s.entries
	}
}

// entry counts a sequence entry ("- ") or, with key, a key indicator ("? "):
// inside a flow collection each nests what follows it one level deeper.
func (s *scanner) entry(col int, key bool) error {
	s.lastDelim = col
	if key {
		s.keyCol, s.keyFlow = col, s.flow()
	}
	if s.flow() {
		s.entries++
		if s.nested+s.entries > s.l.Depth {
			return s.tooDeep()
		}
		return nil
	}
	s.blockPath(col, 0, false)
	return s.structure(col)
}

func (s *scanner) run() error {
	for s.i < len(s.src) {
		c := s.src[s.i]
		if isNewline(c) {
			s.newline()
			continue
		}
		if s.lineStart {
			if c == ' ' || c == '\t' {
				if c == ' ' {
					s.indent++
				}
				s.advance(1)
				continue
			}
			if err := s.startLine(c); err != nil {
				return err
			}
			if s.block {
				s.skipLine()
				continue
			}
		}
		if err := s.step(c); err != nil {
			return err
		}
		s.first = false
	}
	return s.endPlain()
}

// startLine updates the state at the first character of a line that is not
// blank, as the tokenizer does: a line starting at or left of the last
// block indicator or key ends a pending plain scalar and a block scalar.
//
// In a block scalar, the first content line sets the content's column, and
// the tokenizer takes the column left of it for the last delimiter: the
// scalar ends at the first line that starts left of its content (or at a
// document marker).
func (s *scanner) startLine(c byte) error {
	s.lineStart, s.first = false, true
	s.up = s.lastDelim != 0 && s.col > s.lastDelim
	if s.lastDelim != 0 && !s.up || s.block && s.col == 1 && s.marker() {
		s.block = false
		if err := s.endPlain(); err != nil {
			return err
		}
	}
	if s.block {
		if s.blockFirst == 0 {
			s.blockFirst = s.col
		}
		if s.blockFirst > 1 {
			s.lastDelim = s.blockFirst - 1
		}
		return nil
	}
	if c == '#' {
		return nil
	}
	return s.structure(s.col)
}

// marker reports a document marker ("---" or "...") at the current byte.
func (s *scanner) marker() bool {
	rest := s.src[s.i:]
	if len(rest) < 3 || string(rest[:3]) != "---" && string(rest[:3]) != "..." {
		return false
	}
	return len(rest) == 3 || rest[3] == ' ' || rest[3] == '\t' || isNewline(rest[3])
}

// decodedLen is the length of b as a Go string decoded from it: a byte
// that is not UTF-8 becomes U+FFFD, three bytes.
func decodedLen(b []byte) int {
	n := 0
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			n += 3
		} else {
			n += size
		}
		b = b[size:]
	}
	return n
}

// restHasText reports whether the line has more than spaces and tabs after
// the current character.
func (s *scanner) restHasText() bool {
	for j := s.i + 1; j < len(s.src) && !isNewline(s.src[j]); j++ {
		if s.src[j] != ' ' && s.src[j] != '\t' {
			return true
		}
	}
	return false
}

// skipLine moves to the end of the line (the line break stays).
func (s *scanner) skipLine() {
	for s.i < len(s.src) && !isNewline(s.src[s.i]) {
		s.advance(1)
	}
}

// step consumes one token's worth (or one byte of a plain scalar) at c.
func (s *scanner) step(c byte) error {
	col := s.col
	switch c {
	case '{', '[':
		if s.plain && !s.flow() {
			return s.content()
		}
		if c == '{' {
			s.maps++
		} else {
			s.seqs++
		}
		if err := s.token(); err != nil {
			return err
		}
		if err := s.openFlow(); err != nil {
			return err
		}
		s.advance(1)
		return nil
	case '}', ']':
		// As the tokenizer does: a '}' closes only an open mapping; a ']'
		// is text only after text outside any sequence.
		if c == '}' && s.maps <= 0 || c == ']' && s.plain && s.seqs <= 0 {
			return s.content()
		}
		if c == '}' {
			s.maps--
		} else {
			s.seqs--
		}
		s.closeFlow()
		return s.consume(1)
	case ',':
		if !s.flow() {
			return s.content()
		}
		s.entries = 0
		s.flowKey(0)
		return s.consume(1)
	case '-':
		if s.col == 1 && s.indent == 0 && s.peekRepeat('-') == 3 && s.blankAfter(3) {
			// A document start: the tokenizer forgets the block state.
			s.lastDelim = 0
			return s.consume(3)
		}
		if s.plain && s.first && s.up {
			// A dash starting a continuation line: the tokenizer reads
			// the rest of the plain scalar as folded text, like a
			// block scalar whose content starts at the dash.
			s.block, s.blockFirst = true, col
			if col > 1 && s.restHasText() {
				s.lastDelim = col - 1
			}
			s.skipLine()
			return nil
		}
		// The tokenizer takes a NUL after the dash for the end.
		if s.plain || !s.blankAfter(1) && s.peek(1) != 0 {
			return s.content()
		}
		if err := s.entry(col, false); err != nil {
			return err
		}
		return s.consume(1)
	case '?':
		if s.plain || s.peek(1) != ' ' && s.peek(1) != '\t' {
			return s.content()
		}
		if err := s.entry(col, true); err != nil {
			return err
		}
		return s.consume(1)
	case '.':
		if s.col == 1 && s.indent == 0 && s.peekRepeat('.') == 3 {
			return s.consume(3)
		}
		return s.content()
	case '<':
		if s.mergeKey() {
			s.lastDelim = col
			return s.consume(2)
		}
		return s.content()
	case ':':
		return s.mapValue()
	case '|', '>':
		if s.plain {
			return s.content()
		}
		// A block scalar: its header (indicators, a comment) runs to the
		// end of the line; an indentation indicator fixes the content's
		// column (see startLine).
		if col == 1 {
			s.lastDelim = 1
		}
		if err := s.token(); err != nil {
			return err
		}
		s.advance(1)
		s.block, s.blockFirst = true, 0
		for s.i < len(s.src) && !isNewline(s.src[s.i]) && s.src[s.i] != ' ' && s.src[s.i] != '\t' && s.src[s.i] != '#' {
			if d := s.src[s.i]; d >= '1' && d <= '9' {
				s.blockFirst = s.lastDelim + int(d-'0')
			}
			s.advance(1)
		}
		s.skipLine()
		return nil
	case '!':
		if s.plain || s.directive {
			return s.content()
		}
		return s.tag()
	case '%':
		if s.plain || s.indent != 0 {
			return s.content()
		}
		s.directive = true
		return s.consume(1)
	case '&':
		if s.plain {
			return s.content()
		}
		s.name = true
		return s.consume(1)
	case '*':
		if s.plain {
			return s.content()
		}
		return s.errorf("YAML aliases (*name) are not accepted")
	case '#':
		if s.plain && s.i > 0 && s.src[s.i-1] != ' ' && s.src[s.i-1] != '\t' && !isNewline(s.src[s.i-1]) {
			return s.content()
		}
		if err := s.token(); err != nil {
			return err
		}
		s.skipLine()
		return nil
	case '\'', '"':
		if s.plain {
			return s.content()
		}
		return s.quoted(c)
	case ' ':
		// A space ends an anchor's name and a directive's words.
		if s.name || s.directive {
			s.plain = false
		}
		s.name = false
		s.advance(1)
		return nil
	case '\t':
		// The tokenizer skips tabs without ending anything.
		s.advance(1)
		return nil
	}
	return s.content()
}

// peekRepeat counts the bytes equal to c from the current one.
func (s *scanner) peekRepeat(c byte) int {
	n := 0
	for s.i+n < len(s.src) && s.src[s.i+n] == c {
		n++
	}
	return n
}

// mergeKey reports a "<<" followed by spaces and a ':' that ends a token.
func (s *scanner) mergeKey() bool {
	if s.peekRepeat('<') != 2 {
		return false
	}
	for j := s.i + 2; j < len(s.src); j++ {
		switch c := s.src[j]; {
		case c == ' ':
			continue
		case c != ':':
			return false
		case j+1 < len(s.src) && (s.src[j+1] == ' ' || isNewline(s.src[j+1])):
			return true
		default:
			return false
		}
	}
	return false
}

// mapValue handles a ':' at the current byte: a mapping value indicator
// where the tokenizer makes one, with the key before it as a block column.
func (s *scanner) mapValue() error {
	if s.name || s.directive {
		return s.content()
	}
	next := s.peek(1)
	if s.maps <= 0 && !s.blankAfter(1) {
		return s.content()
	}
	if s.maps > 0 && (next == '/' || s.colon) {
		return s.content()
	}
	key, n := 0, 0
	switch {
	case s.plain:
		key, n = s.plainCol, decodedLen(s.src[s.plainStart:s.i])
	case s.quoteCol > 0:
		key, n = s.quoteCol, s.quoteLen
	}
	if s.flow() {
		s.flowKey(n)
	}
	if key > 0 {
		s.lastDelim = key
		if !s.flow() {
			s.blockPath(key, n, true)
		}
		if err := s.structure(key); err != nil {
			return err
		}
	}
	if err := s.consume(1); err != nil {
		return err
	}
	s.colon = true
	return nil
}

// tag consumes a tag ("!name"), which ends at a space (taken with it), a
// line break or, in a flow collection, a comma. The tokenizer counts one
// column less than the tag and its space take, and so does the scan: block
// nesting is read from its columns.
func (s *scanner) tag() error {
	if err := s.token(); err != nil {
		return err
	}
	s.advance(1)
	for s.i < len(s.src) {
		switch c := s.src[s.i]; {
		case c == ' ':
			s.i++
			return nil
		case c == ',' && s.flow():
			s.col--
			return nil
		case isNewline(c), c == '{', c == '}':
			return nil
		}
		s.advance(1)
	}
	return nil
}

// quoted consumes a quoted scalar, which may span lines.
func (s *scanner) quoted(q byte) error {
	col, start, lines := s.col, s.i, false
	if err := s.token(); err != nil {
		return err
	}
	s.advance(1)
	for s.i < len(s.src) {
		c := s.src[s.i]
		switch {
		case isNewline(c):
			s.newline()
			s.lineStart, lines = false, true
			continue
		case q == '\'' && c == '\'' && s.peek(1) == '\'':
			s.advance(2)
			continue
		case q == '"' && c == '\\':
			if isNewline(s.peek(1)) {
				s.advance(1)
				continue
			}
			s.advance(2)
			continue
		case c == q:
			s.advance(1)
			s.quoteCol, s.quoteLen = col, decodedLen(s.src[start:s.i])
			if err := s.endScalar(s.quoteLen); err != nil {
				return err
			}
			// After a quoted scalar that spans lines the tokenizer reads
			// what follows as the start of a line.
			if lines {
				s.lineStart, s.indent = true, 0
			}
			return nil
		}
		s.advance(1)
	}
	// Unterminated: the tokenizer refuses the document.
	return nil
}

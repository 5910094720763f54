package jsonwire

import (
	"math/bits"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner checks JSON as encoding/json's scanner does: the grammar of
// RFC 8259, nesting to maxDepth, any byte but a quote, a backslash and the
// controls inside a string (it does not check UTF-8: json.Unmarshal
// coerces it, json.Marshal of a RawMessage copies it).
type scanner struct {
	b      []byte
	i      int
	spaced bool // white space between tokens was skipped
	html   bool // a byte json.Marshal's compaction escapes: <, >, &, or U+2028/9's first
}

// strByte classes the bytes of a string's contents: 0 plain, 1 the end
// or an escape, 2 invalid (a control), 3 one json.Marshal's compaction
// escapes (<, >, &, and 0xE2, which may start U+2028 or U+2029), 4 the
// rest of non-ASCII.
var strByte = func() (t [256]byte) {
	for c := range 0x20 {
		t[c] = 2
	}
	t['"'], t['\\'] = 1, 1
	t['<'], t['>'], t['&'] = 3, 3, 3
	for c := 0x80; c < 0x100; c++ {
		t[c] = 4
	}
	t[0xE2] = 3
	return t
}()

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (s *scanner) skipSpace() {
	for s.i < len(s.b) && isSpace(s.b[s.i]) {
		s.i++
		s.spaced = true
	}
}

func (s *scanner) value(depth int) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		return s.str()
	case c == '{':
		return s.container(depth+1, '}')
	case c == '[':
		return s.container(depth+1, ']')
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	}
	return false
}

func (s *scanner) lit(l string) bool {
	if len(s.b)-s.i < len(l) || string(s.b[s.i:s.i+len(l)]) != l {
		return false
	}
	s.i += len(l)
	return true
}

// container reads an object (closing '}') or an array (']').
func (s *scanner) container(depth int, closing byte) bool {
	if depth > maxDepth {
		return false
	}
	s.i++ // { or [
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == closing {
		s.i++
		return true
	}
	for {
		if closing == '}' {
			if s.i >= len(s.b) || s.b[s.i] != '"' || !s.str() {
				return false
			}
			s.skipSpace()
			if s.i >= len(s.b) || s.b[s.i] != ':' {
				return false
			}
			s.i++
			s.skipSpace()
		}
		if !s.value(depth) {
			return false
		}
		s.skipSpace()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.skipSpace()
		case closing:
			s.i++
			return true
		default:
			return false
		}
	}
}

// str reads the string at s.b[s.i].
func (s *scanner) str() bool {
	_, ok := s.strFlags()
	return ok
}

// strFlags reads the string at s.b[s.i], reporting which of the classes
// of strByte its contents hold (bit 1 an escape, 3 the HTML bytes, 4
// other non-ASCII).
func (s *scanner) strFlags() (flags uint8, ok bool) {
	b := s.b
	for i := s.i + 1; i < len(b); i++ {
		switch k := strByte[b[i]]; k {
		case 0:
		case 1:
			if b[i] == '"' {
				s.i = i + 1
				return flags, true
			}
			flags |= 1 << 1
			i++
			if i >= len(b) {
				return flags, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i < 5 || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
					return flags, false
				}
				i += 4
			default:
				return flags, false
			}
		case 2:
			return flags, false
		case 3:
			flags |= 1 << 3
			s.html = true
			if b[i] == 0xE2 {
				flags |= 1 << 4
			}
		default:
			flags |= 1 << 4
		}
	}
	return flags, false
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// number reads -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	if s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case !s.digits():
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// digits reads one or more digits.
func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// SkipSpace returns the index of the first byte from b[i] on that is not
// JSON white space.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// End reports whether b holds nothing but white space from i on: what
// json.Unmarshal allows after the value.
func End(b []byte, i int) bool { return SkipSpace(b, i) == len(b) }

// SkipValue returns the index after the JSON value at b[i], checking it
// as encoding/json's scanner does.
func SkipValue(b []byte, i int) (int, bool) {
	// A short integer, the most common value in a log, is taken here.
	if i < len(b) && b[i]-'1' < 9 {
		j := i + 1
		for j < len(b) && b[j]-'0' <= 9 {
			j++
		}
		if j == len(b) || !numberGoesOn(b[j]) {
			return j, true
		}
	}
	s := scanner{b: b, i: i}
	if !s.value(0) {
		return 0, false
	}
	return s.i, true
}

// ReadRaw returns the JSON value at b[i] as json.Unmarshal stores it in a
// json.RawMessage (its bytes as they are, aliasing b), and the index
// after it.
func ReadRaw(b []byte, i int) ([]byte, int, bool) {
	j, ok := SkipValue(b, i)
	if !ok {
		return nil, 0, false
	}
	return b[i:j:j], j, true
}

// ReadString reads the string at b[i], returning what json.Unmarshal
// makes of it and the index after it: its contents, aliasing b, when they
// hold no escape and are valid UTF-8; else a copy with the escapes
// decoded and, as json.Unmarshal does, each byte of invalid UTF-8 and
// each lone surrogate escape replaced by U+FFFD.
func ReadString(b []byte, i int) ([]byte, int, bool) {
	// Most strings are printable ASCII without escapes: those are read
	// here, a table lookup per byte, the rest by readString (with the
	// scanner).
	if i < len(b) && b[i] == '"' {
		j := i + 1
		for j < len(b) && quick[b[j]] {
			j++
		}
		if j < len(b) && b[j] == '"' {
			return b[i+1 : j], j + 1, true
		}
	}
	return readString(b, i)
}

// quick holds, for each byte, whether ReadString's loop passes over it in
// a string: printable ASCII but " and \.
var quick = func() (t [256]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// readString is ReadString for the strings its loop does not take.
func readString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	s := scanner{b: b, i: i}
	flags, ok := s.strFlags()
	if !ok {
		return nil, 0, false
	}
	v := b[i+1 : s.i-1]
	if flags&(1<<1|1<<4) == 0 || flags&(1<<1) == 0 && utf8.Valid(v) {
		return v, s.i, true
	}
	return unquote(v), s.i, true
}

// unquote decodes the contents of a string the scanner took.
func unquote(v []byte) []byte {
	out := make([]byte, 0, len(v)+utf8.UTFMax)
	for r := 0; r < len(v); {
		switch c := v[r]; {
		case c == '\\':
			switch e := v[r+1]; e {
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				rr := hex4(v[r+2:])
				r += 6
				if utf16.IsSurrogate(rr) {
					if len(v)-r >= 6 && v[r] == '\\' && v[r+1] == 'u' && isHex(v[r+2]) && isHex(v[r+3]) && isHex(v[r+4]) && isHex(v[r+5]) {
						if dec := utf16.DecodeRune(rr, hex4(v[r+2:])); dec != utf8.RuneError {
							r += 6
							out = utf8.AppendRune(out, dec)
							continue
						}
					}
					rr = utf8.RuneError
				}
				out = utf8.AppendRune(out, rr)
				continue
			default: // " \ /
				out = append(out, e)
			}
			r += 2
		case c < utf8.RuneSelf:
			out = append(out, c)
			r++
		default:
			rr, size := utf8.DecodeRune(v[r:])
			out = utf8.AppendRune(out, rr)
			r += size
		}
	}
	return out
}

// hex4 decodes four hex digits the scanner checked.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c >= 'a':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// ReadUint reads the number at b[i] if json.Unmarshal stores it in an
// unsigned integer of which max is the largest value: digits without a
// sign, a fraction or an exponent, at most max. It returns the value and
// the index after it.
func ReadUint(b []byte, i int, max uint64) (uint64, int, bool) {
	// Short numbers without a leading zero are read here, without the
	// overflow checks that only 20 digits need; the rest by readUint.
	if i < len(b) && b[i]-'1' < 9 {
		n, j := uint64(b[i]-'0'), i+1
		for j < len(b) && b[j]-'0' <= 9 && j-i < 19 { // 19 digits cannot overflow
			n = n*10 + uint64(b[j]-'0')
			j++
		}
		if n <= max && (j == len(b) || !numberGoesOn(b[j])) {
			return n, j, true
		}
	}
	return readUint(b, i, max)
}

// numberGoesOn reports whether c, after a number's digits, continues it
// (another digit, a fraction or an exponent).
func numberGoesOn(c byte) bool { return c-'0' <= 9 || c == '.' || c|0x20 == 'e' }

// readUint is ReadUint for the numbers its loop does not take.
func readUint(b []byte, i int, max uint64) (uint64, int, bool) {
	j := i
	var n uint64
	for j < len(b) && j-i < 19 { // 19 digits cannot overflow
		c := b[j] - '0'
		if c > 9 {
			break
		}
		n = n*10 + uint64(c)
		j++
	}
	if j == i || b[i] == '0' && j > i+1 {
		return 0, 0, false // no digits, or a leading zero
	}
	for ; j < len(b) && b[j]-'0' <= 9; j++ {
		hi, lo := bits.Mul64(n, 10)
		var carry uint64
		if n, carry = bits.Add64(lo, uint64(b[j]-'0'), 0); hi != 0 || carry != 0 {
			return 0, 0, false
		}
	}
	if n > max || j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
		return 0, 0, false
	}
	return n, j, true
}

// ReadInt reads the number at b[i] if json.Unmarshal stores it in a
// signed integer of the range [min, max] (min <= 0 <= max): an integer
// without a fraction or an exponent (-0 is 0). It returns the value and
// the index after it.
func ReadInt(b []byte, i int, min, max int64) (int64, int, bool) {
	if i < len(b) && b[i] == '-' {
		return readNegative(b, i, min)
	}
	n, j, ok := ReadUint(b, i, uint64(max))
	return int64(n), j, ok
}

// readNegative is ReadInt for a number with a minus sign.
func readNegative(b []byte, i int, min int64) (int64, int, bool) {
	n, j, ok := ReadUint(b, i+1, uint64(-(min+1))+1)
	if !ok {
		return 0, 0, false
	}
	return -int64(n-1) - 1, j, true // -(n) without overflow at min
}

// ReadBool reads true or false at b[i].
func ReadBool(b []byte, i int) (v bool, next int, ok bool) {
	switch {
	case len(b)-i >= 4 && string(b[i:i+4]) == "true":
		return true, i + 4, true
	case len(b)-i >= 5 && string(b[i:i+5]) == "false":
		return false, i + 5, true
	}
	return false, 0, false
}

// IsNull reports whether b holds null at i.
func IsNull(b []byte, i int) bool { return len(b)-i >= 4 && string(b[i:i+4]) == "null" }

// Open reads the opening bracket c ('{' or '[') at b[i] and the white
// space after it, returning the index of the first member, or the index
// after the closing bracket when the object or array is empty.
func Open(b []byte, i int, c byte) (next int, empty, ok bool) {
	if i >= len(b) || b[i] != c {
		return 0, false, false
	}
	j := SkipSpace(b, i+1)
	if j < len(b) && b[j] == c+2 { // } and ] follow { and [ by two
		return j + 1, true, true
	}
	return j, false, true
}

// Key reads an object member's key at b[i] (as ReadString does) and the
// colon after it, returning the index of the member's value.
func Key(b []byte, i int) (key []byte, next int, ok bool) {
	// A plain key followed by a colon and no space, as the codecs write
	// it, is read here, as ReadString's loop reads it; the rest by
	// readKey.
	if i < len(b) && b[i] == '"' {
		j := i + 1
		for j < len(b) && quick[b[j]] {
			j++
		}
		if j+2 < len(b) && b[j] == '"' && b[j+1] == ':' && !isSpace(b[j+2]) {
			return b[i+1 : j], j + 2, true
		}
	}
	return readKey(b, i)
}

// readKey is Key for the keys it does not take.
func readKey(b []byte, i int) (key []byte, next int, ok bool) {
	key, j, ok := ReadString(b, i)
	if !ok {
		return nil, 0, false
	}
	j = SkipSpace(b, j)
	if j >= len(b) || b[j] != ':' {
		return nil, 0, false
	}
	return key, SkipSpace(b, j+1), true
}

// Next reads what follows a member's value at b[i] in an object or array
// that closes with closing ('}' or ']'): a comma, returning the index of
// the next member and more, or the closing bracket, returning the index
// after it.
func Next(b []byte, i int, closing byte) (next int, more, ok bool) {
	if i+1 < len(b) && b[i] == ',' && !isSpace(b[i+1]) { // compact, as the codecs write it
		return i + 1, true, true
	}
	if i < len(b) && b[i] == closing {
		return i + 1, false, true
	}
	return readNext(b, i, closing)
}

// readNext is Next for what follows white space.
func readNext(b []byte, i int, closing byte) (next int, more, ok bool) {
	i = SkipSpace(b, i)
	if i >= len(b) {
		return 0, false, false
	}
	switch b[i] {
	case ',':
		return SkipSpace(b, i+1), true, true
	case closing:
		return i + 1, false, true
	}
	return 0, false, false
}

// ReadFloat reads the number at b[i] if json.Unmarshal stores it in a
// float of the given bits (32 or 64): any JSON number in the float's
// range (1e400 is not). It returns the value and the index after it.
func ReadFloat(b []byte, i int, bits int) (float64, int, bool) {
	j := NumberEnd(b, i)
	if j == i {
		return 0, 0, false
	}
	f, err := strconv.ParseFloat(string(b[i:j]), bits) // converted without a copy
	if err != nil {
		return 0, 0, false
	}
	return f, j, true
}

// Object reads the object at b[i], giving member each key (as Key reads
// it) and the index of its value; member reads the value and returns the
// index after it. Object returns the index after the object.
func Object(b []byte, i int, member func(key []byte, i int) (int, bool)) (int, bool) {
	i, empty, ok := Open(b, i, '{')
	if !ok {
		return 0, false
	}
	for more := !empty; more; {
		var key []byte
		if key, i, ok = Key(b, i); !ok {
			return 0, false
		}
		if i, ok = member(key, i); !ok {
			return 0, false
		}
		if i, more, ok = Next(b, i, '}'); !ok {
			return 0, false
		}
	}
	return i, true
}

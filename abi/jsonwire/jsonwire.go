// Package jsonwire holds the checks the hand-written JSON encoders of the
// store, the host and the Go guest SDK share: whether a value is one
// json.Marshal writes as it is, so that writing it by hand gives
// json.Marshal's bytes. It is part of the abi module, beside the payloads
// whose encodings it guards, so that the guest SDK needs nothing else.
package jsonwire

import (
	"bytes"
)

// PlainString reports whether json.Marshal writes s unescaped between its
// quotes: printable ASCII without a quote, a backslash, or <, > and &
// (which it escapes for HTML).
func PlainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// PlainRaw reports whether json.Marshal copies the raw JSON b into a
// json.RawMessage's place as it is: b is one valid JSON value, already
// compact, of printable ASCII without <, > and & (which it escapes). It
// reads b once, without encoding/json's scanner (FuzzPlainRaw holds it to
// what json.Compact says).
func PlainRaw(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < ' ' || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	v := validator{b: b}
	return v.value(0) && v.i == len(b)
}

// maxDepth is encoding/json's limit on nesting, which json.Compact
// enforces too.
const maxDepth = 10000

// validator reads one compact JSON value of printable ASCII from b[i:].
type validator struct {
	b []byte
	i int
}

func (v *validator) peek() byte {
	if v.i < len(v.b) {
		return v.b[v.i]
	}
	return 0
}

func (v *validator) value(depth int) bool {
	switch c := v.peek(); {
	case c == '{':
		return v.object(depth + 1)
	case c == '[':
		return v.array(depth + 1)
	case c == '"':
		return v.str()
	case c == '-' || c >= '0' && c <= '9':
		return v.number()
	case c == 't':
		return v.lit("true")
	case c == 'f':
		return v.lit("false")
	case c == 'n':
		return v.lit("null")
	}
	return false
}

func (v *validator) lit(s string) bool {
	if len(v.b)-v.i < len(s) || string(v.b[v.i:v.i+len(s)]) != s {
		return false
	}
	v.i += len(s)
	return true
}

func (v *validator) object(depth int) bool {
	if depth > maxDepth {
		return false
	}
	v.i++ // {
	if v.peek() == '}' {
		v.i++
		return true
	}
	for {
		if v.peek() != '"' || !v.str() || v.peek() != ':' {
			return false
		}
		v.i++
		if !v.value(depth) {
			return false
		}
		switch v.peek() {
		case ',':
			v.i++
		case '}':
			v.i++
			return true
		default:
			return false
		}
	}
}

func (v *validator) array(depth int) bool {
	if depth > maxDepth {
		return false
	}
	v.i++ // [
	if v.peek() == ']' {
		v.i++
		return true
	}
	for {
		if !v.value(depth) {
			return false
		}
		switch v.peek() {
		case ',':
			v.i++
		case ']':
			v.i++
			return true
		default:
			return false
		}
	}
}

// str reads a string; the bytes are printable ASCII already.
func (v *validator) str() bool {
	v.i++ // "
	for v.i < len(v.b) {
		switch v.b[v.i] {
		case '"':
			v.i++
			return true
		case '\\':
			v.i++
			switch v.peek() {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				v.i++
			case 'u':
				if len(v.b)-v.i < 5 {
					return false
				}
				for _, h := range v.b[v.i+1 : v.i+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return false
					}
				}
				v.i += 5
			default:
				return false
			}
		default:
			v.i++
		}
	}
	return false
}

// number reads -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (v *validator) number() bool {
	if v.peek() == '-' {
		v.i++
	}
	switch c := v.peek(); {
	case c == '0':
		v.i++
	case c >= '1' && c <= '9':
		v.digits()
	default:
		return false
	}
	if v.peek() == '.' {
		v.i++
		if !v.digits() {
			return false
		}
	}
	if c := v.peek(); c == 'e' || c == 'E' {
		v.i++
		if c := v.peek(); c == '+' || c == '-' {
			v.i++
		}
		if !v.digits() {
			return false
		}
	}
	return true
}

// digits reads one or more digits.
func (v *validator) digits() bool {
	start := v.i
	for v.i < len(v.b) && v.b[v.i] >= '0' && v.b[v.i] <= '9' {
		v.i++
	}
	return v.i > start
}

// Reader reads JSON laid out exactly as the hand encoders expect, from the
// start of B: the record readers take what they know and leave anything
// else to encoding/json. Each method consumes what it read and reports
// whether it did; on false, B is unchanged.
type Reader struct{ B []byte }

// Lit takes the literal text s.
func (p *Reader) Lit(s string) bool {
	if !bytes.HasPrefix(p.B, []byte(s)) {
		return false
	}
	p.B = p.B[len(s):]
	return true
}

// Quoted takes a string of printable ASCII without escapes, quotes and
// all: one that decodes to its bytes.
func (p *Reader) Quoted(dst *[]byte) bool {
	if len(p.B) == 0 || p.B[0] != '"' {
		return false
	}
	for i := 1; i < len(p.B); i++ {
		switch c := p.B[i]; {
		case c == '"':
			*dst, p.B = p.B[:i+1], p.B[i+1:]
			return true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return false
		}
	}
	return false
}

// Str takes a string as Quoted does and decodes it.
func (p *Reader) Str(dst *string) bool {
	var q []byte
	if !p.Quoted(&q) {
		return false
	}
	*dst = string(q[1 : len(q)-1])
	return true
}

// digits takes 1 to 18 decimal digits without a leading zero (so no
// overflow), followed by neither a fraction nor an exponent.
func (p *Reader) digits() (uint64, bool) {
	i := 0
	var n uint64
	for i < len(p.B) && p.B[i] >= '0' && p.B[i] <= '9' {
		n = n*10 + uint64(p.B[i]-'0')
		i++
	}
	if i == 0 || i > 18 || (p.B[0] == '0' && i > 1) {
		return 0, false
	}
	if i < len(p.B) && (p.B[i] == '.' || p.B[i] == 'e' || p.B[i] == 'E') {
		return 0, false
	}
	p.B = p.B[i:]
	return n, true
}

// Uint takes a non-negative integer as digits does.
func (p *Reader) Uint(dst *uint64) bool {
	n, ok := p.digits()
	if ok {
		*dst = n
	}
	return ok
}

// Int takes an integer, maybe negative, as digits does.
func (p *Reader) Int(dst *int) bool {
	q := *p
	neg := len(q.B) > 0 && q.B[0] == '-'
	if neg {
		q.B = q.B[1:]
	}
	n, ok := q.digits()
	if !ok {
		return false
	}
	*p = q
	*dst = int(n)
	if neg {
		*dst = -*dst
	}
	return true
}

// The readers below read inside a text PlainRaw took (one compact, valid
// JSON value of printable ASCII) and check nothing it checked: the hand
// decoders of the Go SDK and of tool inputs validate with PlainRaw once,
// then walk the text with these.

// StringAt returns the contents of the string at b[i] and the index after
// it; false when b[i] is not a string or the string holds an escape.
func StringAt(b []byte, i int) ([]byte, int, bool) {
	if b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '"':
			return b[i+1 : j], j + 1, true
		case '\\':
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// NumberEnd returns the index after the number that starts at b[i] (i
// itself when none does).
func NumberEnd(b []byte, i int) int {
	for i < len(b) && (b[i] == '-' || b[i] == '+' || b[i] == '.' || b[i] == 'e' || b[i] == 'E' || b[i] >= '0' && b[i] <= '9') {
		i++
	}
	return i
}

// ValueEnd returns the index after the value that starts at b[i].
func ValueEnd(b []byte, i int) int {
	depth := 0
	for {
		switch b[i] {
		case '"':
			i++
			for b[i] != '"' {
				if b[i] == '\\' {
					i++
				}
				i++
			}
			i++
		case '{', '[':
			depth++
			i++
		case '}', ']':
			depth--
			i++
		default: // a number or a literal
			for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' {
				i++
			}
		}
		if depth == 0 {
			return i
		}
		if b[i] == ',' || b[i] == ':' {
			i++
		}
	}
}

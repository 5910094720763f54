package jsonwire

import (
	"bytes"
	"math"
)

// Reader reads JSON laid out exactly as the hand encoders write it, from
// the start of B: the record readers take what they know and leave
// anything else to encoding/json. Each method consumes what it read and
// reports whether it did; on false, B is unchanged. Its values are read
// by this package's readers, so what it takes it reads as json.Unmarshal
// does.
type Reader struct{ B []byte }

// Lit takes the literal text s.
func (p *Reader) Lit(s string) bool {
	if !bytes.HasPrefix(p.B, []byte(s)) {
		return false
	}
	p.B = p.B[len(s):]
	return true
}

// Quoted takes a string, quotes and all, as its JSON text: what
// json.Unmarshal gives a type's UnmarshalJSON (a time's, say).
func (p *Reader) Quoted(dst *[]byte) bool {
	_, j, ok := ReadString(p.B, 0) // which reads a plain string in place
	if !ok {
		return false
	}
	*dst, p.B = p.B[:j], p.B[j:]
	return true
}

// Str takes a string and decodes it as ReadString does.
func (p *Reader) Str(dst *string) bool {
	v, j, ok := ReadString(p.B, 0)
	if !ok {
		return false
	}
	*dst, p.B = string(v), p.B[j:]
	return true
}

// Uint takes a number json.Unmarshal stores in a uint64 (ReadUint).
func (p *Reader) Uint(dst *uint64) bool {
	n, j, ok := ReadUint(p.B, 0, math.MaxUint64)
	if ok {
		*dst, p.B = n, p.B[j:]
	}
	return ok
}

// Int takes a number json.Unmarshal stores in an int (ReadInt).
func (p *Reader) Int(dst *int) bool {
	n, j, ok := ReadInt(p.B, 0, math.MinInt, math.MaxInt)
	if ok {
		*dst, p.B = int(n), p.B[j:]
	}
	return ok
}

// The readers below read inside a text PlainRaw took (one compact, valid
// JSON value of printable ASCII) and check nothing it checked.

// StringAt returns the contents of the string at b[i] and the index after
// it; false when b[i] is not a string or the string holds an escape.
func StringAt(b []byte, i int) ([]byte, int, bool) {
	if b[i] != '"' {
		return nil, 0, false
	}
	j := i + 1 + bytes.IndexByte(b[i+1:], '"')
	if j <= i || bytes.IndexByte(b[i+1:j], '\\') >= 0 {
		return nil, 0, false
	}
	return b[i+1 : j], j + 1, true
}

// NumberEnd returns the index after the number that starts at b[i] (i
// itself when none does).
func NumberEnd(b []byte, i int) int {
	s := scanner{b: b, i: i}
	if i >= len(b) || !(b[i] == '-' || b[i] >= '0' && b[i] <= '9') || !s.number() {
		return i
	}
	return s.i
}

// ValueEnd returns the index after the value that starts at b[i].
//
// Deprecated: use SkipValue, which checks what it skips.
func ValueEnd(b []byte, i int) int {
	j, _ := SkipValue(b, i)
	return j
}

package jsonwire

import (
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

const hex = "0123456789abcdef"

// AppendString appends s as json.Marshal writes a string, quotes and all:
// ", \ and the control characters escaped (\b \f \n \r \t by name, the
// others as \u00XX), <, > and & as \u003c \u003e \u0026, U+2028 and
// U+2029 as \u2028 and \u2029, and each byte of invalid UTF-8 as \ufffd.
func AppendString[S ~string | ~[]byte](dst []byte, s S) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if htmlSafe[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default: // the other controls, <, > and &
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(string(s[i:min(len(s), i+utf8.UTFMax)]))
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			start = i + size
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			start = i + size
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendRaw appends raw as json.Marshal writes a json.RawMessage: null
// for nil; else raw must be one valid JSON value, which is written
// compact, with <, > and & and U+2028 and U+2029 escaped wherever they
// are, and anything else (invalid UTF-8 too) as it is. It reports false,
// having appended nothing, where json.Marshal fails: raw is empty or not
// valid JSON.
func AppendRaw(dst, raw []byte) ([]byte, bool) {
	if raw == nil {
		return append(dst, "null"...), true
	}
	s := scanner{b: raw}
	s.skipSpace()
	if !s.value(0) {
		return dst, false
	}
	s.skipSpace()
	if s.i != len(raw) {
		return dst, false
	}
	if !s.spaced && !s.html {
		return append(dst, raw...), true
	}
	return appendCompact(dst, raw), true
}

// appendCompact writes the valid JSON raw as json.Compact with HTML
// escaping does: white space between tokens left out (inside a string
// there is none but spaces, which are kept), the HTML characters escaped.
func appendCompact(dst, raw []byte) []byte {
	inString := false
	start := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '<' || c == '>' || c == '&':
			dst = append(dst, raw[start:i]...)
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			start = i + 1
		case c == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && raw[i+2]&^1 == 0xA8:
			dst = append(dst, raw[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[raw[i+2]&0xF])
			i += 2
			start = i + 1
		case inString:
			switch c {
			case '\\':
				i++ // the escaped byte cannot end the string
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			dst = append(dst, raw[start:i]...)
			start = i + 1
		}
	}
	return append(dst, raw[start:]...)
}

// AppendFloat appends f as json.Marshal writes a float of the given bits
// (32 or 64): like strconv's shortest 'f' format, 'e' format below 1e-6
// and from 1e21 on, with exponents unpadded (1e-7, not 1e-07); -0 is -0.
// It reports false, having appended nothing, for NaN and the infinities,
// which json.Marshal refuses.
func AppendFloat(dst []byte, f float64, bits int) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, false
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	start := len(dst)
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		// e-09 to e-9
		if n := len(dst); n-start >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

// MaxTimeLen is the longest JSON json.Marshal writes for a time.Time:
// "2006-01-02T15:04:05.999999999-07:00", quotes and all.
const MaxTimeLen = 37

// AppendTime appends t as json.Marshal writes a time.Time: its RFC 3339
// text with nanoseconds, in quotes. It reports false, having appended
// nothing, where json.Marshal fails (a year outside 0-9999, an offset
// that is not whole minutes within a day).
func AppendTime(dst []byte, t time.Time) ([]byte, bool) {
	b, err := t.AppendText(append(dst, '"'))
	if err != nil {
		return dst, false
	}
	return append(b, '"'), true
}

// AppendInt appends n as json.Marshal writes a signed integer.
func AppendInt(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }

// AppendUint appends n as json.Marshal writes an unsigned integer.
func AppendUint(dst []byte, n uint64) []byte { return strconv.AppendUint(dst, n, 10) }

// Package jsonfast holds the checks the hand-written JSON encoders of the
// store and the host share: whether a value is one json.Marshal writes
// as it is, so that writing it by hand gives json.Marshal's bytes.
package jsonfast

import (
	"bytes"
	"encoding/json"
	"sync"
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
// compact, of printable ASCII without <, > and & (which it escapes).
func PlainRaw(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < ' ' || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	// Compact also validates: it fails on anything but one JSON value.
	buf := bufs.Get().(*bytes.Buffer)
	buf.Reset()
	plain := json.Compact(buf, b) == nil && bytes.Equal(buf.Bytes(), b)
	if buf.Cap() <= 64<<10 {
		bufs.Put(buf)
	}
	return plain
}

var bufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Package jsonwire is the one JSON layer under the hand-written codecs of
// the host, the store and the Go guest SDK: the primitives each of them
// uses to write json.Marshal's bytes and to read what json.Unmarshal
// reads, without encoding/json's reflection. The codecs keep only their
// field tables and orders; how a string is escaped, a number or a time
// written, raw JSON compacted and checked, or a value skipped is decided
// here, once, and held to encoding/json by this package's fuzz tests.
//
// Writing: AppendString, AppendRaw, AppendFloat and AppendTime write what
// json.Marshal writes for a string (with its default HTML escaping), a
// json.RawMessage, a float and a time.Time.
//
// Reading: the functions that take a []byte and an index read the JSON
// at that index strictly, as encoding/json's scanner accepts it, and
// return the index after what they read; false means the input is not
// what they read (malformed, or a value json.Unmarshal would not store in
// the Go type asked for), and the codec then leaves the input to
// json.Unmarshal, which decides. Reader reads a text laid out exactly as
// the codecs write it.
//
// It is part of the abi module, beside the payloads whose encodings it
// writes, so that the guest SDK needs nothing else.
package jsonwire

import "unicode/utf8"

// maxDepth is encoding/json's limit on nesting.
const maxDepth = 10000

// PlainString reports whether json.Marshal writes s unescaped between its
// quotes: printable ASCII without a quote, a backslash, or <, > and &
// (which it escapes for HTML).
func PlainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if !plain[s[i]] {
			return false
		}
	}
	return true
}

// PlainRaw reports whether b is one valid JSON value, already compact, of
// printable ASCII without <, > and &: one json.Marshal copies into a
// json.RawMessage's place as it is, and that the readers StringAt,
// NumberEnd and ValueEnd can walk without checking.
func PlainRaw(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < ' ' || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	s := scanner{b: b}
	return s.value(0) && s.i == len(b) && !s.spaced
}

// plain holds, for each byte, whether json.Marshal writes it in a string
// as it is: printable ASCII but ", \, <, > and &.
var plain = func() (t [256]bool) {
	for c := ' '; c < 0x7f; c++ {
		t[c] = true
	}
	for _, c := range `"\<>&` {
		t[c] = false
	}
	return t
}()

// htmlSafe holds, for each ASCII byte, whether json.Marshal writes it in
// a string as it is: plain's bytes and DEL.
var htmlSafe = func() (t [utf8.RuneSelf]bool) {
	copy(t[:], plain[:utf8.RuneSelf])
	t[0x7f] = true
	return t
}()

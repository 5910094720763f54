package jsonwire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// A value a check passes is written as it is by json.Marshal; the checks
// may refuse more (non-ASCII text, which the encoders leave to
// encoding/json), but pass the values listed as plain.
func TestPlainLikeMarshal(t *testing.T) {
	for _, c := range []struct {
		s     string
		plain bool
	}{
		{"", true}, {"abc", true}, {"a b", true}, {"run_1:x.y-z", true},
		{"a\"b", false}, {"a\\b", false}, {"<", false}, {">", false}, {"&", false}, {"\t", false},
		{"\x7f", false}, {"é", false}, {"\u2028", false},
	} {
		got, err := json.Marshal(c.s)
		if err != nil {
			t.Fatal(err)
		}
		asIs := string(got) == `"`+c.s+`"`
		if p := PlainString(c.s); p != c.plain || (p && !asIs) {
			t.Errorf("PlainString(%q) = %v, want %v; json.Marshal writes %s", c.s, p, c.plain, got)
		}
	}
	for _, c := range []struct {
		r     string
		plain bool
	}{
		{`1`, true}, {`{"a":1}`, true}, {`"a b"`, true}, {`"\u003c"`, true}, {`[1,2]`, true}, {`null`, true},
		{`{"a": 1}`, false}, {` 1`, false}, {`1 `, false}, {`"a<b"`, false}, {`{"a":`, false}, {`1 2`, false},
		{"\"\u00e9\"", false}, {"\"\t\"", false}, {"", false},
	} {
		got, err := json.Marshal(json.RawMessage(c.r))
		asIs := err == nil && string(got) == c.r
		if p := PlainRaw([]byte(c.r)); p != c.plain || (p && !asIs) {
			t.Errorf("PlainRaw(%q) = %v, want %v; json.Marshal writes %s, %v", c.r, p, c.plain, got, err)
		}
	}
}

// The reader takes exactly what it reports, decoded as json.Unmarshal
// decodes it, and leaves the rest as it was when it reports false.
func TestReader(t *testing.T) {
	p := Reader{B: []byte(`{"a":"x y","e":"a\"b\u00e9","n":-12,"u":7,"z":01}`)}
	var s, e string
	var n int
	var u uint64
	if !p.Lit(`{"a":`) || !p.Str(&s) || s != "x y" || !p.Lit(`,"e":`) || !p.Str(&e) || e != "a\"b\u00e9" ||
		!p.Lit(`,"n":`) || !p.Int(&n) || n != -12 || !p.Lit(`,"u":`) || !p.Uint(&u) || u != 7 || !p.Lit(`,"z":`) {
		t.Fatalf("read %q %q %d %d, left %q", s, e, n, u, p.B)
	}
	if p.Uint(&u) || p.Int(&n) || string(p.B) != `01}` {
		t.Fatalf("a leading zero taken, or the input changed: %q", p.B)
	}
	for _, bad := range []string{`"a\x"`, "\"a\tb\"", `"open`, `x`, ``} {
		q := Reader{B: []byte(bad)}
		if q.Str(&s) || string(q.B) != bad {
			t.Errorf("Str took %q, left %q", bad, q.B)
		}
	}
	for _, bad := range []string{`-`, `-x`, `1.5`, `2e3`, `9223372036854775808`, `-9223372036854775809`, `-01`} {
		q := Reader{B: []byte(bad)}
		if q.Int(&n) || string(q.B) != bad {
			t.Errorf("Int took %q, left %q", bad, q.B)
		}
	}
}

// plainRawRef is PlainRaw as json.Compact decides it: the reference the
// hand validator must agree with.
func plainRawRef(b []byte) bool {
	for _, c := range b {
		if c < ' ' || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	var buf bytes.Buffer
	return len(b) > 0 && json.Compact(&buf, b) == nil && bytes.Equal(buf.Bytes(), b)
}

var plainRawSeeds = []string{
	`1`, `-0`, `-0.5e+10`, `0.`, `01`, `1e`, `1E-2`, `.5`, `-`, `--1`, `1.5.5`,
	`"a"`, `"\u00e9"`, `"\u00g9"`, `"\u00e"`, `"\x"`, `"\/\b\f\n\r\t\"\\"`, `"open`, `"a"b`,
	`{}`, `[]`, `{"a":1,"b":[true,false,null,{"c":"d"}]}`, `{"a":1,}`, `[1,]`, `{"a"}`, `{1:2}`,
	`{"a":1 }`, `[ 1]`, `[1]]`, `{"a":1}}`, `tru`, `nulll`, `true false`, `[[[[[]]]]]`,
	strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth),
	strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
	strings.Repeat(`{"a":`, maxDepth) + "1" + strings.Repeat("}", maxDepth),
	strings.Repeat(`{"a":`, maxDepth+1) + "1" + strings.Repeat("}", maxDepth+1),
}

// FuzzPlainRaw: the hand validator says what json.Compact says.
func FuzzPlainRaw(f *testing.F) {
	for _, s := range plainRawSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := PlainRaw(b), plainRawRef(b); got != want {
			t.Fatalf("PlainRaw(%q) = %v, json.Compact says %v", b, got, want)
		}
	})
}

func BenchmarkPlainRaw(b *testing.B) {
	v := []byte(`{"prompt":"Deploy api to production?","options":[{"id":"approve","label":"Approve"},{"id":"reject","label":"Reject"}],"display":"buttons"}`)
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			if !PlainRaw(v) {
				b.Fatal("not plain")
			}
		}
	})
	b.Run("compact", func(b *testing.B) {
		for b.Loop() {
			if !plainRawRef(v) {
				b.Fatal("not plain")
			}
		}
	})
}

// Inside a text PlainRaw takes, ValueEnd finds the end of every value
// (the whole text, and each member of an object or array), StringAt reads
// strings without escapes and NumberEnd numbers.
func TestCompactReaders(t *testing.T) {
	for _, s := range plainRawSeeds {
		b := []byte(s)
		if !PlainRaw(b) {
			continue
		}
		if end := ValueEnd(b, 0); end != len(b) {
			t.Fatalf("ValueEnd(%s) = %d, want %d", b, end, len(b))
		}
	}
	b := []byte(`{"a":"x","b\"":[1,-2.5e+3,{"c":"d\\"}],"e":true,"f":null,"g":{}}`)
	if !PlainRaw(b) {
		t.Fatal("not plain")
	}
	var keys []string
	i := 1
	for {
		k, j, ok := StringAt(b, i)
		if !ok {
			end := ValueEnd(b, i) // an escaped key: skipped as a value
			keys = append(keys, "?"+string(b[i:end]))
			j = end
		} else {
			keys = append(keys, string(k))
		}
		i = ValueEnd(b, j+1)
		if b[i] == '}' {
			break
		}
		i++
	}
	if got := strings.Join(keys, " "); got != `a ?"b\"" e f g` {
		t.Fatalf("keys %s", got)
	}
	if n := NumberEnd([]byte(`-2.5e+3,`), 0); n != 7 {
		t.Fatalf("NumberEnd = %d, want 7", n)
	}
	if n := NumberEnd([]byte(`"x"`), 0); n != 0 {
		t.Fatalf("NumberEnd of a string = %d, want 0", n)
	}
}

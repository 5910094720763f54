package jsonfast

import (
	"encoding/json"
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

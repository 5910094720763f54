package schema

import (
	"encoding/json"
	"slices"

	"github.com/sandflow/sandflow/abi/jsonwire"
)

// Tool inputs are decoded, filled from defaults, validated and encoded
// again at every call. JSON that json.Marshal would write itself (compact,
// printable ASCII without <, > and &, no escapes) is read and written here
// by hand, with the values Decode and Encode otherwise give: the
// validator's decoder, and json.Marshal. Anything else goes to those.
// plain_test.go compares the two on every input.

// decodePlain reads raw if jsonwire.PlainRaw takes it and no string in it
// has an escape, reporting whether it did.
func decodePlain(raw []byte) (any, bool) {
	if !jsonwire.PlainRaw(raw) {
		return nil, false
	}
	p := plainReader{b: raw}
	v, ok := p.value()
	return v, ok && p.i == len(raw)
}

// plainReader reads a compact, valid JSON text.
type plainReader struct {
	b []byte
	i int
}

func (p *plainReader) value() (any, bool) {
	switch c := p.b[p.i]; {
	case c == '{':
		m := map[string]any{}
		p.i++
		if p.b[p.i] == '}' {
			p.i++
			return m, true
		}
		for {
			k, ok := p.str()
			if !ok {
				return nil, false
			}
			p.i++ // the colon
			v, ok := p.value()
			if !ok {
				return nil, false
			}
			m[k] = v
			c := p.b[p.i]
			p.i++
			if c == '}' {
				return m, true
			}
		}
	case c == '[':
		a := []any{}
		p.i++
		if p.b[p.i] == ']' {
			p.i++
			return a, true
		}
		for {
			v, ok := p.value()
			if !ok {
				return nil, false
			}
			a = append(a, v)
			c := p.b[p.i]
			p.i++
			if c == ']' {
				return a, true
			}
		}
	case c == '"':
		return p.str()
	case c == 't':
		p.i += 4
		return true, true
	case c == 'f':
		p.i += 5
		return false, true
	case c == 'n':
		p.i += 4
		return nil, true
	default:
		j := jsonwire.NumberEnd(p.b, p.i)
		n := json.Number(p.b[p.i:j])
		p.i = j
		return n, true
	}
}

// str reads a string without escapes.
func (p *plainReader) str() (string, bool) {
	v, j, ok := jsonwire.StringAt(p.b, p.i)
	if !ok {
		return "", false
	}
	p.i = j
	return string(v), true
}

// appendPlain appends v's encoding as json.Marshal writes it, for values
// of the decoder's types with plain strings and keys, reporting whether it
// did.
func appendPlain(b []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case bool:
		if x {
			return append(b, "true"...), true
		}
		return append(b, "false"...), true
	case string:
		if !jsonwire.PlainString(x) {
			return nil, false
		}
		return append(append(append(b, '"'), x...), '"'), true
	case json.Number:
		// json.Marshal writes a Number as it is once it checks it is one.
		if !jsonwire.PlainRaw([]byte(x)) || x == "" || x[0] != '-' && (x[0] < '0' || x[0] > '9') {
			return nil, false
		}
		return append(b, x...), true
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendPlain(b, e); !ok {
				return nil, false
			}
		}
		return append(b, ']'), true
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if !jsonwire.PlainString(k) {
				return nil, false
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = append(append(append(b, '"'), k...), '"', ':')
			var ok bool
			if b, ok = appendPlain(b, x[k]); !ok {
				return nil, false
			}
		}
		return append(b, '}'), true
	}
	return nil, false
}

// Encode encodes a value Decode made (with defaults applied, say) as
// json.Marshal does.
func Encode(v any) ([]byte, error) {
	if b, ok := appendPlain(nil, v); ok {
		return b, nil
	}
	return json.Marshal(v)
}

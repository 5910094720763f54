package sandflow

import (
	"encoding/json"
	"math"
	"strconv"
)

// unencodable is the payload sent for a value that could not be encoded:
// the host refuses it (it is not JSON) and records the refusal, so the op
// takes its position live and on replay alike.
var unencodable = []byte("\x00unencodable")

// encodeValue encodes a value as JSON. Scalars skip encoding/json's
// reflection, which is slow in a WebAssembly guest, with the same output.
func encodeValue(v any) ([]byte, error) {
	switch x := v.(type) {
	case int:
		return strconv.AppendInt(nil, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(nil, x, 10), nil
	case bool:
		return strconv.AppendBool(nil, x), nil
	case float64:
		if !math.IsNaN(x) && !math.IsInf(x, 0) && x == math.Trunc(x) && math.Abs(x) < 1e15 {
			return strconv.AppendInt(nil, int64(x), 10), nil
		}
	case string:
		if s, ok := plainString(x); ok {
			return s, nil
		}
	case json.RawMessage:
		if json.Valid(x) {
			return append([]byte(nil), x...), nil
		}
	}
	return json.Marshal(v)
}

// plainString encodes a string that needs no escaping.
func plainString(s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return nil, false
		}
	}
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), true
}

// decodeValue decodes a JSON value into v. Scalars skip encoding/json's
// reflection, which is slow in a WebAssembly guest; everything else goes
// through json.Unmarshal, with the same results.
func decodeValue(raw []byte, v any) error {
	switch p := v.(type) {
	case *struct{}:
		if string(raw) == "null" {
			return nil
		}
	case *json.RawMessage:
		*p = append((*p)[:0], raw...)
		return nil
	case *int:
		if n, err := strconv.ParseInt(string(raw), 10, 0); err == nil {
			*p = int(n)
			return nil
		}
	case *int64:
		if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			*p = n
			return nil
		}
	case *bool:
		switch string(raw) {
		case "true":
			*p = true
			return nil
		case "false":
			*p = false
			return nil
		}
	case *string:
		if s, ok := simpleString(raw); ok {
			*p = s
			return nil
		}
	}
	return json.Unmarshal(raw, v)
}

// simpleString returns a JSON string without escapes as a Go string.
func simpleString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	for _, c := range raw[1 : len(raw)-1] {
		if c == '\\' || c == '"' || c < 0x20 || c >= 0x80 {
			return "", false
		}
	}
	return string(raw[1 : len(raw)-1]), true
}

package sandflow

import (
	"encoding/json"
	"strconv"
)

// decodeValue decodes a JSON value into v. Scalars skip encoding/json's
// reflection, which is slow in a WebAssembly guest; everything else goes
// through json.Unmarshal, with the same results.
func decodeValue(raw []byte, v any) error {
	switch p := v.(type) {
	case *struct{}:
		return nil
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

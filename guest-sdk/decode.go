package sandflow

import (
	"encoding/json"
	"reflect"
	"strconv"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/abi/jsonwire"
)

// unencodable is the payload sent for a value that could not be encoded:
// the host refuses it (it is not JSON) and records the refusal, so the op
// takes its position live and on replay alike.
var unencodable = []byte("\x00unencodable")

// encodeValue encodes a value as JSON.
func encodeValue(v any) ([]byte, error) { return appendValue(nil, v) }

// appendValue appends a value's JSON encoding to dst. Scalars, strings
// and raw JSON skip encoding/json's reflection, which is slow in a
// WebAssembly guest, with the same output (abi/jsonwire's writers) and no
// allocation.
func appendValue(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case int:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(dst, x, 10), nil
	case bool:
		return strconv.AppendBool(dst, x), nil
	case float64:
		if b, ok := jsonwire.AppendFloat(dst, x, 64); ok {
			return b, nil
		}
	case string:
		return jsonwire.AppendString(dst, x), nil
	case json.RawMessage:
		if b, ok := jsonwire.AppendRaw(dst, x); ok {
			return b, nil
		}
	default:
		if b, ok := appendStruct(dst, v); ok {
			return b, nil
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

// appendTyped is appendValue for a value whose type is known where it is
// called: scalars are appended without first being put in an interface,
// which for most values is an allocation (one per step of a long run).
func appendTyped[T any](dst []byte, v T) ([]byte, error) {
	switch p := any(&v).(type) {
	case *int:
		return strconv.AppendInt(dst, int64(*p), 10), nil
	case *int64:
		return strconv.AppendInt(dst, *p, 10), nil
	case *bool:
		return strconv.AppendBool(dst, *p), nil
	case *string:
		return jsonwire.AppendString(dst, *p), nil
	}
	return appendValue(dst, v)
}

// decodeValue decodes a JSON value into v. Scalars skip encoding/json's
// reflection, which is slow in a WebAssembly guest; everything else goes
// through json.Unmarshal, with the same results.
func decodeValue(raw []byte, v any) error {
	if decodeScalar(raw, v) {
		return nil
	}
	return json.Unmarshal(raw, v)
}

// decodeTyped is decodeValue into a *T, and decodes plain structs itself
// too (structcodec.go): dst is not made to escape to the heap (only the
// slower paths decode into a copy there), so a caller can decode into a
// local.
func decodeTyped[T any](raw []byte, dst *T) error {
	if decodeScalar(raw, dst) {
		return nil
	}
	tmp := new(T)
	*tmp = *dst
	if rv := reflect.ValueOf(tmp).Elem(); rv.Kind() == reflect.Struct {
		if decodeStruct(raw, rv) {
			*dst = *tmp
			return nil
		}
		*tmp = *dst // undo what it set before it gave up
	}
	if err := json.Unmarshal(raw, tmp); err != nil {
		return err
	}
	*dst = *tmp
	return nil
}

// decodeScalar decodes the scalars decodeValue decodes itself, reporting
// whether v was one of them and raw its plain encoding.
func decodeScalar(raw []byte, v any) bool {
	switch p := v.(type) {
	case *struct{}:
		return string(raw) == "null"
	case *json.RawMessage:
		*p = append((*p)[:0], raw...)
		return true
	case *int:
		if n, ok := plainInt(raw); ok {
			*p = int(n)
			return true
		}
	case *int64:
		if n, ok := plainInt(raw); ok {
			*p = n
			return true
		}
	case *bool:
		switch string(raw) {
		case "true":
			*p = true
			return true
		case "false":
			*p = false
			return true
		}
	case *string:
		if s, ok := simpleString(raw); ok {
			*p = s
			return true
		}
	case *abi.AskAnswer:
		return decodeAnswer(raw, p)
	}
	return false
}

// plainInt decodes a JSON integer of at most 18 digits (so it cannot
// overflow; int is 64 bits in a wasip1 guest): a step's counter or index
// on every replayed op, where strconv's general parsing was a good part of
// the guest's time. Anything else (longer, a fraction, an exponent, a
// leading zero or plus sign) goes to json.Unmarshal, which decides. It is
// small enough for the compiler to inline: a call costs tens of
// nanoseconds in a guest.
func plainInt(raw []byte) (int64, bool) {
	sign := int64(1)
	if len(raw) > 1 && raw[0] == '-' {
		sign, raw = -1, raw[1:]
	}
	if uint(len(raw)-1) > 17 || (raw[0] == '0' && len(raw) > 1) { // 1 to 18 digits: uint(-1) is large
		return 0, false
	}
	var n int64
	for _, c := range raw {
		if c-'0' > 9 { // below '0' wraps around
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return sign * n, true
}

// simpleString returns the JSON string raw as json.Unmarshal decodes it.
func simpleString(raw []byte) (string, bool) {
	v, j, ok := jsonwire.ReadString(raw, 0)
	if !ok || !jsonwire.End(raw, j) {
		return "", false
	}
	return string(v), true
}

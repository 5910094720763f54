// Package jsonutil holds the two JSON helpers the host's packages share:
// marshalling a value that cannot fail to marshal, and the strict decoding
// of an op's payload.
package jsonutil

import (
	"encoding/json"
	"strings"
)

// Must is json.Marshal of a value whose types always marshal. It panics
// otherwise: that is a bug in the caller, not bad input.
func Must(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// DecodeStrict decodes a JSON object payload into v, refusing unknown
// fields and trailing data, and returns a message saying what is wrong
// with it, or "".
func DecodeStrict(payload []byte, v any) string {
	if len(payload) == 0 {
		return "payload is empty"
	}
	dec := json.NewDecoder(strings.NewReader(string(payload)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return "malformed payload: " + err.Error()
	}
	if dec.More() {
		return "malformed payload: trailing data"
	}
	return ""
}

package sandflow

import (
	"bytes"
	"encoding/json"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/abi/jsonwire"
)

// The SDK's own question and answer, and a step attempt's input, encoded
// and decoded with abi/jsonwire rather than encoding/json's reflection,
// which costs tens of microseconds a value in a WebAssembly guest: a run
// that asks pays it on every question and answer, live and on replay.
// The output is byte for byte encoding/json's; what the readers do not
// take goes to encoding/json.

// appendAskRequest appends req's JSON encoding, as json.Marshal makes it.
func appendAskRequest(dst []byte, req AskRequest) ([]byte, error) {
	if b, ok := abi.AppendAskRequestJSON(dst, req); ok {
		return b, nil
	}
	b, err := json.Marshal(req)
	return append(dst, b...), err
}

// decodeAnswer decodes an answer as json.Unmarshal does: an object of
// the three keys, spelt exactly, with string or null values, read with
// abi/jsonwire. It reports false for anything else, which json.Unmarshal
// then decodes (it also matches keys case-insensitively, and judges what
// is malformed).
func decodeAnswer(raw []byte, a *abi.AskAnswer) bool {
	out := *a // as json.Unmarshal, keys not given leave fields as they are
	// One copy of the answer, whose parts the values are when they hold
	// no escape: one allocation instead of one a value.
	var body string
	str := func(i int, dst *string) (int, bool) {
		if jsonwire.IsNull(raw, i) {
			return i + 4, true
		}
		v, j, ok := jsonwire.ReadString(raw, i)
		if !ok {
			return 0, false
		}
		if len(v) > 0 && &v[0] == &raw[i+1] { // v is raw's own bytes
			if body == "" {
				body = string(raw)
			}
			*dst = body[i+1 : i+1+len(v)]
		} else {
			*dst = string(v)
		}
		return j, true
	}
	i, ok := jsonwire.Object(raw, jsonwire.SkipSpace(raw, 0), func(key []byte, i int) (int, bool) {
		switch string(key) {
		case "status":
			return str(i, &out.Status)
		case "optionId":
			return str(i, &out.OptionID)
		case "text":
			return str(i, &out.Text)
		}
		return 0, false
	})
	if !ok || !jsonwire.End(raw, i) {
		return false
	}
	*a = out
	return true
}

// decodeStepInput decodes a step attempt's input as the host writes it
// (json.Marshal of abi.StepInput: these keys, in this order, no spaces),
// with abi/jsonwire's readers, which read each value as json.Unmarshal
// does; it reports false for anything else, which json.Unmarshal then
// decodes.
func decodeStepInput(raw []byte, in *abi.StepInput) bool {
	p := jsonwire.Reader{B: raw}
	var out abi.StepInput
	if !p.Lit(`{"name":`) || !p.Str(&out.Name) || !p.Lit(`,"input":`) {
		return false
	}
	value, j, ok := jsonwire.ReadRaw(p.B, 0)
	if !ok {
		return false
	}
	p.B = p.B[j:]
	if !p.Lit(`,"stepId":`) || !p.Str(&out.StepID) || !p.Lit(`,"attempt":`) || !p.Int(&out.Attempt) ||
		!p.Lit(`,"runId":`) || !p.Str(&out.RunID) || !p.Lit(`}`) || len(p.B) != 0 {
		return false
	}
	out.Input = bytes.Clone(value)
	*in = out
	return true
}

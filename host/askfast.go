package host

import (
	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/abi/jsonwire"
)

// A question's payload is decoded when the guest asks, encoded into its
// ask_opened event, and decoded from it again to answer and to list the
// question, at every question of every run. Payloads in the layout
// json.Marshal writes (as the Go SDK does), with plain strings, are read
// and written here by hand; anything else goes to encoding/json, which
// also judges what is malformed. TestAskFastLikeJSON compares the two.

// decodeAskFast decodes payload into a zero req if it is in json.Marshal's
// layout of an AskRequest with plain strings, reporting whether it was;
// req is then what decodeStrict would make of it.
func decodeAskFast(payload []byte, req *abi.AskRequest) bool {
	p := jsonwire.Reader{B: payload}
	if !p.Lit(`{"prompt":`) || !p.Str(&req.Prompt) {
		return false
	}
	if p.Lit(`,"title":`) && !p.Str(&req.Title) {
		return false
	}
	if p.Lit(`,"display":`) && !p.Str(&req.Display) {
		return false
	}
	if p.Lit(`,"options":[`) {
		for {
			var o abi.AskOption
			if !p.Lit(`{"id":`) || !p.Str(&o.ID) || !p.Lit(`,"label":`) || !p.Str(&o.Label) {
				return false
			}
			if p.Lit(`,"description":`) && !p.Str(&o.Description) {
				return false
			}
			if p.Lit(`,"style":`) && !p.Str(&o.Style) {
				return false
			}
			if !p.Lit(`}`) {
				return false
			}
			req.Options = append(req.Options, o)
			if p.Lit(`]`) {
				break
			}
			if !p.Lit(`,`) {
				return false
			}
		}
	}
	if p.Lit(`,"allowFreeform":true`) {
		req.AllowFreeform = true
	}
	return p.Lit(`}`) && len(p.B) == 0
}

// encodeAskRequest encodes req as json.Marshal does, byte for byte.
func encodeAskRequest(req abi.AskRequest) []byte {
	if b, ok := abi.AppendAskRequestJSON(make([]byte, 0, 64+len(req.Prompt)+len(req.Title)+48*len(req.Options)), req); ok {
		return b
	}
	return mustJSON(req)
}

// decodeOutcome decodes a complete or step_complete payload, as
// decodeStrict does. The payload of a result, {"result":v} with v compact
// and plain (as the Go SDK writes it), is read by hand; out.Result then
// aliases payload. TestOutcomeFastLikeStrict compares the two.
func decodeOutcome(payload []byte, out *abi.Outcome) string {
	const head = `{"result":`
	if len(payload) > len(head)+1 && string(payload[:len(head)]) == head && payload[len(payload)-1] == '}' {
		if v := payload[len(head) : len(payload)-1]; jsonwire.PlainRaw(v) {
			*out = abi.Outcome{Result: v}
			return ""
		}
	}
	return decodeStrict(payload, out)
}

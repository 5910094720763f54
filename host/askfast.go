package host

import (
	"bytes"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/internal/jsonfast"
)

// A question's payload is decoded when the guest asks and encoded into its
// ask_opened event, at every question of every run. Payloads in the layout
// json.Marshal writes (as the Go SDK does), with plain strings, are read
// and written here by hand; anything else goes to encoding/json, which
// also judges what is malformed. TestAskFastLikeJSON compares the two.

// decodeAskFast decodes payload into a zero req if it is in json.Marshal's
// layout of an AskRequest with plain strings, reporting whether it was;
// req is then what decodeStrict would make of it.
func decodeAskFast(payload []byte, req *abi.AskRequest) bool {
	p := askReader{b: payload}
	if !p.lit(`{"prompt":`) || !p.str(&req.Prompt) {
		return false
	}
	if p.lit(`,"title":`) && !p.str(&req.Title) {
		return false
	}
	if p.lit(`,"display":`) && !p.str(&req.Display) {
		return false
	}
	if p.lit(`,"options":[`) {
		for {
			var o abi.AskOption
			if !p.lit(`{"id":`) || !p.str(&o.ID) || !p.lit(`,"label":`) || !p.str(&o.Label) {
				return false
			}
			if p.lit(`,"description":`) && !p.str(&o.Description) {
				return false
			}
			if p.lit(`,"style":`) && !p.str(&o.Style) {
				return false
			}
			if !p.lit(`}`) {
				return false
			}
			req.Options = append(req.Options, o)
			if p.lit(`]`) {
				break
			}
			if !p.lit(`,`) {
				return false
			}
		}
	}
	if p.lit(`,"allowFreeform":true`) {
		req.AllowFreeform = true
	}
	return p.lit(`}`) && len(p.b) == 0
}

// askReader reads an ask payload from its start.
type askReader struct{ b []byte }

func (p *askReader) lit(s string) bool {
	if !bytes.HasPrefix(p.b, []byte(s)) {
		return false
	}
	p.b = p.b[len(s):]
	return true
}

// str takes a quoted string of printable ASCII without escapes, which
// decodes to its bytes.
func (p *askReader) str(dst *string) bool {
	if len(p.b) == 0 || p.b[0] != '"' {
		return false
	}
	for i := 1; i < len(p.b); i++ {
		switch c := p.b[i]; {
		case c == '"':
			*dst, p.b = string(p.b[1:i]), p.b[i+1:]
			return true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return false
		}
	}
	return false
}

// encodeAskRequest encodes req as json.Marshal does, byte for byte.
func encodeAskRequest(req abi.AskRequest) []byte {
	if !plainAskRequest(req) {
		return mustJSON(req)
	}
	field := func(b []byte, sep byte, k, v string) []byte {
		b = append(append(append(b, sep, '"'), k...), `":"`...)
		return append(append(b, v...), '"')
	}
	b := make([]byte, 0, 64+len(req.Prompt)+len(req.Title)+48*len(req.Options))
	b = field(b, '{', "prompt", req.Prompt)
	if req.Title != "" {
		b = field(b, ',', "title", req.Title)
	}
	if req.Display != "" {
		b = field(b, ',', "display", req.Display)
	}
	for i, o := range req.Options {
		if i == 0 {
			b = append(b, `,"options":[`...)
		} else {
			b = append(b, ',')
		}
		b = field(b, '{', "id", o.ID)
		b = field(b, ',', "label", o.Label)
		if o.Description != "" {
			b = field(b, ',', "description", o.Description)
		}
		if o.Style != "" {
			b = field(b, ',', "style", o.Style)
		}
		b = append(b, '}')
	}
	if len(req.Options) > 0 {
		b = append(b, ']')
	}
	if req.AllowFreeform {
		b = append(b, `,"allowFreeform":true`...)
	}
	return append(b, '}')
}

func plainAskRequest(req abi.AskRequest) bool {
	if !jsonfast.PlainString(req.Prompt) || !jsonfast.PlainString(req.Title) || !jsonfast.PlainString(req.Display) {
		return false
	}
	for _, o := range req.Options {
		if !jsonfast.PlainString(o.ID) || !jsonfast.PlainString(o.Label) || !jsonfast.PlainString(o.Description) || !jsonfast.PlainString(o.Style) {
			return false
		}
	}
	return true
}

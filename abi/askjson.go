package abi

import "github.com/sandflow/sandflow/abi/jsonwire"

// AppendAskRequestJSON appends r's JSON encoding as json.Marshal makes it,
// byte for byte, without its reflection (which costs tens of
// microseconds in a WebAssembly guest), when every string in r is one
// json.Marshal writes as it is; ok false means it appended nothing and
// the caller uses json.Marshal. The guest SDK encodes its questions with
// it, and the host the questions it records.
func AppendAskRequestJSON(dst []byte, r AskRequest) (b []byte, ok bool) {
	if !jsonwire.PlainString(r.Prompt) || !jsonwire.PlainString(r.Title) || !jsonwire.PlainString(r.Display) {
		return dst, false
	}
	for _, o := range r.Options {
		if !jsonwire.PlainString(o.ID) || !jsonwire.PlainString(o.Label) || !jsonwire.PlainString(o.Description) || !jsonwire.PlainString(o.Style) {
			return dst, false
		}
	}
	dst = appendField(dst, '{', "prompt", r.Prompt)
	if r.Title != "" {
		dst = appendField(dst, ',', "title", r.Title)
	}
	if r.Display != "" {
		dst = appendField(dst, ',', "display", r.Display)
	}
	for i, o := range r.Options {
		if i == 0 {
			dst = append(dst, `,"options":[`...)
		} else {
			dst = append(dst, ',')
		}
		dst = appendField(dst, '{', "id", o.ID)
		dst = appendField(dst, ',', "label", o.Label)
		if o.Description != "" {
			dst = appendField(dst, ',', "description", o.Description)
		}
		if o.Style != "" {
			dst = appendField(dst, ',', "style", o.Style)
		}
		dst = append(dst, '}')
	}
	if len(r.Options) > 0 {
		dst = append(dst, ']')
	}
	if r.AllowFreeform {
		dst = append(dst, `,"allowFreeform":true`...)
	}
	return append(dst, '}'), true
}

// appendField appends sep, then "key":"v" for a v json.Marshal writes as
// it is.
func appendField(dst []byte, sep byte, key, v string) []byte {
	dst = append(dst, sep, '"')
	dst = append(dst, key...)
	dst = append(dst, `":"`...)
	dst = append(dst, v...)
	return append(dst, '"')
}

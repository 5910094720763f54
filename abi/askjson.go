package abi

import "github.com/sandflow/sandflow/abi/jsonwire"

// AppendAskRequestJSON appends r's JSON encoding as json.Marshal makes it,
// byte for byte, without its reflection (which costs tens of
// microseconds in a WebAssembly guest). The guest SDK encodes its
// questions with it, and the host the questions it records. ok is always
// true: it was false, for the caller to use json.Marshal, for strings
// this function once left to it, and is kept for the callers that check
// it.
func AppendAskRequestJSON(dst []byte, r AskRequest) (b []byte, ok bool) {
	dst = jsonwire.AppendString(append(dst, `{"prompt":`...), r.Prompt)
	if r.Title != "" {
		dst = jsonwire.AppendString(append(dst, `,"title":`...), r.Title)
	}
	if r.Display != "" {
		dst = jsonwire.AppendString(append(dst, `,"display":`...), r.Display)
	}
	for i, o := range r.Options {
		if i == 0 {
			dst = append(dst, `,"options":[`...)
		} else {
			dst = append(dst, ',')
		}
		dst = jsonwire.AppendString(append(dst, `{"id":`...), o.ID)
		dst = jsonwire.AppendString(append(dst, `,"label":`...), o.Label)
		if o.Description != "" {
			dst = jsonwire.AppendString(append(dst, `,"description":`...), o.Description)
		}
		if o.Style != "" {
			dst = jsonwire.AppendString(append(dst, `,"style":`...), o.Style)
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

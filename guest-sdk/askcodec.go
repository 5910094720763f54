package sandflow

import (
	"bytes"
	"encoding/json"

	"github.com/sandflow/sandflow/abi"
)

// The SDK's own question and answer, and a step attempt's input, encoded
// and decoded without
// encoding/json's reflection, which costs tens of microseconds a value in
// a WebAssembly guest: a run that asks pays it on every question and
// answer, live and on replay. Only values whose strings are plain (ASCII
// without anything JSON or encoding/json's HTML escaping would escape)
// take this path, and its output is then byte for byte encoding/json's;
// anything else goes to encoding/json.

// appendAskRequest appends req's JSON encoding, as json.Marshal makes it.
func appendAskRequest(dst []byte, req AskRequest) ([]byte, error) {
	if b, ok := abi.AppendAskRequestJSON(dst, req); ok {
		return b, nil
	}
	b, err := json.Marshal(req)
	return append(dst, b...), err
}

// decodeAnswer decodes an answer the host wrote: an object of the three
// keys, spelt exactly, with plain string values and no spaces. It reports
// false for anything else, which json.Unmarshal then decodes (it also
// matches keys case-insensitively, unescapes, and so on).
func decodeAnswer(raw []byte, a *abi.AskAnswer) bool {
	if len(raw) < 2 || raw[0] != '{' || raw[len(raw)-1] != '}' {
		return false
	}
	out := *a // as json.Unmarshal, keys not given leave fields as they are
	// One copy of the answer, whose parts the values are: one allocation
	// instead of one a key and one a value.
	body := string(raw[1 : len(raw)-1])
	for len(body) > 0 {
		key, rest, ok := plainAt(body)
		if !ok || len(rest) == 0 || rest[0] != ':' {
			return false
		}
		val, rest, ok := plainAt(rest[1:])
		if !ok {
			return false
		}
		switch key {
		case "status":
			out.Status = val
		case "optionId":
			out.OptionID = val
		case "text":
			out.Text = val
		default:
			return false
		}
		if len(rest) > 0 {
			if rest[0] != ',' || len(rest) == 1 {
				return false
			}
			rest = rest[1:]
		}
		body = rest
	}
	*a = out
	return true
}

// plainAt reads a JSON string without escapes or non-ASCII bytes at the
// start of b: its contents and what follows, parts of b.
func plainAt[T string | []byte](b T) (s, rest T, ok bool) {
	if len(b) < 2 || b[0] != '"' {
		return s, rest, false
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return b[1:i], b[i+1:], true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return s, rest, false
		}
	}
	return s, rest, false
}

// plainStringAt is plainAt on bytes, with the contents as a string.
func plainStringAt(b []byte) (s string, rest []byte, ok bool) {
	v, rest, ok := plainAt(b)
	return string(v), rest, ok
}

// decodeStepInput decodes a step attempt's input as the host writes it
// (json.Marshal of abi.StepInput: these keys, in this order, no spaces)
// when its strings are plain; it reports false for anything else, which
// json.Unmarshal then decodes. The step's own input is any JSON value: it
// is found as what lies between "input": and the last ,"stepId":" (a
// string holding that sequence would have its quotes escaped, and the
// plain strings after it cannot hold a quote), and checked with
// json.Valid.
func decodeStepInput(raw []byte, in *abi.StepInput) bool {
	const (
		head    = `{"name":`
		input   = `,"input":`
		stepID  = `,"stepId":`
		attempt = `,"attempt":`
		runID   = `,"runId":`
	)
	if !bytes.HasPrefix(raw, []byte(head)) {
		return false
	}
	name, rest, ok := plainStringAt(raw[len(head):])
	if !ok || !bytes.HasPrefix(rest, []byte(input)) {
		return false
	}
	rest = rest[len(input):]
	i := bytes.LastIndex(rest, []byte(stepID+`"`))
	if i < 0 {
		return false
	}
	value, tail := rest[:i], rest[i+len(stepID):]
	id, tail, ok := plainStringAt(tail)
	if !ok || !bytes.HasPrefix(tail, []byte(attempt)) {
		return false
	}
	tail = tail[len(attempt):]
	j := bytes.IndexByte(tail, ',')
	if j < 0 {
		return false
	}
	n, ok := plainInt(tail[:j])
	if !ok || !bytes.HasPrefix(tail[j:], []byte(runID)) {
		return false
	}
	run, tail, ok := plainStringAt(tail[j+len(runID):])
	if !ok || string(tail) != "}" || len(value) == 0 || space(value[0]) || space(value[len(value)-1]) || !json.Valid(value) {
		return false // json.Valid allows the spaces around a value that a RawMessage leaves out
	}
	*in = abi.StepInput{Name: name, Input: bytes.Clone(value), StepID: id, Attempt: int(n), RunID: run}
	return true
}

func space(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

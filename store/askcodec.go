package store

import (
	"bytes"
	"encoding/json"

	"github.com/sandflow/sandflow/abi/jsonwire"
)

// Question records are read and written at every answered question, as a
// run record is (runcodec.go), so they have the same kind of hand codec:
// json.Marshal's exact layout by hand, with abi/jsonwire's writers and
// readers, and encoding/json for anything else. TestDecodeAskLikeJSON and
// FuzzAskRecord compare them.

// decodeAsk decodes a stored question record.
func decodeAsk(v []byte, a *Ask) error {
	if decodeAskFast(v, a) {
		return nil
	}
	*a = Ask{}
	return json.Unmarshal(v, a)
}

// askOfRun reports whether v, question id's stored record, is laid out as
// the store writes it and names run runID, without decoding the rest: the
// check a write replacing the record makes. False means: decode it.
func askOfRun(v []byte, id, runID string) bool {
	p := jsonwire.Reader{B: v}
	return p.Lit(`{"id":"`) && p.Lit(id) && p.Lit(`","runId":"`) && p.Lit(runID) && p.Lit(`",`)
}

func decodeAskFast(v []byte, a *Ask) bool {
	p := jsonwire.Reader{B: v}
	var pos uint64
	ok := p.Lit(`{"id":`) && p.Str(&a.ID) &&
		p.Lit(`,"runId":`) && p.Str(&a.RunID) &&
		p.Lit(`,"tool":`) && p.Str(&a.Tool) &&
		p.Lit(`,"position":`) && p.Uint(&pos) && pos <= 1<<32-1
	if !ok {
		return false
	}
	a.Position = uint32(pos)
	switch {
	case p.Lit(`,"open":true`):
		a.Open = true
	case p.Lit(`,"open":false`):
		a.Open = false
	default:
		return false
	}
	if !p.Lit(`,"request":`) {
		return false
	}
	// One JSON value, kept as it is, as in a RawMessage.
	req, j, ok := jsonwire.ReadRaw(p.B, 0)
	if !ok {
		return false
	}
	p.B = p.B[j:]
	var created []byte
	if !p.Lit(`,"createdAt":`) || !p.Quoted(&created) || !p.Lit(`}`) || len(p.B) != 0 {
		return false
	}
	if a.CreatedAt.UnmarshalJSON(created) != nil {
		return false
	}
	a.Request = bytes.Clone(req)
	return true
}

// encodeAsk encodes a question record as json.Marshal does, byte for byte.
func encodeAsk(a Ask) ([]byte, error) {
	if b, ok := encodeAskFast(a); ok {
		return b, nil
	}
	return json.Marshal(a)
}

func encodeAskFast(a Ask) ([]byte, bool) {
	// The keys and punctuation, the position, and a time with
	// nanoseconds and a zone: one allocation, when no string needs
	// escapes.
	b := make([]byte, 0, 80+10+jsonwire.MaxTimeLen+len(a.ID)+len(a.RunID)+len(a.Tool)+len(a.Request))
	b = jsonwire.AppendString(append(b, `{"id":`...), a.ID)
	b = jsonwire.AppendString(append(b, `,"runId":`...), a.RunID)
	b = jsonwire.AppendString(append(b, `,"tool":`...), a.Tool)
	b = jsonwire.AppendUint(append(b, `,"position":`...), uint64(a.Position))
	if a.Open {
		b = append(b, `,"open":true`...)
	} else {
		b = append(b, `,"open":false`...)
	}
	b, ok := jsonwire.AppendRaw(append(b, `,"request":`...), a.Request)
	if !ok {
		return nil, false
	}
	if b, ok = jsonwire.AppendTime(append(b, `,"createdAt":`...), a.CreatedAt); !ok {
		return nil, false
	}
	return append(b, '}'), true
}

package store

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/sandflow/sandflow/abi/jsonwire"
)

// Question records are read and written at every answered question, as a
// run record is (runcodec.go), so they have the same kind of hand codec:
// json.Marshal's exact layout by hand when the values allow it, and
// encoding/json for anything else. TestAskCodecLikeJSON compares them.

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

// askTail is what follows the request in the layout json.Marshal writes.
const askTail = `,"createdAt":`

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
	// The request runs to the last ,"createdAt": (the time after it holds
	// no such text), and must be one JSON value without spaces around it.
	end := bytes.LastIndex(p.B, []byte(askTail))
	if end <= 0 {
		return false
	}
	req := p.B[:end]
	p.B = p.B[end+len(askTail):]
	var created []byte
	if !p.Quoted(&created) || !p.Lit(`}`) || len(p.B) != 0 {
		return false
	}
	if !oneValue(req) {
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
	if !jsonwire.PlainString(a.ID) || !jsonwire.PlainString(a.RunID) || !jsonwire.PlainString(a.Tool) {
		return nil, false
	}
	if !jsonwire.PlainRaw(a.Request) {
		return nil, false
	}
	// The keys and punctuation, the position, and a time with
	// nanoseconds and a zone (maxTimeJSON): one allocation.
	b := make([]byte, 0, 80+10+maxTimeJSON+len(a.ID)+len(a.RunID)+len(a.Tool)+len(a.Request))
	b = append(append(append(b, `{"id":"`...), a.ID...), `","runId":"`...)
	b = append(append(b, a.RunID...), `","tool":"`...)
	b = append(append(b, a.Tool...), `","position":`...)
	b = strconv.AppendUint(b, uint64(a.Position), 10)
	if a.Open {
		b = append(b, `,"open":true`...)
	} else {
		b = append(b, `,"open":false`...)
	}
	b = append(append(append(b, `,"request":`...), a.Request...), askTail...)
	b, ok := appendTimeJSON(b, a.CreatedAt)
	if !ok {
		return nil, false
	}
	return append(b, '}'), true
}

package store

import (
	"bytes"
	"encoding/json"

	"github.com/sandflow/sandflow/abi/jsonwire"
)

// decodeRun decodes a stored run record. The records the store writes
// (json.Marshal of a Run: its keys in field order, no spaces) are read by
// hand, with abi/jsonwire's readers, which read each value as
// json.Unmarshal does and is several times faster than its reflection;
// a run's record is read several times per resume. Anything else goes to
// json.Unmarshal, which decides. TestDecodeRunLikeJSON and FuzzRunRecord
// compare the two.
func decodeRun(v []byte, r *Run) error {
	if decodeRunFast(v, r) {
		return nil
	}
	*r = Run{}
	return json.Unmarshal(v, r)
}

// decodeRunFast reads a record laid out as json.Marshal writes a Run,
// reporting whether it did; it may leave r half set when it did not.
func decodeRunFast(v []byte, r *Run) bool {
	p := jsonwire.Reader{B: v}
	var createdAt, updatedAt []byte
	ok := p.Lit(`{"id":`) && p.Str(&r.ID) &&
		p.Lit(`,"tool":`) && p.Str(&r.Tool) &&
		p.Lit(`,"plugin":`) && p.Str(&r.Plugin) &&
		p.Lit(`,"version":`) && p.Int(&r.Version) &&
		p.Lit(`,"moduleHash":`) && p.Str(&r.ModuleHash) &&
		p.Lit(`,"status":`) && p.Str((*string)(&r.Status)) &&
		p.Lit(`,"createdAt":`) && p.Quoted(&createdAt) &&
		p.Lit(`,"updatedAt":`) && p.Quoted(&updatedAt) &&
		p.Lit(`,"lastSeq":`) && p.Uint(&r.LastSeq)
	if !ok || r.CreatedAt.UnmarshalJSON(createdAt) != nil || r.UpdatedAt.UnmarshalJSON(updatedAt) != nil {
		return false
	}
	r.Detail = nil
	if p.Lit(`,"detail":`) {
		// One JSON value, kept as it is, as in a RawMessage.
		d, j, ok := jsonwire.ReadRaw(p.B, 0)
		if !ok {
			return false
		}
		r.Detail, p.B = bytes.Clone(d), p.B[j:]
	}
	return p.Lit(`}`) && len(p.B) == 0
}

// runLastSeq reads the LastSeq of run id's stored record without decoding
// the rest, for a write that replaces the record and only checks the log
// is where its caller thinks: a record laid out as the store writes it,
// with id first (as it is: a run id needs no escape), then fields that
// are strings or numbers up to lastSeq. A quote inside a string is
// escaped, so the first ,"lastSeq": is the key. It reports false for
// anything else, which the caller decodes whole. The record's other
// fields are not checked: the write replaces them.
func runLastSeq(v []byte, id string) (uint64, bool) {
	const key = `,"lastSeq":`
	p := jsonwire.Reader{B: v}
	if !p.Lit(`{"id":"`) || !p.Lit(id) || !p.Lit(`",`) {
		return 0, false
	}
	i := bytes.Index(p.B, []byte(key))
	if i < 0 {
		return 0, false
	}
	p.B = p.B[i+len(key):]
	var n uint64
	if !p.Uint(&n) || len(p.B) == 0 || (p.B[0] != ',' && p.B[0] != '}') {
		return 0, false
	}
	return n, true
}

// encodeRun encodes a run record as json.Marshal does, byte for byte,
// with abi/jsonwire's writers; json.Marshal itself only for what it
// refuses (a time outside years 0-9999, a detail that is not JSON), to
// return its error. TestEncodeRunLikeJSON and FuzzRunRecord compare them.
func encodeRun(r Run) ([]byte, error) {
	if b, ok := encodeRunFast(r); ok {
		return b, nil
	}
	return json.Marshal(r)
}

func encodeRunFast(r Run) ([]byte, bool) {
	// The keys and punctuation, two numbers, the status and two times:
	// one allocation, when no string needs escapes.
	b := make([]byte, 0, 120+2*20+len(r.Status)+2*jsonwire.MaxTimeLen+len(r.ID)+len(r.Tool)+len(r.Plugin)+len(r.ModuleHash)+len(r.Detail))
	b = jsonwire.AppendString(append(b, `{"id":`...), r.ID)
	b = jsonwire.AppendString(append(b, `,"tool":`...), r.Tool)
	b = jsonwire.AppendString(append(b, `,"plugin":`...), r.Plugin)
	b = jsonwire.AppendInt(append(b, `,"version":`...), int64(r.Version))
	b = jsonwire.AppendString(append(b, `,"moduleHash":`...), r.ModuleHash)
	b = jsonwire.AppendString(append(b, `,"status":`...), r.Status)
	b, ok := jsonwire.AppendTime(append(b, `,"createdAt":`...), r.CreatedAt)
	if !ok {
		return nil, false
	}
	if b, ok = jsonwire.AppendTime(append(b, `,"updatedAt":`...), r.UpdatedAt); !ok {
		return nil, false
	}
	b = jsonwire.AppendUint(append(b, `,"lastSeq":`...), r.LastSeq)
	if len(r.Detail) > 0 {
		if b, ok = jsonwire.AppendRaw(append(b, `,"detail":`...), r.Detail); !ok {
			return nil, false
		}
	}
	return append(b, '}'), true
}

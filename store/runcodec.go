package store

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/sandflow/sandflow/abi/jsonwire"
)

// decodeRun decodes a stored run record. The records the store writes
// (json.Marshal of a Run: its keys in field order, no spaces) are read by
// hand, which is several times faster than encoding/json's reflection, and
// a run's record is read several times per resume; anything else, or
// anything the hand reader is not sure it reads exactly as encoding/json
// would (an escape, a non-ASCII byte, a long number), goes to
// json.Unmarshal, which decides. TestDecodeRunLikeJSON compares the two.
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
	switch rest := p.B; {
	case len(rest) == 1 && rest[0] == '}':
		return true
	case bytes.HasPrefix(rest, []byte(`,"detail":`)) && rest[len(rest)-1] == '}':
		d := rest[len(`,"detail":`) : len(rest)-1]
		// One JSON value, without the spaces around it encoding/json would
		// leave out of a RawMessage.
		if !oneValue(d) {
			return false
		}
		r.Detail = bytes.Clone(d)
		return true
	}
	return false
}

// runLastSeq reads the LastSeq of run id's stored record without decoding
// the rest, for a write that replaces the record and only checks the log
// is where its caller thinks: a record laid out as the store writes it,
// with id first (a run id needs no escape), then fields that are strings
// or numbers up to lastSeq. A quote inside a string is escaped, so the
// first ,"lastSeq": is the key. It reports false for anything else, which
// the caller decodes whole. The record's other fields are not checked: the
// write replaces them.
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

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// oneValue reports whether b is one JSON value without spaces around it:
// what encoding/json keeps of a RawMessage. What the store writes by hand
// is plain and is checked without encoding/json's scanner.
func oneValue(b []byte) bool {
	return jsonwire.PlainRaw(b) || len(b) > 0 && !isSpace(b[0]) && !isSpace(b[len(b)-1]) && json.Valid(b)
}

// encodeRun encodes a run record as json.Marshal does, byte for byte: by
// hand when every string is printable ASCII that json.Marshal writes as it
// is (no quote, backslash or <, >, &) and json.Marshal would copy the
// detail as it is (jsonwire.PlainRaw); else by json.Marshal. TestEncodeRunLikeJSON compares them.
func encodeRun(r Run) ([]byte, error) {
	if b, ok := encodeRunFast(r); ok {
		return b, nil
	}
	return json.Marshal(r)
}

func encodeRunFast(r Run) ([]byte, bool) {
	if !jsonwire.PlainString(r.ID) || !jsonwire.PlainString(r.Tool) || !jsonwire.PlainString(r.Plugin) || !jsonwire.PlainString(r.ModuleHash) || !jsonwire.PlainString(string(r.Status)) {
		return nil, false
	}
	if len(r.Detail) > 0 && !jsonwire.PlainRaw(r.Detail) {
		return nil, false
	}
	// The keys and punctuation, two numbers, the status and two times:
	// one allocation.
	b := make([]byte, 0, 120+2*20+len(r.Status)+2*maxTimeJSON+len(r.ID)+len(r.Tool)+len(r.Plugin)+len(r.ModuleHash)+len(r.Detail))
	b = append(append(append(b, `{"id":"`...), r.ID...), `","tool":"`...)
	b = append(append(b, r.Tool...), `","plugin":"`...)
	b = append(append(b, r.Plugin...), `","version":`...)
	b = strconv.AppendInt(b, int64(r.Version), 10)
	b = append(append(append(b, `,"moduleHash":"`...), r.ModuleHash...), `","status":"`...)
	b = append(append(b, r.Status...), `","createdAt":`...)
	b, ok := appendTimeJSON(b, r.CreatedAt)
	if !ok {
		return nil, false
	}
	b = append(b, `,"updatedAt":`...)
	if b, ok = appendTimeJSON(b, r.UpdatedAt); !ok {
		return nil, false
	}
	b = append(b, `,"lastSeq":`...)
	b = strconv.AppendUint(b, r.LastSeq, 10)
	if len(r.Detail) > 0 {
		b = append(append(b, `,"detail":`...), r.Detail...)
	}
	return append(b, '}'), true
}

// maxTimeJSON is the longest JSON of a time json.Marshal writes:
// "2006-01-02T15:04:05.999999999-07:00", in quotes.
const maxTimeJSON = 37

// appendTimeJSON appends t as json.Marshal writes it, without its
// allocation; false where json.Marshal fails (a year outside 0-9999).
// A time's JSON is its text in quotes.
func appendTimeJSON(b []byte, t time.Time) ([]byte, bool) {
	b, err := t.AppendText(append(b, '"'))
	return append(b, '"'), err == nil
}

package store

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/sandflow/sandflow/internal/jsonfast"
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
	p := runReader{b: v}
	var createdAt, updatedAt []byte
	ok := p.lit(`{"id":`) && p.str(&r.ID) &&
		p.lit(`,"tool":`) && p.str(&r.Tool) &&
		p.lit(`,"plugin":`) && p.str(&r.Plugin) &&
		p.lit(`,"version":`) && p.int(&r.Version) &&
		p.lit(`,"moduleHash":`) && p.str(&r.ModuleHash) &&
		p.lit(`,"status":`) && p.str((*string)(&r.Status)) &&
		p.lit(`,"createdAt":`) && p.quoted(&createdAt) &&
		p.lit(`,"updatedAt":`) && p.quoted(&updatedAt) &&
		p.lit(`,"lastSeq":`) && p.uint(&r.LastSeq)
	if !ok || r.CreatedAt.UnmarshalJSON(createdAt) != nil || r.UpdatedAt.UnmarshalJSON(updatedAt) != nil {
		return false
	}
	r.Detail = nil
	switch rest := p.b; {
	case len(rest) == 1 && rest[0] == '}':
		return true
	case bytes.HasPrefix(rest, []byte(`,"detail":`)) && rest[len(rest)-1] == '}':
		d := rest[len(`,"detail":`) : len(rest)-1]
		// One JSON value, without the spaces around it encoding/json would
		// leave out of a RawMessage.
		if len(d) == 0 || isSpace(d[0]) || isSpace(d[len(d)-1]) || !json.Valid(d) {
			return false
		}
		r.Detail = bytes.Clone(d)
		return true
	}
	return false
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// runReader reads a run record from its start.
type runReader struct{ b []byte }

func (p *runReader) lit(s string) bool {
	if !bytes.HasPrefix(p.b, []byte(s)) {
		return false
	}
	p.b = p.b[len(s):]
	return true
}

// quoted takes a string of printable ASCII without escapes, quotes and all.
func (p *runReader) quoted(dst *[]byte) bool {
	if len(p.b) == 0 || p.b[0] != '"' {
		return false
	}
	for i := 1; i < len(p.b); i++ {
		switch c := p.b[i]; {
		case c == '"':
			*dst, p.b = p.b[:i+1], p.b[i+1:]
			return true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return false
		}
	}
	return false
}

func (p *runReader) str(dst *string) bool {
	var q []byte
	if !p.quoted(&q) {
		return false
	}
	*dst = string(q[1 : len(q)-1])
	return true
}

// digits takes 1 to 18 decimal digits without a leading zero (so no
// overflow), followed by neither a fraction nor an exponent.
func (p *runReader) digits() (uint64, bool) {
	i := 0
	var n uint64
	for i < len(p.b) && p.b[i] >= '0' && p.b[i] <= '9' {
		n = n*10 + uint64(p.b[i]-'0')
		i++
	}
	if i == 0 || i > 18 || (p.b[0] == '0' && i > 1) {
		return 0, false
	}
	if i < len(p.b) && (p.b[i] == '.' || p.b[i] == 'e' || p.b[i] == 'E') {
		return 0, false
	}
	p.b = p.b[i:]
	return n, true
}

func (p *runReader) uint(dst *uint64) bool {
	n, ok := p.digits()
	*dst = n
	return ok
}

func (p *runReader) int(dst *int) bool {
	neg := len(p.b) > 0 && p.b[0] == '-'
	if neg {
		p.b = p.b[1:]
	}
	n, ok := p.digits()
	*dst = int(n)
	if neg {
		*dst = -*dst
	}
	return ok
}

// encodeRun encodes a run record as json.Marshal does, byte for byte: by
// hand when every string is printable ASCII that json.Marshal writes as it
// is (no quote, backslash or <, >, &) and the detail is compact JSON of
// such bytes; else by json.Marshal. TestEncodeRunLikeJSON compares them.
func encodeRun(r Run) ([]byte, error) {
	if b, ok := encodeRunFast(r); ok {
		return b, nil
	}
	return json.Marshal(r)
}

func encodeRunFast(r Run) ([]byte, bool) {
	if !jsonfast.PlainString(r.ID) || !jsonfast.PlainString(r.Tool) || !jsonfast.PlainString(r.Plugin) || !jsonfast.PlainString(r.ModuleHash) || !jsonfast.PlainString(string(r.Status)) {
		return nil, false
	}
	if len(r.Detail) > 0 && (!compactPlain(r.Detail) || !json.Valid(r.Detail)) {
		return nil, false
	}
	created, err := r.CreatedAt.MarshalJSON()
	if err != nil {
		return nil, false
	}
	updated, err := r.UpdatedAt.MarshalJSON()
	if err != nil {
		return nil, false
	}
	b := make([]byte, 0, 160+len(r.ID)+len(r.Tool)+len(r.Plugin)+len(r.ModuleHash)+len(r.Detail))
	b = append(append(append(b, `{"id":"`...), r.ID...), `","tool":"`...)
	b = append(append(b, r.Tool...), `","plugin":"`...)
	b = append(append(b, r.Plugin...), `","version":`...)
	b = strconv.AppendInt(b, int64(r.Version), 10)
	b = append(append(append(b, `,"moduleHash":"`...), r.ModuleHash...), `","status":"`...)
	b = append(append(b, r.Status...), `","createdAt":`...)
	b = append(append(b, created...), `,"updatedAt":`...)
	b = append(append(b, updated...), `,"lastSeq":`...)
	b = strconv.AppendUint(b, r.LastSeq, 10)
	if len(r.Detail) > 0 {
		b = append(append(b, `,"detail":`...), r.Detail...)
	}
	return append(b, '}'), true
}

// compactPlain: JSON json.Marshal copies as it is into a RawMessage's
// place, which compacts it and escapes <, > and &: printable ASCII with
// none of those and no spaces (a string with a space in it is left to
// json.Marshal too).
func compactPlain(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

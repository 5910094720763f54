package sse

import (
	"bufio"
	"bytes"
	"io"
)

// MaxLine is the longest line a Reader reads; a longer one is the error
// bufio.ErrTooLong.
const MaxLine = 16 << 20

// Reader reads the events of a stream as a client does (the HTML
// standard's event stream interpretation): a line ends at LF, CRLF or a
// lone CR; a line that starts with a colon is a comment; a field's value
// loses one leading space; data lines are joined with LF; a blank line
// ends an event, which is dispatched only when it has data. It is for the
// harnesses and tests that read the streams Writer writes.
type Reader struct {
	sc *bufio.Scanner
}

// NewReader reads events from r.
func NewReader(r io.Reader) *Reader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLine)
	sc.Split(scanLines)
	return &Reader{sc: sc}
}

// Next returns the next event. Its ID is the event's own id field, ""
// when it has none (a client would keep the last one). At the end of
// the stream it returns io.EOF; an event the stream ended in the middle
// of is dropped, as a client drops it.
func (r *Reader) Next() (Event, error) {
	var e Event
	var data []byte
	hasData := false
	for r.sc.Scan() {
		line := r.sc.Bytes()
		if len(line) == 0 {
			if !hasData {
				e = Event{} // nothing to dispatch: the fields are dropped
				continue
			}
			e.Data = data
			return e, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value, ok := bytes.Cut(line, []byte(":"))
		if ok {
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		switch string(field) {
		case "event":
			e.Type = string(value)
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				e.ID = string(value)
			}
		}
	}
	if err := r.sc.Err(); err != nil {
		return Event{}, err
	}
	return Event{}, io.EOF
}

// scanLines splits at LF, CRLF or a lone CR. A CR at the end of what has
// been read waits for the next byte, unless the input ends there.
func scanLines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	i := bytes.IndexAny(data, "\r\n")
	switch {
	case i < 0:
		if atEOF && len(data) > 0 {
			return len(data), data, nil
		}
		return 0, nil, nil
	case data[i] == '\n':
		return i + 1, data[:i], nil
	case i+1 < len(data):
		if data[i+1] == '\n' {
			return i + 2, data[:i], nil
		}
		return i + 1, data[:i], nil
	case atEOF:
		return i + 1, data[:i], nil
	default:
		return 0, nil, nil // a CR last: is an LF next?
	}
}

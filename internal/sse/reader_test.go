package sse_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/internal/sse"
)

func readAll(t *testing.T, stream string) []sse.Event {
	t.Helper()
	r := sse.NewReader(strings.NewReader(stream))
	var out []sse.Event
	for {
		e, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
}

// The Reader reads a stream as a client does.
func TestReaderReadsAsAClient(t *testing.T) {
	for _, c := range []struct {
		name, stream string
		want         []sse.Event
	}{
		{"fields", "id: 3\nevent: step\ndata: {}\n\n", []sse.Event{{ID: "3", Type: "step", Data: []byte("{}")}}},
		{"data lines joined with LF", "data: a\ndata:b\ndata:  c\n\n", []sse.Event{{Data: []byte("a\nb\n c")}}},
		{"CRLF and lone CR end lines", "event: x\r\ndata: a\rdata: b\r\n\r\n", []sse.Event{{Type: "x", Data: []byte("a\nb")}}},
		{"comments and keep-alives", ": keep-alive\n\n: hi\ndata: x\n\n", []sse.Event{{Data: []byte("x")}}},
		{"an event without data is not dispatched", "event: ping\n\ndata: y\n\n", []sse.Event{{Data: []byte("y")}}},
		{"empty data is dispatched", "event: end\ndata: \n\n", []sse.Event{{Type: "end", Data: []byte("")}}},
		{"a field without a colon", "data\n\n", []sse.Event{{Data: []byte("")}}},
		{"unknown fields and retry are ignored", "retry: 10\nfoo: bar\ndata: z\n\n", []sse.Event{{Data: []byte("z")}}},
		{"an id with NUL is ignored", "id: a\x00b\ndata: z\n\n", []sse.Event{{Data: []byte("z")}}},
		{"an event the stream ended in is dropped", "data: whole\n\ndata: cut", []sse.Event{{Data: []byte("whole")}}},
		{"a CR last ends the stream's last line", "data: a\r\r", []sse.Event{{Data: []byte("a")}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := readAll(t, c.stream)
			if len(got) != len(c.want) {
				t.Fatalf("read %+v, want %+v", got, c.want)
			}
			for i := range got {
				if got[i].ID != c.want[i].ID || got[i].Type != c.want[i].Type || !bytes.Equal(got[i].Data, c.want[i].Data) {
					t.Errorf("event %d: %+v, want %+v", i, got[i], c.want[i])
				}
			}
		})
	}
}

// A line past MaxLine is an error, not a cut event.
func TestReaderRefusesAnOverlongLine(t *testing.T) {
	r := sse.NewReader(strings.NewReader("data: " + strings.Repeat("x", sse.MaxLine) + "\n\n"))
	if _, err := r.Next(); !errors.Is(err, bufio.ErrTooLong) {
		t.Fatalf("Next: %v, want bufio.ErrTooLong", err)
	}
}

// What Send writes, a client reads back: the id and type as sent, the
// data with its line breaks made LF. An id or type with a line break is
// refused instead.
func FuzzRoundTrip(f *testing.F) {
	f.Add("1", "run_created", []byte(`{"seq":1}`))
	f.Add("", "", []byte("<ul>\n<li>a</li>\r\n</ul>"))
	f.Add("", "end", []byte(""))
	f.Add(" 7", " x", []byte("a\r\rb\n\n"))
	f.Add("1\n", "x", []byte("y"))
	f.Fuzz(func(t *testing.T, id, typ string, data []byte) {
		sw, rec := start(t)
		err := sw.Send(sse.Event{ID: id, Type: typ, Data: data})
		if strings.ContainsAny(id+typ, "\r\n") {
			if !errors.Is(err, sse.ErrLineBreak) || rec.Body.Len() != 0 {
				t.Fatalf("Send(%q, %q): %v, wrote %q", id, typ, err, rec.Body)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		got := readAll(t, rec.Body.String())
		wantID := id
		if strings.IndexByte(id, 0) >= 0 {
			wantID = "" // a client ignores such an id
		}
		wantData := bytes.ReplaceAll(bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n")), []byte("\r"), []byte("\n"))
		if len(got) != 1 || got[0].ID != wantID || got[0].Type != typ || !bytes.Equal(got[0].Data, wantData) {
			t.Fatalf("sent %q %q %q, wrote %q, read back %+v", id, typ, data, rec.Body, got)
		}
	})
}

// Any bytes read as a stream give events whose id and type hold no line
// break, and end in io.EOF or an error, never a panic.
func FuzzReader(f *testing.F) {
	f.Add([]byte("id: 1\nevent: a\ndata: x\n\n"))
	f.Add([]byte(": c\r\ndata\rdata:\r\n\r\nevent: e\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		r := sse.NewReader(bytes.NewReader(stream))
		for n := 0; ; n++ {
			e, err := r.Next()
			if err != nil {
				return
			}
			if strings.ContainsAny(e.ID+e.Type, "\r\n") || bytes.Contains(e.Data, []byte("\r")) {
				t.Fatalf("event %d of %q: %+v", n, stream, e)
			}
			if n > len(stream) {
				t.Fatalf("%d events from %d bytes", n, len(stream))
			}
		}
	})
}

package console

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sandflow/sandflow/internal/sse"
)

// A live page's stream is framed as it was when the console wrote it by
// hand: an event line only for a typed event, each line of the fragment
// a data line of its own (a CR before an LF dropped), the end event one
// empty data line; Cache-Control no-store, as every console page.
func TestLiveStreamBytesArePinned(t *testing.T) {
	c := &Console{log: slog.New(slog.DiscardHandler), streams: make(chan struct{}, 1), ctx: context.Background()}
	rec := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/console/runs/r1/live", nil)
	err := c.stream(rec, r, func(sw *sse.Writer) error {
		if err := sendFragment(sw, "", `<section id="live">`+"\n  <p>waiting</p>\r\n</section>"); err != nil {
			return err
		}
		if err := sendFragment(sw, "", "<ul></ul>"); err != nil {
			return err
		}
		return sendFragment(sw, "end", "")
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "data: <section id=\"live\">\ndata:   <p>waiting</p>\ndata: </section>\n\n" +
		"data: <ul></ul>\n\n" +
		"event: end\ndata: \n\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("the stream:\n%q\nwant\n%q", got, want)
	}
	for k, v := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"} {
		if got := rec.Header().Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	if rec.Code != http.StatusOK || !rec.Flushed {
		t.Errorf("status %d, flushed %v", rec.Code, rec.Flushed)
	}
	if len(c.streams) != 0 {
		t.Error("the stream's slot was not given back")
	}
}

package console

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// TestLongLogShowsTheNewestEntries: a run of 2,500 events shows the
// newest 2,000 and says how many it left out; a step's input, started
// before the cut, still shows beside its output after it.
func TestLongLogShowsTheNewestEntries(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	evs := []store.Event{
		{Seq: 1, Time: at, Kind: host.EvRunCreated, Data: json.RawMessage(`{"tool":"t","input":{}}`)},
		{Seq: 2, Time: at, Kind: host.EvStepStarted, Data: json.RawMessage(`{"op":1,"kind":"step","name":"long","input":["early-input"]}`)},
	}
	for i := 3; i < 2500; i++ {
		evs = append(evs, store.Event{Seq: uint64(i), Time: at, Kind: host.EvProgress, Data: json.RawMessage(fmt.Sprintf(`{"op":2,"value":{"i":%d}}`, i))})
	}
	evs = append(evs, store.Event{Seq: 2500, Time: at, Kind: host.EvStepCompleted, Data: json.RawMessage(`{"op":1,"attempt":1,"result":"late-output"}`)})
	v := newRunView(host.RunInfo{ID: "run_long", Status: store.StatusCompleted}, evs)
	if len(v.Timeline) != maxTimeline || v.Hidden != 500 || v.Timeline[0].Seq != 501 {
		t.Fatalf("view: %d entries from seq %d, %d hidden; want %d from 501, 500 hidden", len(v.Timeline), v.Timeline[0].Seq, v.Hidden, maxTimeline)
	}
	pages, err := parsePages()
	if err != nil {
		t.Fatal(err)
	}
	c := &Console{pages: pages}
	html, err := c.fragment("live", nil, v)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(html, `<li class="ev `); n != maxTimeline {
		t.Errorf("fragment shows %d entries", n)
	}
	for _, want := range []string{`data-hidden="500"`, "early-input", "late-output"} {
		if !strings.Contains(html, want) {
			t.Errorf("fragment lacks %s", want)
		}
	}
}

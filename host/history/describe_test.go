package history

import (
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/store"
)

// TestDescribeEveryKind: every kind of event in the codec fixtures gets a
// line of its own, not the bare kind and never more than one line, and a
// few lines read as the timeline shows them.
func TestDescribeEveryKind(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	seen := map[string]bool{}
	for i, fe := range fixtureEvents {
		e := store.Event{Seq: uint64(i + 1), Time: at, Kind: fe.kind, Data: []byte(fe.data)}
		line := Describe(e)
		if line == "" || line == fe.kind || strings.Contains(line, "undecodable") || strings.Contains(line, "\n") {
			t.Errorf("%s %s: %q", fe.kind, fe.data, line)
		}
		seen[fe.kind] = true
		t.Logf("%s: %s", fe.kind, line)
	}
	for _, k := range evKinds {
		if !seen[k] {
			t.Errorf("no fixture of kind %s", k)
		}
	}
	for data, want := range map[string]string{
		`{"op":6,"askId":"ask_1","answer":{"status":"answered","optionId":"ok"}}`: "op 6 question ask_1 answered: ok",
		`{"op":7,"askId":"ask_2","answer":{"status":"withdrawn"}}`:                 "op 7 question ask_2 withdrawn",
	} {
		if got := Describe(store.Event{Kind: KindAskSettled, Data: []byte(data)}); got != want {
			t.Errorf("Describe(%s) = %q, want %q", data, got, want)
		}
	}
	if got := Describe(store.Event{Kind: KindStepStarted, Data: []byte(`{"op":"x"}`)}); !strings.Contains(got, "undecodable") {
		t.Errorf("undecodable data: %q", got)
	}
}

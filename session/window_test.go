package session

import "testing"

// A session keeps its latest maxEvents events, however many it emitted:
// the slice behind them is trimmed only now and then (amortised), and
// what is kept (read by Events, stored by save) is always the window.
func TestEventWindowKeepsTheLatest(t *testing.T) {
	s := &Session{rec: record{ID: "window"}}
	for i := range 5*maxEvents + 3 {
		s.emit(Event{Type: EvTaskSettled})
		k := s.kept()
		want := min(i+1, maxEvents)
		if len(k) != want || k[len(k)-1].Seq != i+1 || k[0].Seq != i+2-want {
			t.Fatalf("after %d events: %d kept, %d..%d", i+1, len(k), k[0].Seq, k[len(k)-1].Seq)
		}
		if len(s.rec.Events) > 2*maxEvents {
			t.Fatalf("after %d events the slice holds %d", i+1, len(s.rec.Events))
		}
	}
}

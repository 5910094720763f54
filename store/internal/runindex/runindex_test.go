package runindex

import (
	"strings"
	"testing"
	"time"
)

func (x *Index) order() string {
	var ids []string
	for _, e := range x.Match(Query{}) {
		ids = append(ids, e.ID)
	}
	return strings.Join(ids, " ")
}

// The index keeps runs newest first as records are written: new runs in
// any order, status changes in place, a record with another creation time
// moved.
func TestRunIndexKeepsTheOrder(t *testing.T) {
	x := &Index{}
	x.Build(nil)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	x.Put([]Entry{{Created: at(1), ID: "a", Status: "running"}, {Created: at(3), ID: "c", Status: "running"}})
	x.Put([]Entry{{Created: at(2), ID: "b", Status: "running"}}) // older than the newest
	x.Put([]Entry{{Created: at(3), ID: "d", Status: "waiting"}}) // a tie: the higher id first
	if got := x.order(); got != "d c b a" {
		t.Fatalf("order %q, want \"d c b a\"", got)
	}
	x.Put([]Entry{{Created: at(2), ID: "b", Status: "completed"}})
	if es := x.Match(Query{Status: "completed"}); len(es) != 1 || es[0].ID != "b" {
		t.Errorf("completed after b's new status: %+v", es)
	}
	x.Put([]Entry{{Created: at(9), ID: "a", Status: "completed"}})
	if got := x.order(); got != "a d c b" {
		t.Errorf("order after a's record moved it: %q, want \"a d c b\"", got)
	}
	if n := len(x.sorted); n != 4 || len(x.byID) != 4 {
		t.Errorf("%d sorted, %d by id, want 4 and 4", n, len(x.byID))
	}
	// Before the index is built, writes are not its to note.
	y := &Index{}
	y.Put([]Entry{{Created: at(1), ID: "a"}})
	if y.sorted != nil || y.byID != nil {
		t.Errorf("an index not built took a write: %+v", y)
	}
}

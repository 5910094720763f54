package store

import (
	"strings"
	"testing"
	"time"
)

func (x *runIndex) order() string {
	var ids []string
	for _, e := range x.match(RunFilter{}) {
		ids = append(ids, e.id)
	}
	return strings.Join(ids, " ")
}

// The index keeps runs newest first as records are written: new runs in
// any order, status changes in place, a record with another creation time
// moved.
func TestRunIndexKeepsTheOrder(t *testing.T) {
	x := &runIndex{byID: map[string]*indexEntry{}, built: true}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	x.put([]indexEntry{{created: at(1), id: "a", status: StatusRunning}, {created: at(3), id: "c", status: StatusRunning}})
	x.put([]indexEntry{{created: at(2), id: "b", status: StatusRunning}}) // older than the newest
	x.put([]indexEntry{{created: at(3), id: "d", status: StatusWaiting}}) // a tie: the higher id first
	if got := x.order(); got != "d c b a" {
		t.Fatalf("order %q, want \"d c b a\"", got)
	}
	x.put([]indexEntry{{created: at(2), id: "b", status: StatusCompleted}})
	if es := x.match(RunFilter{Status: StatusCompleted}); len(es) != 1 || es[0].id != "b" {
		t.Errorf("completed after b's new status: %+v", es)
	}
	x.put([]indexEntry{{created: at(9), id: "a", status: StatusCompleted}})
	if got := x.order(); got != "a d c b" {
		t.Errorf("order after a's record moved it: %q, want \"a d c b\"", got)
	}
	if n := len(x.sorted); n != 4 || len(x.byID) != 4 {
		t.Errorf("%d sorted, %d by id, want 4 and 4", n, len(x.byID))
	}
	// Before the index is built, writes are not its to note.
	y := &runIndex{}
	y.put([]indexEntry{{created: at(1), id: "a"}})
	if y.sorted != nil || y.byID != nil {
		t.Errorf("an index not built took a write: %+v", y)
	}
}

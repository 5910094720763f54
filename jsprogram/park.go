package jsprogram

import (
	"container/list"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sandflow/sandflow/host"
)

// Parked programs. A workflow program that suspends (it awaits calls
// still out) stays live in its worker, which leaves the pool: the resume
// sends the worker only what is new (the program asks again for what it
// waits on, and the host answers with the results that came in), so the
// program runs only what is new instead of again from the top. The
// engine keeps at most Options.MaxParked of them, holding at most
// Options.MaxParkedBytes together, and evicts the least recently parked
// past either; an evicted program's worker is killed, and its next resume
// returns host.ErrInstanceLost, on which the host replays it, as it does
// after a restart. See RATIONALE.md, "Why park JavaScript programs?".

// DefaultMaxParked is Options.MaxParked when it is 0.
const DefaultMaxParked = 32

// DefaultMaxParkedBytes is Options.MaxParkedBytes when it is 0.
const DefaultMaxParkedBytes = 1 << 30

// lot holds the parked programs, least recently parked first.
type lot struct {
	max      int   // 0: parking is off
	maxBytes int64 // 0: no bound but max

	mu    sync.Mutex
	order *list.List // of *parkedVM
	bytes int64

	// resumed counts the resumes that found their program parked, lost
	// those that did not (evicted, or its worker dead).
	resumed, lost atomic.Int64
}

// parkedVM is a suspended program live in its worker.
type parkedVM struct {
	w     *worker
	bytes int64 // what the worker held when the program parked
	inst  *instance
	elem  *list.Element
}

func newLot(max int, maxBytes int64) *lot {
	switch {
	case max == 0:
		max = DefaultMaxParked
	case max < 0:
		max = 0
	}
	switch {
	case maxBytes == 0:
		maxBytes = DefaultMaxParkedBytes
	case maxBytes < 0:
		maxBytes = 0
	}
	return &lot{max: max, maxBytes: maxBytes, order: list.New()}
}

// park keeps inst's program live in w, and returns the workers of the
// programs evicted to stay within the budget (inst's own among them when
// it alone is over it), for the caller to kill.
func (l *lot) park(inst *instance, w *worker, bytes int64) (evicted []*worker) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := &parkedVM{w: w, bytes: bytes, inst: inst}
	v.elem = l.order.PushBack(v)
	inst.vm = v
	l.bytes += bytes
	for l.order.Len() > l.max || (l.maxBytes > 0 && l.bytes > l.maxBytes) {
		evicted = append(evicted, l.removeLocked(l.order.Front().Value.(*parkedVM)))
	}
	return evicted
}

// take removes inst's parked program and returns its worker: nil when it
// has none (it was evicted).
func (l *lot) take(inst *instance) *worker {
	l.mu.Lock()
	defer l.mu.Unlock()
	if inst.vm == nil {
		return nil
	}
	return l.removeLocked(inst.vm)
}

func (l *lot) removeLocked(v *parkedVM) *worker {
	l.order.Remove(v.elem)
	l.bytes -= v.bytes
	v.inst.vm = nil
	return v.w
}

// all removes every parked program and returns their workers.
func (l *lot) all() []*worker {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ws []*worker
	for l.order.Len() > 0 {
		ws = append(ws, l.removeLocked(l.order.Front().Value.(*parkedVM)))
	}
	return ws
}

func (l *lot) stats(st *Stats) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st.Parked, st.ParkedBytes = l.order.Len(), l.bytes
	st.ParkedResumes, st.ParkedLost = l.resumed.Load(), l.lost.Load()
}

// instanceLost is the error of a resume whose parked program is gone.
func instanceLost(why string) error {
	return fmt.Errorf("jsprogram: the parked program is gone (%s): %w", why, host.ErrInstanceLost)
}

// killAll kills workers (of evicted or dropped programs) that hold no
// slot.
func killAll(ws []*worker) {
	for _, w := range ws {
		w.kill()
	}
}

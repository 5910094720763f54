package host

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/sandflow/sandflow/abi"
)

// Observer is told what the kernel does, for metrics (package metrics has
// one). Its methods are called on the kernel's paths, some with a run's
// lock held: they must be quick, must not block, and must not call into
// the Host.
type Observer interface {
	// Activation: an activation of a run of tool ended after d (the
	// guest's run and the commit that ended it). resume says how its
	// instance came by the run's state; replayed is how many recorded ops
	// it answered from the log before the first live one.
	Activation(tool string, resume Resume, replayed int, d time.Duration)
	// Step: a step attempt of a run of tool ended after d; failed when
	// its outcome was an error.
	Step(tool string, d time.Duration, failed bool)
	// Op: a live op (one the log did not answer) of a workflow was
	// performed in d, its commit not included.
	Op(kind abi.OpKind, d time.Duration)
	// Limit: a limit stopped an activation or a step attempt: "cpu",
	// "memory", "payload", "events", "output" or "module" for WebAssembly;
	// a JavaScript engine's own names ("js_time", "in_flight", ...).
	Limit(limit string)
	// Commit: the store committed n events of a run in d.
	Commit(n int, d time.Duration)
}

// Resume is how an activation's instance came by the run's state.
type Resume string

const (
	// ResumeFresh: the run's first activation, on a new instance.
	ResumeFresh Resume = "fresh"
	// ResumeParked: the instance the run's last activation left parked.
	ResumeParked Resume = "parked"
	// ResumeSnapshot: an instance restored from a snapshot of the run.
	ResumeSnapshot Resume = "snapshot"
	// ResumeReplay: a new instance that replayed the run's log.
	ResumeReplay Resume = "replay"
)

// observerBox holds an Observer for an atomic.Pointer.
type observerBox struct{ o Observer }

// SetObserver sets the Observer told of the kernel's work from now on
// (nil: none). Options.Observer sets the first.
func (h *Host) SetObserver(o Observer) {
	if o == nil {
		h.obs.Store(nil)
		return
	}
	h.obs.Store(&observerBox{o})
}

// observer is the Observer, or nil.
func (h *Host) observer() Observer {
	if b := h.obs.Load(); b != nil {
		return b.o
	}
	return nil
}

// observeLimit tells the observer of a limit err hit, if it is one.
func (h *Host) observeLimit(err error) {
	o := h.observer()
	if o == nil {
		return
	}
	var le *LimitError
	var ge *GuestError
	switch {
	case errors.As(err, &le):
		o.Limit(le.Limit)
	case errors.As(err, &ge) && ge.Limit != "":
		o.Limit(ge.Limit)
	}
}

// obsPointer is the Host's observer field's type.
type obsPointer = atomic.Pointer[observerBox]

// Package state is a run's model as the kernel keeps it: Run, rebuilt from
// the run's log by Apply (one apply function per event kind, apply.go) and
// kept in step with it, since every event the host appends goes through
// Apply too; its ops (Op), activations (Marker), hooks, serve calls, child
// agent sessions and aborts; the questions a kernel asks of it (what is
// runnable, what a suspended guest waits on, how the run stands); and the
// state images that let a waiting run load without folding its whole log
// (image.go).
//
// The package knows nothing of engines, stores' transactions or the
// host's locks: a Run is not safe for concurrent use, and the host guards
// each with its run's handle lock.
package state

// Package proto is what the host's side of the JavaScript engine
// (package jsprogram) and its worker processes (internal/worker) share:
// the frames they speak over the worker's stdin and stdout (frames.go),
// the messages in them (an Activation starts a run's start or resume, a
// Done ends it), the Limits an activation runs within, and the
// WorkflowProgramError a program fails with. jsprogram re-exports the
// last two under their own names.
package proto

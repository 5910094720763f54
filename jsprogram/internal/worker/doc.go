// Package worker is the process side of the JavaScript engine: what a
// re-executed copy of the host's binary runs (Main, which
// jsprogram.MaybeWorker calls) to run one activation after another in a
// goja VM, within the memory cap it sets on itself and the time limits
// its activation gives.
//
// A session (session.go) is one activation: its VM, its JavaScript clock,
// and its ops to the host, answered by the host over the pipe or from the
// run's log while it replays (replay.go, internal/replay). What runs in
// it is a workflow tool's program (program.go, with shim.js, compiled by
// compile.go) or an authored tool's script (tool.go and toolshim.js,
// compiled by toolcompile.go): a workflow activation, a step attempt, or
// the read of its definition.
package worker

package sandflow

import (
	"runtime"
	"runtime/debug"
)

func init() {
	// A guest's heap is small and its instance short-lived, and a
	// collection in WebAssembly is slow: collect less often than Go's
	// default. A tool may set its own percentage in an init function.
	debug.SetGCPercent(400)
	// No heap profile: each sample draws from the runtime's hidden
	// generator, which select also draws from, and a run does not
	// allocate exactly the same live as on replay (a live run suspends
	// and resumes where a replay goes straight on), so sampling would
	// make select's choices differ between the two.
	runtime.MemProfileRate = 0
}

package sandflow

import "runtime/debug"

// A guest's heap is small and its instance short-lived, and a collection
// in WebAssembly is slow: collect less often than Go's default. A tool may
// set its own percentage in an init function.
func init() { debug.SetGCPercent(400) }

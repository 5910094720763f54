// Package wasmtime is the host's engine on wasmtime, through wasmtime-go.
// It needs cgo: in a build without cgo the package is empty, and the host
// reports the engine unavailable (host.NewEngine).
//
// Guests are not rewritten as on wazero (internal/meter): wasmtime's epoch
// interruption stops them. WASI is the host's own (internal/wasip1), the
// same as on wazero. Instances are pooled (engine.Poolable) but not
// snapshotted: the Go runtime's mutable globals are not exported here.
package wasmtime

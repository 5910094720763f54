// Package bench compares sandflow's engines, wazero and wasmtime, on the
// same guests in one run: compiling a module, reloading it from the
// compiled-module cache, instantiating it, one op round trip between guest
// and host, replaying a 1,000-step history through the host, and a tight
// loop under the CPU limit (which shows what metering costs on each).
//
// Each benchmark has one sub-benchmark per engine:
//
//	go test ./bench -run '^$' -bench . -count 5
//
// wasmtime needs cgo; without it its sub-benchmarks are skipped. The
// benchmark guest is in testdata/guests/benchguest; the others are the
// host's test guests.
package bench

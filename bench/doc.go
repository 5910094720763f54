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
// host's test guests and bench/workload's.
//
// The suite that compares runtimes (Go and C guests on both engines,
// JavaScript tools, and plain Go as the floor) on the same workloads is
// bench/workload; the op round trip, replay and upload benchmarks here are
// its figures for the Go guest. bench/peers measures other systems on the
// same work (Temporal's replayer, Extism's calls, a raw wazero host call),
// in a module of its own.
//
// bench/suite runs the whole suite, the peers' figures with sandflow's in
// one process, prints benchstat lines and writes an HTML report (a chart of
// replay time against history length, every figure's median and range,
// and the ratios the suite is judged by, with their goals). `sandflow
// bench` runs it:
//
//	go run ./cmd/sandflow-bench --out bench-results
//
// It builds and runs bench/peers' cmd/suite when it can, and runs
// sandflow's figures alone otherwise (--peers off).
package bench

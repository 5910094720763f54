// Package peers measures other systems on the work that sandflow's engine
// benchmarks (package bench) time, so that the two can be set side by side
// from one machine: Temporal's Go SDK replaying a workflow history in
// process (TemporalReplay), a call of an Extism plugin doing a trivial
// tool's JSON work (ExtismCall, ExtismInstantiateAndCall), and the floor
// of one op, a bare wazero host call (WazeroHostCall).
//
// The benchmarks are plain functions returning func(*testing.B), so that a
// program linking sandflow's host can run them with testing.Benchmark in
// the same process; peers_test.go wraps them for go test:
//
//	go test -run '^$' -bench . -count 5
//
// This is a module of its own so that sandflow's main module does not
// depend on Temporal or Extism.
package peers

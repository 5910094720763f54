package suite

import (
	"slices"
	"testing"

	"github.com/sandflow/sandflow/bench/workload"
)

// The peers' runtimes: figures of bench/peers, placed in the suite's
// groups where they time the same thing.
const (
	// Temporal is Temporal's Go SDK replayer, in group replay.
	Temporal workload.Runtime = "temporal"
	// WazeroRaw is a bare wazero host call, in group op-roundtrip. Its
	// ns/op is per call (also reported as ns/call); the sandflow
	// runtimes' ns/op there is per 10,000 ops (ns/roundtrip per op).
	WazeroRaw workload.Runtime = "wazero-raw"
	// Extism is a call of an Extism plugin, in the groups below.
	Extism workload.Runtime = "extism"
)

const (
	// GroupToolCall is one call of a trivial tool: sandflow's Host.Call
	// (bench/workload's ToolCall) and Extism's Plugin.Call on an instance
	// that exists already.
	GroupToolCall = workload.GroupToolCall
	// GroupToolCallCold is a call of a trivial tool on a new instance,
	// which only Extism's figures time.
	GroupToolCallCold = "tool-call-cold"
)

// Peers are bench/peers' benchmark bodies. bench/peers is a module of its
// own (it brings in Temporal and Extism, which this module must not
// depend on), so its cmd/suite passes them in.
type Peers struct {
	TemporalReplay           func(n int) func(*testing.B)
	WazeroHostCall           func() func(*testing.B)
	ExtismCall               func() func(*testing.B)
	ExtismInstantiateAndCall func() func(*testing.B)
}

// AddTo returns figures with the peers' figures added, each after the last
// figure of its group: Temporal's replay at every size of figures' replay
// group, the raw host call in op-roundtrip, and Extism's calls, in groups
// of their own, at the end.
func (p Peers) AddTo(figures []workload.Figure) []workload.Figure {
	var sizes []int
	for _, f := range figures {
		if f.Group == workload.GroupReplay && !slices.Contains(sizes, f.N) {
			sizes = append(sizes, f.N)
		}
	}
	var extra []workload.Figure
	for _, n := range sizes {
		extra = append(extra, workload.Figure{Group: workload.GroupReplay, Runtime: Temporal, N: n, Bench: p.TemporalReplay(n)})
	}
	extra = append(extra,
		workload.Figure{Group: workload.GroupOpRoundTrip, Runtime: WazeroRaw, Bench: p.WazeroHostCall()},
		workload.Figure{Group: GroupToolCall, Runtime: Extism, Bench: p.ExtismCall()},
		workload.Figure{Group: GroupToolCallCold, Runtime: Extism, Bench: p.ExtismInstantiateAndCall()},
	)
	out := slices.Clone(figures)
	for _, e := range extra {
		at := len(out)
		for i, f := range out {
			if f.Group == e.Group {
				at = i + 1
			}
		}
		out = slices.Insert(out, at, e)
	}
	return out
}

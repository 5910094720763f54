package workload

import (
	"fmt"
	"testing"
)

// Figure groups, in the order Suite lists them.
const (
	GroupReplay         = "replay"
	GroupReplayPreInit  = "replay-preinit"
	GroupColdResume     = "resume-cold"
	GroupColdPreInit    = "resume-cold-preinit"
	GroupSnapshot       = "resume-snapshot"
	GroupSnapshotNoSync = "resume-snapshot-nosync"
	GroupSnapshotReload = "resume-snapshot-reload"
	GroupWarmResume     = "resume-warm"
	GroupWarmNoSync     = "resume-warm-nosync"
	GroupOpRoundTrip    = "op-roundtrip"
	GroupStepCommits    = "step-commits"
	// GroupCommitsParallel is step-commits with parallelRuns runs at once.
	GroupCommitsParallel = "step-commits-parallel"
	GroupSuspendedMemory = "memory-suspended"
	GroupParkedMemory    = "memory-parked"
	GroupUpload          = "upload-to-first-call"
	GroupToolCall        = "tool-call"
	GroupToolCallNoSync  = "tool-call-nosync"
	GroupLive            = "live" // followed by "-" and the workload
)

// Figure is one benchmark of the suite: a group (what is measured), a
// runtime and a size.
type Figure struct {
	Group   string
	Runtime Runtime
	// N is the size: steps, turns or questions of the workload; runs for
	// the memory figures; 0 where there is none.
	N     int
	Bench func(*testing.B)
}

// Name is the figure's name inside its group: "wazero/n=1000".
func (f Figure) Name() string {
	if f.N == 0 {
		return string(f.Runtime)
	}
	return fmt.Sprintf("%s/n=%d", f.Runtime, f.N)
}

// Sizes of the suite's figures.
const (
	suspendedRuns = 100
	// manySuspendedRuns is the memory-suspended figure's second size: the
	// goal's 10,000 waiting runs, to show that the host's memory stays
	// flat as they accumulate. A waiting run holds no instance, so what
	// the host keeps of it does not depend on the guest: it runs on the C
	// guest on wazero, which starts 10,000 runs in about a second, and on
	// plain Go (a goroutine a run, the floor). The Go guest, instantiated
	// for each run (about 15 ms with nothing parked or pre-initialised),
	// takes minutes.
	manySuspendedRuns = 10_000
	parallelRuns      = 8 // runs at once in step-commits-parallel
	parkedRuns        = 20
	jsMaxCommitSteps  = 100 // a live JavaScript run replays at every activation: O(n²)
)

var (
	replaySizes = []int{1, 10, 100, 1000, 10_000}
	resumeSizes = []int{10, 10_000}
	commitSizes = []int{100, 1000}
	liveSizes   = []int{10, 100}
)

// Suite lists the suite's figures, grouped, each runtime in the order of
// Runtimes.
func Suite() []Figure {
	var fs []Figure
	add := func(group string, sizes []int, body func(Runtime, int) func(*testing.B), skip func(Runtime, int) bool) {
		for _, rt := range Runtimes() {
			for _, n := range sizes {
				if skip == nil || !skip(rt, n) {
					fs = append(fs, Figure{Group: group, Runtime: rt, N: n, Bench: body(rt, n)})
				}
			}
		}
	}
	one := func(f func(Runtime) func(*testing.B)) func(Runtime, int) func(*testing.B) {
		return func(rt Runtime, _ int) func(*testing.B) { return f(rt) }
	}
	add(GroupReplay, replaySizes, Replay, nil)
	// Only wazero modules keep pre-initialised instances.
	add(GroupReplayPreInit, replaySizes, ReplayPreInit, func(rt Runtime, _ int) bool { return rt != GoWazero && rt != CWazero })
	add(GroupColdResume, resumeSizes, ColdResume, nil)
	add(GroupColdPreInit, resumeSizes, ColdResumePreInit, func(rt Runtime, _ int) bool { return rt == JS || rt == PlainGo })
	// Only wazero instances are snapshotted.
	notSnapshotted := func(rt Runtime, _ int) bool { return rt != GoWazero && rt != CWazero }
	add(GroupSnapshot, resumeSizes, SnapshotResume, notSnapshotted)
	add(GroupSnapshotNoSync, resumeSizes, SnapshotResumeNoSync, notSnapshotted)
	add(GroupSnapshotReload, resumeSizes, SnapshotResumeReload, notSnapshotted)
	add(GroupWarmResume, resumeSizes, WarmResume, nil)
	add(GroupWarmNoSync, resumeSizes, WarmResumeNoSync, nil)
	add(GroupOpRoundTrip, []int{0}, one(OpRoundTrip), func(rt Runtime, _ int) bool { return rt == JS })
	add(GroupStepCommits, commitSizes, StepCommits, func(rt Runtime, n int) bool { return rt == JS && n > jsMaxCommitSteps })
	add(GroupCommitsParallel, []int{100}, StepCommitsParallel, func(rt Runtime, _ int) bool { return rt == JS || rt == PlainGo })
	add(GroupSuspendedMemory, []int{suspendedRuns, manySuspendedRuns}, SuspendedMemory, func(rt Runtime, n int) bool {
		return n == manySuspendedRuns && rt != CWazero && rt != PlainGo
	})
	add(GroupParkedMemory, []int{parkedRuns}, ParkedMemory, nil)
	add(GroupUpload, []int{0}, one(UploadToFirstCall), func(rt Runtime, _ int) bool { return rt == PlainGo })
	add(GroupToolCall, []int{0}, one(ToolCall), nil)
	add(GroupToolCallNoSync, []int{0}, one(ToolCallNoSync), func(rt Runtime, _ int) bool { return rt == PlainGo })
	for _, w := range Workloads() {
		add(GroupLive+"-"+string(w), liveSizes, func(rt Runtime, n int) func(*testing.B) { return Live(rt, w, n) }, nil)
	}
	return fs
}

// Run runs the figures of a group as sub-benchmarks of b, named by
// Figure.Name.
func Run(b *testing.B, group string) {
	for _, f := range Suite() {
		if f.Group == group {
			b.Run(f.Name(), f.Bench)
		}
	}
}

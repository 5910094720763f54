package suite

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/bench/workload"
)

// Pkg is the package the results name in their header: the figures'
// package, so that benchstat compares the suite's results with those of
// go test ./bench/workload -bench . -benchmem, whose benchmarks have the
// same names.
const Pkg = "github.com/sandflow/sandflow/bench/workload"

// benchFuncs are the names of bench/workload's Benchmark functions
// (bench_test.go), one per group.
var benchFuncs = map[string]string{
	workload.GroupReplay:            "Replay",
	workload.GroupReplayPreInit:     "ReplayPreInit",
	workload.GroupColdResume:        "ColdResume",
	workload.GroupColdPreInit:       "ColdResumePreInit",
	workload.GroupSnapshot:          "SnapshotResume",
	workload.GroupSnapshotNoSync:    "SnapshotResumeNoSync",
	workload.GroupSnapshotReload:    "SnapshotResumeReload",
	workload.GroupWarmResume:        "WarmResume",
	workload.GroupWarmNoSync:        "WarmResumeNoSync",
	workload.GroupOpRoundTrip:       "OpRoundTrip",
	workload.GroupStepCommits:       "StepCommits",
	workload.GroupCommitsParallel:   "StepCommitsParallel",
	workload.GroupSuspendedMemory:   "SuspendedMemory",
	workload.GroupParkedMemory:      "ParkedMemory",
	workload.GroupUpload:            "UploadToFirstCall",
	workload.GroupToolCall:          "ToolCall",
	workload.GroupToolCallNoSync:    "ToolCallNoSync",
	workload.GroupLive + "-steps":   "LiveSteps",
	workload.GroupLive + "-fanout":  "LiveFanout",
	workload.GroupLive + "-askstep": "LiveAskStep",
}

// BenchmarkName is the name go test gives the figure's result line: its
// group's Benchmark function (a group bench/workload has no function for
// is spelled in camel case: "tool-call" is ToolCall), the figure's name as
// the sub-benchmark, and the GOMAXPROCS suffix go test adds when it is not
// 1: "BenchmarkReplay/wazero/n=1000-2".
func BenchmarkName(f workload.Figure, procs int) string {
	fn := benchFuncs[f.Group]
	if fn == "" {
		for _, part := range strings.Split(f.Group, "-") {
			if part != "" {
				fn += strings.ToUpper(part[:1]) + part[1:]
			}
		}
	}
	name := "Benchmark" + fn + "/" + f.Name()
	if procs != 1 {
		name += fmt.Sprintf("-%d", procs)
	}
	return name
}

// Environment is what the results were measured on.
type Environment struct {
	GOOS, GOARCH, CPU, GoVersion string
	Procs                        int
}

// Env describes this process's machine.
func Env() Environment {
	return Environment{
		GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPU: cpuName(),
		GoVersion: runtime.Version(), Procs: runtime.GOMAXPROCS(0),
	}
}

// cpuName is the processor's model name, as go test prints it on Linux;
// "" where it is unknown.
func cpuName() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// writeHeader writes the configuration lines go test prints before its
// first result.
func writeHeader(w io.Writer, e Environment) error {
	s := fmt.Sprintf("goos: %s\ngoarch: %s\npkg: %s\n", e.GOOS, e.GOARCH, Pkg)
	if e.CPU != "" {
		s += "cpu: " + e.CPU + "\n"
	}
	_, err := io.WriteString(w, s)
	return err
}

// writeLine writes one result as go test -benchmem does: the name padded
// to width, the iterations, ns/op, the metrics the body reported, sorted,
// then B/op and allocs/op.
func writeLine(w io.Writer, name string, width int, r testing.BenchmarkResult) error {
	_, err := fmt.Fprintf(w, "%-*s\t%s\t%s\n", width, name, r.String(), r.MemString())
	return err
}

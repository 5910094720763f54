// Package suite runs sandflow's benchmark suite (bench/workload's figures,
// and the peers' when the program links bench/peers) in one process with
// testing.Benchmark, prints each result as go test -bench would, so that
// benchstat reads the output, and writes an HTML report with charts,
// tables and the ratios the suite is judged by.
//
// `sandflow-bench` runs it: in its own process without the peers, or
// through bench/peers' cmd/suite (a module of its own, which links Temporal
// and Extism) with them. Both call RunAndReport.
//
// A process that runs the suite must call jsprogram.MaybeWorker first
// thing: the JavaScript runtime's figures re-execute the binary as workers.
package suite

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/bench/workload"
)

// DefaultCount is how many times each figure runs unless told otherwise.
const DefaultCount = 5

// Options says how Run runs the figures.
type Options struct {
	// Count is how many times each figure runs (go test's -count); 0
	// means DefaultCount.
	Count int
	// Benchtime is go test's -benchtime ("2s", "100x"); "" leaves the
	// process's setting (one second, or -test.benchtime in a test binary).
	Benchtime string
	// Filter selects the figures whose Key it matches; nil selects all.
	Filter *regexp.Regexp
	// Out receives the benchstat lines as the runs finish.
	Out io.Writer
	// Progress, if not nil, shows which figure runs: a bar redrawn in
	// place when it is a terminal, a line per run otherwise.
	Progress io.Writer
	// Sequential runs each figure's runs one after another instead of in
	// rounds (Run).
	Sequential bool
}

// Result is what one figure's runs gave.
type Result struct {
	Figure workload.Figure
	// Runs holds one result per completed run, in order.
	Runs []testing.BenchmarkResult
	// Skipped and Failed say that the figure's body skipped (its runtime
	// is missing here) or failed; it is not run again after either.
	Skipped, Failed bool
}

// Key names a figure in filters and reports: "replay/wazero/n=1000".
func Key(f workload.Figure) string { return f.Group + "/" + f.Name() }

// Values returns the figure's value in unit for each run: "ns/op",
// "B/op", "allocs/op", or a unit the body reported with ReportMetric.
// Runs without it are left out.
func (r Result) Values(unit string) []float64 {
	var vs []float64
	for _, b := range r.Runs {
		if v, ok := metric(b, unit); ok {
			vs = append(vs, v)
		}
	}
	return vs
}

// Median returns the median of Values(unit); false when there is none.
func (r Result) Median(unit string) (float64, bool) {
	vs := r.Values(unit)
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	m := len(vs) / 2
	if len(vs)%2 == 1 {
		return vs[m], true
	}
	return (vs[m-1] + vs[m]) / 2, true
}

// Units lists the units the figure's runs reported besides ns/op, B/op
// and allocs/op, sorted.
func (r Result) Units() []string {
	seen := map[string]bool{}
	for _, b := range r.Runs {
		for u := range b.Extra {
			switch u {
			case "ns/op", "B/op", "allocs/op", "MB/s":
				continue
			}
			seen[u] = true
		}
	}
	var us []string
	for u := range seen {
		us = append(us, u)
	}
	sort.Strings(us)
	return us
}

func metric(b testing.BenchmarkResult, unit string) (float64, bool) {
	if b.N <= 0 {
		return 0, false
	}
	if v, ok := b.Extra[unit]; ok {
		return v, true
	}
	switch unit {
	case "ns/op":
		return float64(b.T.Nanoseconds()) / float64(b.N), true
	case "B/op":
		return float64(b.AllocedBytesPerOp()), true
	case "allocs/op":
		return float64(b.AllocsPerOp()), true
	}
	return 0, false
}

// Select returns the figures whose Key filter matches, in order; all of
// them when filter is nil.
func Select(figures []workload.Figure, filter *regexp.Regexp) []workload.Figure {
	var fs []workload.Figure
	for _, f := range figures {
		if filter == nil || filter.MatchString(Key(f)) {
			fs = append(fs, f)
		}
	}
	return fs
}

// ErrNoFigures is returned by Run when the filter selects no figure.
var ErrNoFigures = errors.New("no figure matches the filter")

// SetBenchtime sets the process's -test.benchtime, as go test's
// -benchtime flag: a duration ("2s") or a count of iterations ("100x").
// It registers the testing flags first (testing.Init).
func SetBenchtime(s string) error {
	initTesting()
	if err := flag.Set("test.benchtime", s); err != nil {
		return fmt.Errorf("benchtime %q: %w", s, err)
	}
	return nil
}

// initTesting makes testing.Benchmark usable outside go test: its flags
// registered and, where nobody parsed the command line with package flag
// (sandflow uses its own), marked parsed, so that a body may call
// testing.Short.
func initTesting() {
	testing.Init()
	if !flag.Parsed() {
		_ = flag.CommandLine.Parse(nil)
	}
}

// Run runs the figures that o.Filter selects, o.Count times each, and
// writes a header and a benchstat line per run to o.Out as each finishes.
// It runs them in rounds, every figure once a round, so that the runs of
// two figures a ratio compares are spread over the same stretch of the
// machine's time; with o.Sequential, each figure's runs one after another,
// as go test -bench -count does. It returns every selected figure's
// result, in order; when ctx is cancelled, it stops after the run in
// progress and returns the results of the figures that ran so far with
// ctx's error. A figure that fails or skips is reported in its result, in
// o.Out and on o.Progress, is not run again, and does not stop the others.
func Run(ctx context.Context, figures []workload.Figure, o Options) ([]Result, error) {
	initTesting()
	if o.Benchtime != "" {
		if err := SetBenchtime(o.Benchtime); err != nil {
			return nil, err
		}
	}
	count := o.Count
	if count == 0 {
		count = DefaultCount
	}
	if count < 0 {
		return nil, fmt.Errorf("count %d: want 1 or more", count)
	}
	fs := Select(figures, o.Filter)
	if len(fs) == 0 {
		return nil, ErrNoFigures
	}
	procs := runtime.GOMAXPROCS(0)
	width := 0
	for _, f := range fs {
		width = max(width, len(BenchmarkName(f, procs)))
	}
	if err := writeHeader(o.Out, Env()); err != nil {
		return nil, err
	}
	p := newProgress(o.Progress, len(fs)*count)
	defer p.finish()
	results := make([]Result, len(fs))
	for i, f := range fs {
		results[i].Figure = f
	}
	rounds, each := count, 1
	if o.Sequential {
		rounds, each = 1, count
	}
	for round := range rounds {
		for i, f := range fs {
			res := &results[i]
			for j := range each {
				if res.Failed || res.Skipped {
					break
				}
				if err := ctx.Err(); err != nil {
					return ran(results), err
				}
				run := round + j + 1
				p.start(Key(f), run, count)
				r, skipped, failed := benchmark(f.Bench)
				name := BenchmarkName(f, procs)
				switch {
				case failed:
					res.Failed = true
					p.clear()
					if _, err := fmt.Fprintf(o.Out, "--- FAIL: %s\n", name); err != nil {
						return ran(results), err
					}
					p.note("FAIL " + Key(f) + failHint(f))
				case skipped:
					res.Skipped = true
					p.note("skipped " + Key(f) + " (its runtime is not available here)")
				default:
					res.Runs = append(res.Runs, r)
					p.clear()
					if err := writeLine(o.Out, name, width, r); err != nil {
						return ran(results), err
					}
				}
				p.done()
				if failed || skipped {
					p.skipRuns(count - run)
				}
			}
		}
	}
	return results, nil
}

// ran returns the results of the figures that ran, or began to: those
// with a run, or that failed or skipped.
func ran(results []Result) []Result {
	var rs []Result
	for _, r := range results {
		if len(r.Runs) > 0 || r.Failed || r.Skipped {
			rs = append(rs, r)
		}
	}
	return rs
}

// failHint says how to see why a figure failed: testing.Benchmark keeps
// a benchmark's messages to itself, go test prints them.
func failHint(f workload.Figure) string {
	if isPeer(Key(f)) {
		return ""
	}
	levels := strings.Split(BenchmarkName(f, 1), "/")
	for i, l := range levels {
		levels[i] = "^" + regexp.QuoteMeta(l) + "$"
	}
	return fmt.Sprintf(" (its messages: go test ./bench/workload -run '^$' -bench '%s' -benchtime 1x)", strings.Join(levels, "/"))
}

// benchmark runs f with testing.Benchmark and says whether it skipped or
// failed, which testing.Benchmark does not: it returns a zero result for
// both.
func benchmark(f func(*testing.B)) (r testing.BenchmarkResult, skipped, failed bool) {
	r = testing.Benchmark(func(b *testing.B) {
		// Runs also when the body ends with SkipNow or FailNow.
		defer func() { skipped, failed = b.Skipped(), b.Failed() }()
		f(b)
	})
	if r.N == 0 && !skipped {
		failed = true
	}
	return r, skipped && !failed, failed
}

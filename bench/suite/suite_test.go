package suite

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/bench/workload"
)

// line is a result line parsed back as benchstat reads it (the format of
// golang.org/design/14313-benchmark-format): the name, the iterations,
// then value-unit pairs.
type line struct {
	name   string
	iters  int
	values map[string]float64
}

// parseResults reads output as benchstat would: "key: value" configuration
// lines, and lines starting with "Benchmark". It fails t on a result line
// benchstat would reject.
func parseResults(t *testing.T, output string) (map[string]string, []line) {
	t.Helper()
	config := map[string]string{}
	var lines []line
	sc := bufio.NewScanner(strings.NewReader(output))
	for sc.Scan() {
		text := sc.Text()
		if strings.HasPrefix(text, "Benchmark") {
			f := strings.Fields(text)
			if len(f) < 4 || len(f)%2 != 0 {
				t.Fatalf("result line with %d fields: %q", len(f), text)
			}
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("iterations of %q: %v", text, err)
			}
			l := line{name: f[0], iters: n, values: map[string]float64{}}
			for i := 2; i < len(f); i += 2 {
				v, err := strconv.ParseFloat(f[i], 64)
				if err != nil {
					t.Fatalf("value %q of %q: %v", f[i], text, err)
				}
				l.values[f[i+1]] = v
			}
			lines = append(lines, l)
			continue
		}
		if k, v, ok := strings.Cut(text, ": "); ok && !strings.ContainsAny(k, " \t") && k != "" && k == strings.ToLower(k) {
			config[k] = v
		}
	}
	return config, lines
}

// setBenchtime sets -test.benchtime for a test and puts it back after.
func setBenchtime(t *testing.T, s string) {
	old := flag.Lookup("test.benchtime").Value.String()
	if err := SetBenchtime(s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { SetBenchtime(old) })
}

func fig(group string, rt workload.Runtime, n int, body func(*testing.B)) workload.Figure {
	return workload.Figure{Group: group, Runtime: rt, N: n, Bench: body}
}

// Run runs the figures in rounds, or each figure's runs in a row with
// Sequential; either way a figure that skips or fails runs once.
func TestRun(t *testing.T) {
	for _, sequential := range []bool{false, true} {
		t.Run(map[bool]string{false: "rounds", true: "sequential"}[sequential], func(t *testing.T) {
			testRun(t, sequential)
		})
	}
}

func testRun(t *testing.T, sequential bool) {
	setBenchtime(t, "3x")
	spin := func(b *testing.B) {
		for b.Loop() {
			time.Sleep(time.Microsecond)
		}
		b.ReportMetric(42.5, "ns/step")
	}
	bodies := 0
	figures := []workload.Figure{
		fig(workload.GroupReplay, workload.GoWazero, 10, spin),
		fig(workload.GroupReplay, workload.JS, 10, func(b *testing.B) { bodies++; b.Skip("no runtime") }),
		fig(workload.GroupOpRoundTrip, workload.PlainGo, 0, spin),
		fig(workload.GroupOpRoundTrip, WazeroRaw, 0, func(b *testing.B) { bodies++; b.Fatal("broken") }),
		fig(GroupToolCall, Extism, 0, spin),
	}
	var out, prog bytes.Buffer
	results, err := Run(context.Background(), figures, Options{
		Count: 2, Filter: regexp.MustCompile(`^(replay|op-roundtrip)/`), Out: &out, Progress: &prog, Sequential: sequential,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 4 {
		t.Fatalf("%d results, want 4 (the filter leaves tool-call out)", len(results))
	}
	if bodies != 2 {
		t.Errorf("the skipping and failing bodies ran %d times, want once each", bodies)
	}
	for i, want := range []struct {
		runs            int
		skipped, failed bool
	}{{2, false, false}, {0, true, false}, {2, false, false}, {0, false, true}} {
		r := results[i]
		if len(r.Runs) != want.runs || r.Skipped != want.skipped || r.Failed != want.failed {
			t.Errorf("%s: %d runs, skipped %v, failed %v; want %+v", Key(r.Figure), len(r.Runs), r.Skipped, r.Failed, want)
		}
	}
	config, lines := parseResults(t, out.String())
	if config["pkg"] != Pkg || config["goos"] == "" || config["goarch"] == "" {
		t.Errorf("header %v", config)
	}
	procs := Env().Procs
	// Which result and run each line is: in rounds, figure 0's and 2's
	// first runs, then their second; in sequence, figure 0's two, then
	// figure 2's.
	type at struct{ result, run int }
	order := []at{{0, 0}, {2, 0}, {0, 1}, {2, 1}}
	if sequential {
		order = []at{{0, 0}, {0, 1}, {2, 0}, {2, 1}}
	}
	if len(lines) != len(order) {
		t.Fatalf("%d result lines, want %d:\n%s", len(lines), len(order), out.String())
	}
	for i, l := range lines {
		a := order[i]
		if want := BenchmarkName(figures[a.result], procs); l.name != want || l.iters != 3 {
			t.Errorf("line %d: %s with %d iterations, want %s with 3", i, l.name, l.iters, want)
		}
		for _, u := range []string{"ns/op", "ns/step", "B/op", "allocs/op"} {
			if _, ok := l.values[u]; !ok {
				t.Errorf("line %d has no %s: %v", i, u, l.values)
			}
		}
		if l.values["ns/step"] != 42.5 {
			t.Errorf("line %d: ns/step %v, want 42.5", i, l.values["ns/step"])
		}
		r := results[a.result].Runs[a.run]
		if got, want := l.values["ns/op"], float64(r.NsPerOp()); math.Abs(got-want) > 0.01*want {
			t.Errorf("line %d: ns/op %v, the result says %v", i, got, want)
		}
	}
	if !strings.Contains(out.String(), "--- FAIL: "+BenchmarkName(figures[3], procs)+"\n") {
		t.Errorf("no FAIL line for the failing figure:\n%s", out.String())
	}
	if p := prog.String(); !strings.Contains(p, "[1/8] replay/wazero/n=10 (1/2)") || !strings.Contains(p, "skipped replay/js/n=10") ||
		!strings.Contains(p, "FAIL op-roundtrip/wazero-raw\n") {
		t.Errorf("progress:\n%s", p)
	}
	// The last run started, counting the runs the skipped and failed
	// figures gave up as done: in rounds, figure 2's second; in sequence,
	// figure 3's first.
	last := "[8/8] op-roundtrip/go (2/2)\n"
	if sequential {
		last = "[7/8] op-roundtrip/wazero-raw (1/2)\n"
	}
	if p := prog.String(); !strings.HasSuffix(strings.TrimSuffix(p, "FAIL op-roundtrip/wazero-raw\n"), last) {
		t.Errorf("progress does not end with %q:\n%s", last, p)
	}
}

func TestFailHint(t *testing.T) {
	got := failHint(fig(workload.GroupOpRoundTrip, workload.PlainGo, 0, nil))
	want := ` (its messages: go test ./bench/workload -run '^$' -bench '^BenchmarkOpRoundTrip$/^go$' -benchtime 1x)`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestRunNoFigures(t *testing.T) {
	_, err := Run(context.Background(), []workload.Figure{fig("replay", workload.PlainGo, 1, nil)},
		Options{Filter: regexp.MustCompile("nothing"), Out: &bytes.Buffer{}})
	if !errors.Is(err, ErrNoFigures) {
		t.Fatalf("got %v, want ErrNoFigures", err)
	}
}

// A cancelled run stops before its next run and returns what it has.
func TestRunCancelled(t *testing.T) {
	setBenchtime(t, "1x")
	ctx, cancel := context.WithCancel(context.Background())
	figures := []workload.Figure{
		fig("a", workload.PlainGo, 0, func(b *testing.B) {
			for b.Loop() {
			}
			cancel()
		}),
		fig("b", workload.PlainGo, 0, func(b *testing.B) { t.Error("ran after the cancel") }),
	}
	results, err := Run(ctx, figures, Options{Count: 2, Out: &bytes.Buffer{}})
	if !errors.Is(err, context.Canceled) || len(results) != 1 || len(results[0].Runs) != 1 {
		t.Fatalf("%v, %+v", err, results)
	}
}

func TestBenchmarkName(t *testing.T) {
	for _, c := range []struct {
		f     workload.Figure
		procs int
		want  string
	}{
		{fig(workload.GroupReplay, workload.GoWazero, 1000, nil), 2, "BenchmarkReplay/wazero/n=1000-2"},
		{fig(workload.GroupColdResume, workload.CWasmtime, 10, nil), 1, "BenchmarkColdResume/c-wasmtime/n=10"},
		{fig(workload.GroupLive+"-askstep", workload.JS, 100, nil), 8, "BenchmarkLiveAskStep/js/n=100-8"},
		{fig(workload.GroupOpRoundTrip, WazeroRaw, 0, nil), 2, "BenchmarkOpRoundTrip/wazero-raw-2"},
		{fig(GroupToolCallCold, Extism, 0, nil), 2, "BenchmarkToolCallCold/extism-2"},
	} {
		if got := BenchmarkName(c.f, c.procs); got != c.want {
			t.Errorf("%s: %s, want %s", Key(c.f), got, c.want)
		}
	}
}

// Every group of the suite has the name of its function in bench_test.go,
// so that go test's results and the suite's compare.
func TestBenchmarkNamesKnown(t *testing.T) {
	src, err := os.ReadFile("../workload/bench_test.go")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range workload.Suite() {
		if seen[f.Group] {
			continue
		}
		seen[f.Group] = true
		fn := benchFuncs[f.Group]
		if fn == "" {
			t.Errorf("group %s has no Benchmark function name: add bench_test.go's to benchFuncs in format.go", f.Group)
		} else if !strings.Contains(string(src), "func Benchmark"+fn+"(") {
			t.Errorf("group %s: bench/workload has no Benchmark%s", f.Group, fn)
		}
	}
}

func TestPeersAddTo(t *testing.T) {
	var ns []int
	body := func(*testing.B) {}
	p := Peers{
		TemporalReplay:           func(n int) func(*testing.B) { ns = append(ns, n); return body },
		WazeroHostCall:           func() func(*testing.B) { return body },
		ExtismCall:               func() func(*testing.B) { return body },
		ExtismInstantiateAndCall: func() func(*testing.B) { return body },
	}
	fs := p.AddTo([]workload.Figure{
		fig(workload.GroupReplay, workload.GoWazero, 1, body),
		fig(workload.GroupReplay, workload.GoWazero, 100, body),
		fig(workload.GroupReplay, workload.PlainGo, 1, body),
		fig(workload.GroupOpRoundTrip, workload.GoWazero, 0, body),
		fig(workload.GroupStepCommits, workload.GoWazero, 10, body),
	})
	var keys []string
	for _, f := range fs {
		keys = append(keys, Key(f))
	}
	want := []string{
		"replay/wazero/n=1", "replay/wazero/n=100", "replay/go/n=1", "replay/temporal/n=1", "replay/temporal/n=100",
		"op-roundtrip/wazero", "op-roundtrip/wazero-raw", "step-commits/wazero/n=10",
		"tool-call/extism", "tool-call-cold/extism",
	}
	if strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Errorf("figures\n%v\nwant\n%v", keys, want)
	}
}

func TestCommandLine(t *testing.T) {
	got := CommandLine([]string{"/some/dir/sandflow", "bench", "--run", "op-roundtrip/go$", "--out", "x y", "--benchtime", "1x", "it's", ""})
	want := `sandflow bench --run 'op-roundtrip/go$' --out 'x y' --benchtime 1x 'it'\''s' ''`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

package suite

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/bench/workload"
)

// result makes a figure's result whose runs took ns nanoseconds per op
// each, with extra metrics alternating between the values given.
func result(group string, rt workload.Runtime, n int, ns []float64, extra map[string][]float64) Result {
	r := Result{Figure: workload.Figure{Group: group, Runtime: rt, N: n}}
	for i, v := range ns {
		b := testing.BenchmarkResult{N: 10, T: time.Duration(v * 10), Extra: map[string]float64{}}
		for u, vs := range extra {
			b.Extra[u] = vs[i%len(vs)]
		}
		r.Runs = append(r.Runs, b)
	}
	return r
}

func ms(v float64) float64 { return v * 1e6 }

// synthetic is a run with the figures every check reads, but Extism's.
func synthetic() []Result {
	g := workload.GoWazero
	return []Result{
		result(workload.GroupReplay, g, 10, []float64{ms(0.1), ms(0.12), ms(0.11)}, map[string][]float64{"ns/step": {10e3}}),
		result(workload.GroupReplay, g, 1000, []float64{ms(1), ms(1.2), ms(0.9)}, nil),
		result(workload.GroupReplay, g, 10_000, []float64{ms(10), ms(11), ms(12)}, nil),
		result(workload.GroupReplayPreInit, g, 1000, []float64{ms(0.5)}, nil),
		result(workload.GroupReplayPreInit, g, 10_000, []float64{ms(5.5)}, nil),
		result(workload.GroupReplay, workload.PlainGo, 1000, []float64{ms(0.01)}, nil),
		{Figure: workload.Figure{Group: workload.GroupReplay, Runtime: workload.CWasmtime, N: 1000}, Skipped: true},
		result(workload.GroupReplay, Temporal, 10, []float64{ms(2)}, nil),
		result(workload.GroupReplay, Temporal, 1000, []float64{ms(30), ms(31), ms(29)}, nil), // 30×
		result(workload.GroupReplay, Temporal, 10_000, []float64{ms(500)}, nil),              // 45×
		result(workload.GroupOpRoundTrip, g, 0, []float64{500e3}, map[string][]float64{"ns/roundtrip": {50}}),
		result(workload.GroupOpRoundTrip, WazeroRaw, 0, []float64{10}, map[string][]float64{"ns/call": {10}}), // 5×
		result(workload.GroupWarmResume, g, 10, []float64{ms(3)}, nil),
		result(workload.GroupWarmResume, g, 10_000, []float64{ms(3)}, nil),
		result(workload.GroupWarmNoSync, g, 10, []float64{50e3, 60e3, 40e3}, nil),
		result(workload.GroupWarmNoSync, g, 10_000, []float64{55e3}, nil), // 1.1×
		result(workload.GroupColdResume, g, 10, []float64{ms(1.5)}, nil),
		result(workload.GroupSnapshot, g, 10, []float64{ms(2.5)}, nil),
		result(workload.GroupSnapshotNoSync, g, 10, []float64{ms(1)}, nil),
		result(workload.GroupSnapshotNoSync, g, 10_000, []float64{ms(0.9)}, nil), // 0.9×
		{Figure: workload.Figure{Group: workload.GroupColdResume, Runtime: g, N: 10_000}, Failed: true},
		result(workload.GroupToolCall, g, 0, []float64{ms(1)}, nil),
		result(workload.GroupToolCallNoSync, g, 0, []float64{80e3}, nil),
		result(workload.GroupSuspendedMemory, g, 100, []float64{ms(5)}, map[string][]float64{"B/run": {2048}, "rss-B/run": {4096}}),
		result(workload.GroupSuspendedMemory, workload.CWazero, 100, []float64{ms(5)}, map[string][]float64{"B/run": {1600}, "goroutines/run": {0}}),
		result(workload.GroupSuspendedMemory, workload.CWazero, 10_000, []float64{ms(500)}, map[string][]float64{"B/run": {2000}, "goroutines/run": {0}}),
	}
}

var polyline = regexp.MustCompile(`<polyline data-series="([^"]*)" points="([^"]*)"`)

func TestReplayChart(t *testing.T) {
	svg := ReplayChart(synthetic())
	if !strings.HasPrefix(svg, "<svg") || !strings.HasSuffix(svg, "</svg>") {
		t.Fatalf("not an SVG document:\n%s", svg)
	}
	ms := polyline.FindAllStringSubmatch(svg, -1)
	// One line per runtime with a measured replay: not the skipped
	// c-wasmtime, nor the other groups' runtimes.
	want := map[string]int{"wazero": 3, "go": 1, "temporal": 3}
	if len(ms) != len(want) {
		t.Fatalf("%d polylines, want %d:\n%s", len(ms), len(want), svg)
	}
	ys := map[string][]float64{}
	for _, m := range ms {
		pts := strings.Fields(m[2])
		if want[m[1]] != len(pts) {
			t.Errorf("series %s has %d points, want %d", m[1], len(pts), want[m[1]])
		}
		var prevX float64
		for i, p := range pts {
			xs, y, _ := strings.Cut(p, ",")
			x, err1 := strconv.ParseFloat(xs, 64)
			yv, err2 := strconv.ParseFloat(y, 64)
			if err1 != nil || err2 != nil || x < marginL || x > marginL+plotW || yv < marginT || yv > marginT+plotH {
				t.Errorf("series %s: point %q outside the plot", m[1], p)
			}
			if i > 0 && x <= prevX {
				t.Errorf("series %s: x does not grow with n: %s", m[1], m[2])
			}
			prevX = x
			ys[m[1]] = append(ys[m[1]], yv)
		}
	}
	// Temporal is slower at every n: higher on the chart (smaller y).
	for i := range ys["temporal"] {
		if i < len(ys["wazero"]) && ys["temporal"][i] >= ys["wazero"][i] {
			t.Errorf("temporal's point %d is not above wazero's: %v %v", i, ys["temporal"], ys["wazero"])
		}
	}
	if strings.Count(svg, `stroke-dasharray`) != 2 { // the peer's line and its legend
		t.Errorf("want only the peer's line dashed")
	}
	if got := ReplayChart(nil); strings.Contains(got, "<svg") {
		t.Errorf("a chart of nothing: %s", got)
	}
}

func TestChecks(t *testing.T) {
	want := map[string]struct{ value, status string }{
		"Temporal replay / sandflow replay (Go guest, wazero, pre-initialised), n=1000":  {"60.0×", StatusMet},
		"Temporal replay / sandflow replay (Go guest, wazero, instantiated), n=1000":     {"30.0×", StatusNoGoal},
		"Temporal replay / sandflow replay (Go guest, wazero, pre-initialised), n=10000": {"90.9×", StatusNotMet},
		"op round trip (Go guest, wazero) / raw wazero host call":                        {"5.00×", StatusMet},
		"warm resume (Go guest, wazero), n=10":                                           {"3.00 ms", StatusNotMet},
		"warm resume, no fsync (Go guest, wazero), n=10":                                 {"50.0 µs", StatusMet},
		"warm resume, no fsync (C guest, wazero), n=10":                                  {"", StatusNotMeasured + ": resume-warm-nosync/c-wazero/n=10 was not run"},
		"cold resume (Go guest, wazero), n=10":                                           {"1.50 ms", StatusNoGoal},
		"cold resume, instances pre-initialised (Go guest, wazero), n=10":                {"", StatusNotMeasured + ": resume-cold-preinit/wazero/n=10 was not run"},
		"warm resume n=10000 / n=10, no fsync (Go guest, wazero)":                        {"1.10×, too few runs to test", StatusNotMet},
		"cold resume n=10000 / n=10 (Go guest, wazero)":                                  {"", StatusNotMeasured + ": resume-cold/wazero/n=10000 failed"},
		"cold resume from a snapshot, pre-initialised (Go guest, wazero), n=10":          {"2.50 ms", StatusNotMet},
		"cold resume from a snapshot, no fsync (Go guest, wazero), n=10":                 {"1.00 ms", StatusMet},
		"resume from a snapshot n=10000 / n=10, no fsync (Go guest, wazero)":             {"0.9×", StatusMet},
		"resume from a snapshot after a restart n=10000 / n=10 (Go guest, wazero)":       {"", StatusNotMeasured + ": resume-snapshot-reload/wazero/n=10000 was not run"},
		"trivial tool call, no fsync (Go guest, wazero) / Extism call":                   {"", StatusNotMeasured + ": tool-call/extism: peers not run (test)"},
		"trivial tool call, fsync (Go guest, wazero) / Extism call":                      {"", StatusNotMeasured + ": tool-call/extism: peers not run (test)"},
		"trivial tool call, no fsync (C guest, wazero) / Extism call":                    {"", StatusNotMeasured + ": tool-call-nosync/c-wazero was not run"},
		"memory per suspended run, 100 runs (Go guest, wazero)":                          {"2.00 KiB", StatusNoGoal},
		"goroutines per suspended run, 10,000 runs (C guest, wazero)":                    {"0", StatusMet},
		"memory per suspended run, 10,000 runs / 100 runs (C guest, wazero)":             {"1.25×", StatusNotMet},
		"memory per parked run (Go guest, wazero)":                                       {"", StatusNotMeasured + ": memory-parked/wazero was not run"},
	}
	cs := Checks(synthetic(), "test")
	if len(cs) != len(want) {
		t.Errorf("%d checks, want %d", len(cs), len(want))
	}
	for _, c := range cs {
		w, ok := want[c.Name]
		if !ok {
			t.Errorf("unexpected check %q", c.Name)
			continue
		}
		if c.Value != w.value || c.Status != w.status {
			t.Errorf("%s: %q %q, want %q %q", c.Name, c.Value, c.Status, w.value, w.status)
		}
	}

	goals := map[string]string{}
	for _, c := range cs {
		goals[c.Goal] = c.Name
	}
	for _, g := range []string{"≥ 20×", "≥ 100×", "≤ 10×", "< 100 µs", "< 2 ms", "≤ 1×", "< 0.01", ""} {
		if _, ok := goals[g]; !ok {
			t.Errorf("no check has the goal %q: %v", g, goals)
		}
	}

	// With Extism's call measured (100 µs): a call is 0.8× without fsync
	// (met) and 10× with it (no goal).
	rs := append(synthetic(), result(GroupToolCall, Extism, 0, []float64{100e3}, nil))
	got := map[string]Check{}
	for _, c := range Checks(rs, "") {
		got[c.Name] = c
	}
	if c := got["trivial tool call, no fsync (Go guest, wazero) / Extism call"]; c.Value != "0.8×" || c.Status != StatusMet {
		t.Errorf("%+v", c)
	}
	if c := got["trivial tool call, fsync (Go guest, wazero) / Extism call"]; c.Value != "10.0×" || c.Status != StatusNoGoal {
		t.Errorf("%+v", c)
	}

	// A "no slower" ratio above 1× with five runs a side: met when the
	// n=10000 runs are not significantly slower, not met when they are.
	const warmCheck = "warm resume n=10000 / n=10, no fsync (Go guest, wazero)"
	for _, c := range []struct {
		n10, n10000   []float64
		value, status string
	}{
		{[]float64{50e3, 60e3, 40e3, 45e3, 55e3}, []float64{52e3, 58e3, 42e3, 47e3, 61e3}, "1.04×, not significantly slower (p = 0.35)", StatusMet},
		{[]float64{50e3, 51e3, 49e3, 48e3, 52e3}, []float64{53e3, 54e3, 55e3, 56e3, 57e3}, "1.10×, slower (p = 0.004)", StatusNotMet},
		{[]float64{50e3, 51e3, 49e3, 48e3, 52e3}, []float64{50e3, 50e3, 49e3, 48e3, 51e3}, "1.00×", StatusMet},
	} {
		var rs []Result
		for _, r := range synthetic() {
			if r.Figure.Group != workload.GroupWarmNoSync {
				rs = append(rs, r)
			}
		}
		rs = append(rs, result(workload.GroupWarmNoSync, workload.GoWazero, 10, c.n10, nil),
			result(workload.GroupWarmNoSync, workload.GoWazero, 10_000, c.n10000, nil))
		for _, got := range Checks(rs, "") {
			if got.Name == warmCheck && (got.Value != c.value || got.Status != c.status) {
				t.Errorf("%v against %v: %q %q, want %q %q", c.n10000, c.n10, got.Value, got.Status, c.value, c.status)
			}
		}
	}
}

func TestWriteHTML(t *testing.T) {
	r := &Report{
		Results: synthetic(), Env: Env(), Command: `sandflow bench --run '<replay>'`, Count: 3,
		PeersNote: "--peers off", Started: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), Elapsed: 90 * time.Second,
	}
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, s := range []string{
		"<svg", "Peers were not run", "--peers off", "&lt;replay&gt;", "2026-01-02 03:04 UTC",
		"resume-cold/wazero/n=10000", "FAILED", "skipped", "10.0 µs/step", "rss 4.00 KiB/run",
		"80.0 µs", "900 µs – 1.20 ms",
	} {
		if !strings.Contains(page, s) {
			t.Errorf("the page lacks %q", s)
		}
	}
	if strings.Contains(page, "<replay>") || strings.Contains(page, "<script") {
		t.Error("the page has unescaped input or a script")
	}
	if got, want := strings.Count(page, `<tr class="check">`), len(checkDefs()); got != want {
		t.Errorf("%d goal rows, want %d", got, want)
	}
	if got, want := strings.Count(page, `<tr class="figure">`), len(r.Results); got != want {
		t.Errorf("%d figure rows, want %d", got, want)
	}
	if got := strings.Count(page, `class="met"`); got != 6 {
		t.Errorf("%d rows MET, want 6", got)
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{formatDuration(812), "812 ns"},
		{formatDuration(38.0123e6), "38.0 ms"},
		{formatDuration(2.414e9), "2.41 s"},
		{formatDuration(1500), "1.50 µs"},
		{formatBytes(912), "912 B"},
		{formatBytes(5.31 * (1 << 20)), "5.31 MiB"},
		{formatMetric(3801, "ns/step"), "3.80 µs/step"},
		{formatMetric(123456, "steps/s"), "123k steps/s"},
		{formatMetric(0.5, "goroutines/run"), "0.5 goroutines/run"},
		{formatNumber(45.45), "45.5"},
		{countTick(10_000), "10k"},
		{durationTick(1e5), "100 µs"},
		{durationTick(10), "10 ns"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

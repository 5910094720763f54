package suite

import (
	"fmt"
	"strings"

	"github.com/sandflow/sandflow/bench/workload"
)

// Check is a row of the report's goals table: a figure, or a ratio of two
// figures of the same run, set against its goal.
type Check struct {
	Name string
	// Value is the measured value, formatted; "" when it could not be
	// computed (Status says why).
	Value string
	// Goal is the goal, formatted; "" for a row without one.
	Goal string
	// Status is "MET", "NOT MET", "no goal", or "not measured: " and why.
	Status string
	Note   string
}

// Statuses of a Check.
const (
	StatusMet         = "MET"
	StatusNotMet      = "NOT MET"
	StatusNoGoal      = "no goal"
	StatusNotMeasured = "not measured"
)

// goal is a bound on a value: value cmp bound.
type goal struct {
	cmp   string // ">=", "<=" or "<"
	bound float64
}

func (g goal) met(v float64) bool {
	switch g.cmp {
	case ">=":
		return v >= g.bound
	case "<=":
		return v <= g.bound
	}
	return v < g.bound
}

// kind is what a check's value is, for formatting it.
type kind int

const (
	kindRatio    kind = iota // a dimensionless ratio, "23.4×"
	kindDuration             // nanoseconds
	kindBytes                // bytes
	kindCount                // a count, "0.5"
)

func (k kind) format(v float64) string {
	switch k {
	case kindDuration:
		return formatDuration(v)
	case kindBytes:
		return formatBytes(v)
	case kindCount:
		return formatNumber(v)
	}
	return formatNumber(v) + "×"
}

type checkDef struct {
	name  string
	value func(*figures) (float64, error)
	kind  kind
	goal  *goal
	note  string
	// noSlower, on a ratio of two sizes of one figure with the goal ≤ 1×,
	// makes the goal "the numerator no slower than the denominator": also
	// met above 1× when the numerator's runs are not significantly slower
	// than the denominator's (slower).
	noSlower *[2]string
}

// figures are a run's results, for the checks to read.
type figures struct {
	byKey     map[string]Result
	results   []Result
	peersNote string
}

// result returns the figure key's result, or an error that says why
// there is none.
func (fs *figures) result(key string) (Result, error) {
	r, ok := fs.byKey[key]
	switch {
	case !ok && isPeer(key) && fs.peersNote != "":
		return r, fmt.Errorf("%s: peers not run (%s)", key, fs.peersNote)
	case !ok:
		return r, fmt.Errorf("%s was not run", key)
	case r.Failed:
		return r, fmt.Errorf("%s failed", key)
	case r.Skipped:
		return r, fmt.Errorf("%s was skipped", key)
	}
	return r, nil
}

// median returns the median of the figure key in unit, or an error that
// says why there is none.
func (fs *figures) median(key, unit string) (float64, error) {
	r, err := fs.result(key)
	if err != nil {
		return 0, err
	}
	v, ok := r.Median(unit)
	if !ok {
		return 0, fmt.Errorf("%s reported no %s", key, unit)
	}
	return v, nil
}

// keyOf returns the key of the group's figure of the runtime, whatever its
// size; "group/runtime" when there is none.
func (fs *figures) keyOf(group string, rt workload.Runtime) string {
	for _, r := range fs.results {
		if r.Figure.Group == group && r.Figure.Runtime == rt {
			return Key(r.Figure)
		}
	}
	return group + "/" + string(rt)
}

func figureKey(group string, rt workload.Runtime, n int) string {
	return Key(workload.Figure{Group: group, Runtime: rt, N: n})
}

// median returns a check value: one figure's median.
func median(key, unit string) func(*figures) (float64, error) {
	return func(fs *figures) (float64, error) { return fs.median(key, unit) }
}

// onlyMedian is median for the group's one figure of the runtime,
// whatever its size.
func onlyMedian(group string, rt workload.Runtime, unit string) func(*figures) (float64, error) {
	return func(fs *figures) (float64, error) { return fs.median(fs.keyOf(group, rt), unit) }
}

// quotient returns a check value: the ratio of two figures' medians.
func quotient(numKey, numUnit, denKey, denUnit string) func(*figures) (float64, error) {
	return func(fs *figures) (float64, error) {
		a, err := fs.median(numKey, numUnit)
		if err != nil {
			return 0, err
		}
		b, err := fs.median(denKey, denUnit)
		if err != nil {
			return 0, err
		}
		if b == 0 {
			return 0, fmt.Errorf("%s is 0 %s", denKey, denUnit)
		}
		return a / b, nil
	}
}

// slower says whether the runs of the figure numKey are significantly
// slower (ns/op) than those of denKey: the one-sided Mann–Whitney U test's
// p-value, and whether the runs were enough for it to tell (with too few,
// even runs all slower are not below alpha: 3 of each, p = 0.05).
func (fs *figures) slower(numKey, denKey string) (p float64, enough bool, err error) {
	num, err := fs.result(numKey)
	if err != nil {
		return 0, false, err
	}
	den, err := fs.result(denKey)
	if err != nil {
		return 0, false, err
	}
	p, minP := uTestGreater(num.Values("ns/op"), den.Values("ns/op"))
	return p, minP < alpha, nil
}

// noSlower makes a check of the ratio of the figure numKey's median to
// denKey's whose goal is ≤ 1×, met also when numKey's runs are not
// significantly slower (checkDef.noSlower).
func noSlower(name, numKey, denKey, note string) checkDef {
	return checkDef{name: name, value: quotient(numKey, "ns/op", denKey, "ns/op"), goal: &goal{"<=", 1},
		note: note, noSlower: &[2]string{numKey, denKey}}
}

// Sizes the checks read.
const (
	smallN = 10
	midN   = 1000
	largeN = 10_000

	fewSuspended  = 100
	manySuspended = 10_000
)

// checkDefs are the goals the suite is judged by.
func checkDefs() []checkDef {
	replay := func(rt workload.Runtime, n int) string { return figureKey(workload.GroupReplay, rt, n) }
	replayPreInit := func(n int) string { return figureKey(workload.GroupReplayPreInit, workload.GoWazero, n) }
	warm := func(n int) string { return figureKey(workload.GroupWarmResume, workload.GoWazero, n) }
	warmNoSync := func(n int) string { return figureKey(workload.GroupWarmNoSync, workload.GoWazero, n) }
	cold := func(n int) string { return figureKey(workload.GroupColdResume, workload.GoWazero, n) }
	coldPreInit := func(n int) string { return figureKey(workload.GroupColdPreInit, workload.GoWazero, n) }
	snap := func(n int) string { return figureKey(workload.GroupSnapshot, workload.GoWazero, n) }
	snapNoSync := func(n int) string { return figureKey(workload.GroupSnapshotNoSync, workload.GoWazero, n) }
	snapReload := func(n int) string { return figureKey(workload.GroupSnapshotReload, workload.GoWazero, n) }
	extismCall := figureKey(GroupToolCall, Extism, 0)
	suspended := func(rt workload.Runtime, n int) string { return figureKey(workload.GroupSuspendedMemory, rt, n) }
	return []checkDef{
		{
			name:  "Temporal replay / sandflow replay (Go guest, wazero, pre-initialised), n=1000",
			value: quotient(replay(Temporal, midN), "ns/op", replayPreInit(midN), "ns/op"),
			goal:  &goal{">=", 20},
			note: "Temporal's Go SDK replaying a 1,000-activity history in process, over sandflow replaying a 1,000-step " +
				"history on a pre-initialised instance (the goal's terms)",
		},
		{
			name:  "Temporal replay / sandflow replay (Go guest, wazero, pre-initialised), n=10000",
			value: quotient(replay(Temporal, largeN), "ns/op", replayPreInit(largeN), "ns/op"),
			goal:  &goal{">=", 100},
		},
		{
			name:  "Temporal replay / sandflow replay (Go guest, wazero, instantiated), n=1000",
			value: quotient(replay(Temporal, midN), "ns/op", replay(workload.GoWazero, midN), "ns/op"),
			note:  "the same with the instance made and initialised inside the replay",
		},
		{
			name: "op round trip (Go guest, wazero) / raw wazero host call",
			value: quotient(figureKey(workload.GroupOpRoundTrip, workload.GoWazero, 0), "ns/roundtrip",
				figureKey(workload.GroupOpRoundTrip, WazeroRaw, 0), "ns/call"),
			goal: &goal{"<=", 10},
			note: "one op through sandflow's ABI and op handler (ns/roundtrip), over one bare host function call (ns/call)",
		},
		{
			name:  "warm resume (Go guest, wazero), n=10",
			value: median(warm(smallN), "ns/op"),
			kind:  kindDuration,
			goal:  &goal{"<", 100e3},
			note:  "answer a question of a parked run to its next wait, fsync on: one synced commit",
		},
		{
			name:  "warm resume, no fsync (Go guest, wazero), n=10",
			value: median(warmNoSync(smallN), "ns/op"),
			kind:  kindDuration,
			goal:  &goal{"<", 100e3},
			note:  "the same on a store that does not fsync: the host's and the engine's part",
		},
		{
			name:  "warm resume, no fsync (C guest, wazero), n=10",
			value: median(figureKey(workload.GroupWarmNoSync, workload.CWazero, smallN), "ns/op"),
			kind:  kindDuration,
			goal:  &goal{"<", 100e3},
			note:  "the same with the C guest, whose runtime does less per resume",
		},
		{
			name:  "cold resume (Go guest, wazero), n=10",
			value: median(cold(smallN), "ns/op"),
			kind:  kindDuration,
			note: "answer a question of a run with no instance (fsync on): instantiate, replay, next wait; the " +
				"2 ms goal is for a host that keeps instances pre-initialised, the next row",
		},
		{
			name:  "cold resume, instances pre-initialised (Go guest, wazero), n=10",
			value: median(coldPreInit(smallN), "ns/op"),
			kind:  kindDuration,
			goal:  &goal{"<", 2e6},
			note:  "the same on a host that keeps instances initialised ahead of demand",
		},
		{
			name:  "cold resume from a snapshot, pre-initialised (Go guest, wazero), n=10",
			value: median(snap(smallN), "ns/op"),
			kind:  kindDuration,
			goal:  &goal{"<", 2e6},
			note:  "no parked instance: the suspension's snapshot restored into a pooled instance (run state loaded), fsync on",
		},
		{
			name:  "cold resume from a snapshot, no fsync (Go guest, wazero), n=10",
			value: median(snapNoSync(smallN), "ns/op"),
			kind:  kindDuration,
			goal:  &goal{"<", 2e6},
			note:  "the same on a store that does not fsync",
		},
		noSlower("warm resume n=10000 / n=10, no fsync (Go guest, wazero)", warmNoSync(largeN), warmNoSync(smallN),
			"a resume should not cost more for a longer history; without fsync, so that the disk's noise does not "+
				"hide it (medians of a few runs still differ by a few percent)"),
		{
			name:  "cold resume n=10000 / n=10 (Go guest, wazero)",
			value: quotient(cold(largeN), "ns/op", cold(smallN), "ns/op"),
			note: "a cold resume with nothing kept reads the log and replays the history, so this grows with n, " +
				"linearly as the replay goals ask; the resumes that must not grow are the warm one and those from " +
				"a snapshot (the rows around this one)",
		},
		noSlower("resume from a snapshot n=10000 / n=10, no fsync (Go guest, wazero)", snapNoSync(largeN), snapNoSync(smallN),
			"restored instead of replayed; the snapshot of a longer run's guest holds more touched memory"),
		noSlower("resume from a snapshot after a restart n=10000 / n=10 (Go guest, wazero)", snapReload(largeN), snapReload(smallN),
			"as the first resume after a restart: the run's state is loaded from its state image and the events "+
				"after it (at most 64), then its guest from the snapshot"),
		{
			name:  "trivial tool call, no fsync (Go guest, wazero) / Extism call",
			value: quotient(figureKey(workload.GroupToolCallNoSync, workload.GoWazero, 0), "ns/op", extismCall, "ns/op"),
			goal:  &goal{"<=", 1},
			note: "one Host.Call of a trivial tool (its JSON input decoded and a greeting encoded by the guest), the run " +
				"recorded in one commit on a store that does not fsync, over one Plugin.Call of the same guest work on a " +
				"warm Extism instance, which records nothing",
		},
		{
			name:  "trivial tool call, fsync (Go guest, wazero) / Extism call",
			value: quotient(figureKey(workload.GroupToolCall, workload.GoWazero, 0), "ns/op", extismCall, "ns/op"),
			note:  "the same with the store's real policy: the run is durable when the call returns",
		},
		{
			name:  "trivial tool call, no fsync (C guest, wazero) / Extism call",
			value: quotient(figureKey(workload.GroupToolCallNoSync, workload.CWazero, 0), "ns/op", extismCall, "ns/op"),
			note: "the same call with the C guest, whose JSON code is its own and whose runtime does little per call: " +
				"most of what is left is the host's part (Extism's plugin is the Go guest, so this is not the same guest work)",
		},
		{
			name:  "memory per suspended run, 100 runs (Go guest, wazero)",
			value: median(suspended(workload.GoWazero, fewSuspended), "B/run"),
			kind:  kindBytes,
			note:  "Go heap and goroutine stacks per run waiting on a question, no instance held (rss-B/run in the table of figures)",
		},
		{
			name:  "goroutines per suspended run, 10,000 runs (C guest, wazero)",
			value: median(suspended(workload.CWazero, manySuspended), "goroutines/run"),
			kind:  kindCount,
			goal:  &goal{"<", 0.01},
			note: "10,000 runs waiting on a question hold no goroutine (plain Go, the floor, holds one a run); nor an " +
				"instance: the host parks none here. A waiting run's instance is gone, so what the host keeps of it " +
				"does not depend on the guest; the C guest starts 10,000 runs in about a second",
		},
		{
			name: "memory per suspended run, 10,000 runs / 100 runs (C guest, wazero)",
			value: quotient(suspended(workload.CWazero, manySuspended), "B/run",
				suspended(workload.CWazero, fewSuspended), "B/run"),
			goal: &goal{"<=", 1},
			note: "the host's memory stays flat as runs wait: a run costs no more at 10,000 than at 100 (the host " +
				"keeps the states of the last 64 runs to go idle; past them a waiting run is in the store only)",
		},
		{
			name:  "memory per parked run (Go guest, wazero)",
			value: onlyMedian(workload.GroupParkedMemory, workload.GoWazero, "rss-B/run"),
			kind:  kindBytes,
			note: "resident memory per run waiting with its instance parked (rss-B/run): a guest's linear memory is " +
				"mapped outside the Go heap, so B/run (Go heap and stacks) leaves it out",
		},
	}
}

// Checks evaluates the suite's goals on results. peersNote is why the
// peers were not run ("" when they were), given as the reason for the
// rows that need them.
func Checks(results []Result, peersNote string) []Check {
	fs := &figures{byKey: map[string]Result{}, results: results, peersNote: peersNote}
	for _, r := range results {
		fs.byKey[Key(r.Figure)] = r
	}
	var cs []Check
	for _, d := range checkDefs() {
		c := Check{Name: d.name, Note: d.note, Status: StatusNoGoal}
		if d.goal != nil {
			c.Goal = formatGoal(*d.goal, d.kind)
		}
		v, err := d.value(fs)
		switch {
		case err != nil:
			c.Status = StatusNotMeasured + ": " + err.Error()
		case d.goal == nil:
			c.Value = d.kind.format(v)
		case d.goal.met(v):
			c.Value, c.Status = d.kind.format(v), StatusMet
		case d.noSlower != nil:
			c.Value, c.Status = noSlowerStatus(fs, d.noSlower, d.kind.format(v))
		default:
			c.Value, c.Status = d.kind.format(v), StatusNotMet
		}
		cs = append(cs, c)
	}
	return cs
}

// noSlowerStatus judges a ratio of medians above 1× of a noSlower check
// (keys: numerator, denominator) by its runs: met when the numerator's are
// not significantly slower, with the p-value after the ratio.
func noSlowerStatus(fs *figures, keys *[2]string, ratio string) (value, status string) {
	p, enough, err := fs.slower(keys[0], keys[1])
	switch {
	case err != nil:
		return ratio, StatusNotMet
	case !enough:
		return ratio + ", too few runs to test", StatusNotMet
	case p < alpha:
		return fmt.Sprintf("%s, slower (p = %.3f)", ratio, p), StatusNotMet
	}
	return fmt.Sprintf("%s, not significantly slower (p = %.2f)", ratio, p), StatusMet
}

// formatGoal formats a goal with its bound as written: "≥ 20×", "< 2 ms".
func formatGoal(g goal, k kind) string {
	cmp := map[string]string{">=": "≥", "<=": "≤", "<": "<"}[g.cmp]
	switch k {
	case kindDuration:
		return cmp + " " + durationTick(g.bound)
	case kindBytes:
		return cmp + " " + formatBytes(g.bound)
	case kindCount:
		return fmt.Sprintf("%s %g", cmp, g.bound)
	}
	return fmt.Sprintf("%s %g×", cmp, g.bound)
}

// isPeer reports whether a figure key names a peer's runtime.
func isPeer(key string) bool {
	parts := strings.Split(key, "/")
	if len(parts) < 2 {
		return false
	}
	switch workload.Runtime(parts[1]) {
	case Temporal, WazeroRaw, Extism:
		return true
	}
	return false
}

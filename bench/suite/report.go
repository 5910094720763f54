package suite

import (
	"html/template"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/sandflow/sandflow/bench/workload"
)

// Report is what the HTML report shows: a run's results and how it was
// made.
type Report struct {
	Results []Result
	Env     Environment
	// Command is the command line that ran the suite.
	Command string
	// Count, Benchtime and Filter are the run's settings ("" for Go's
	// default bench time, or no filter).
	Count             int
	Benchtime, Filter string
	// Sequential says that each figure's runs ran one after another, not
	// in rounds (Options.Sequential).
	Sequential bool
	// PeersNote says why the peers were not run; "" when they were.
	PeersNote string
	Started   time.Time
	Elapsed   time.Duration
	// Interrupted is set when the run was stopped before its end.
	Interrupted bool
}

// figureRow is a row of the report's table of figures.
type figureRow struct {
	Key, Runs, Median, Range, Status string
	Metrics                          []string
}

func (r *Report) figureRows() []figureRow {
	var rows []figureRow
	for _, res := range r.Results {
		row := figureRow{Key: Key(res.Figure), Runs: strconv.Itoa(len(res.Runs))}
		switch {
		case res.Failed:
			row.Status = "FAILED"
		case res.Skipped:
			row.Status = "skipped: runtime not available here"
		}
		if m, ok := res.Median("ns/op"); ok {
			row.Median = formatDuration(m)
			row.Range = spread(res.Values("ns/op"), formatDuration)
		}
		for _, u := range res.Units() {
			m, ok := res.Median(u)
			if !ok {
				continue
			}
			s := formatMetric(m, u)
			if vs := res.Values(u); slices.Min(vs) != slices.Max(vs) {
				s += " (" + spread(vs, func(v float64) string { return formatMetric(v, u) }) + ")"
			}
			row.Metrics = append(row.Metrics, s)
		}
		rows = append(rows, row)
	}
	return rows
}

// spread formats the least and the greatest value: "37.1 ms – 39.0 ms".
func spread(vs []float64, format func(float64) string) string {
	if len(vs) == 0 {
		return ""
	}
	lo, hi := vs[0], vs[0]
	for _, v := range vs {
		lo, hi = min(lo, v), max(hi, v)
	}
	return format(lo) + " – " + format(hi)
}

// ReplayChart is the report's chart: replay time against history length,
// log-log, a line per runtime and peer.
func ReplayChart(results []Result) string {
	return logLogChart(sizeSeries(results, workload.GroupReplay),
		"history length n (steps or activities)", "replay time per history (median)",
		countTick, durationTick, formatDuration)
}

// WriteHTML writes the report as one HTML page with its chart inline
// (SVG), no script and nothing to fetch.
func (r *Report) WriteHTML(w io.Writer) error {
	var failed, skipped []string
	for _, res := range r.Results {
		if res.Failed {
			failed = append(failed, Key(res.Figure))
		} else if res.Skipped {
			skipped = append(skipped, Key(res.Figure))
		}
	}
	benchtime := r.Benchtime
	if benchtime == "" {
		benchtime = "1s (Go's default)"
	}
	return page.Execute(w, map[string]any{
		"R":         r,
		"Benchtime": benchtime,
		"Started":   r.Started.UTC().Format("2006-01-02 15:04 MST"),
		"Elapsed":   r.Elapsed.Round(time.Second).String(),
		"Chart":     template.HTML(ReplayChart(r.Results)),
		"Figures":   r.figureRows(),
		"Checks":    Checks(r.Results, r.PeersNote),
		"Failed":    failed,
		"Skipped":   skipped,
	})
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"statusClass": func(s string) string {
		switch {
		case s == StatusMet:
			return "met"
		case s == StatusNotMet:
			return "notmet"
		}
		return "other"
	},
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>sandflow benchmarks</title>
<style>
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 72em; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.num { text-align: right; white-space: nowrap; }
.met { color: #0a7a0a; font-weight: bold; }
.notmet { color: #b00; font-weight: bold; }
.other { color: #666; }
.note { color: #555; font-size: 0.9em; }
code { background: #f3f3f3; padding: 0 0.2em; }
</style>
</head>
<body>
<h1>sandflow benchmarks</h1>
<p>
<code>{{.R.Command}}</code><br>
{{.Started}}, {{.Elapsed}}; {{.R.Env.GOOS}}/{{.R.Env.GOARCH}}{{if .R.Env.CPU}}, {{.R.Env.CPU}}{{end}},
GOMAXPROCS {{.R.Env.Procs}}, {{.R.Env.GoVersion}}.<br>
Each figure ran {{.R.Count}} times, with -benchtime {{.Benchtime}}{{if .R.Filter}}; figures matching <code>{{.R.Filter}}</code>{{end}};
{{if .R.Sequential}}each figure's runs one after another{{else}}in rounds, every figure once a round{{end}}.
Values are medians, with the least and greatest run.
</p>
{{if .R.PeersNote}}<p><strong>Peers were not run</strong> ({{.R.PeersNote}}): the rows that compare with Temporal, Extism or a raw wazero host call are not measured.</p>
{{else}}<p>The peers (Temporal, Extism, raw wazero, from <code>bench/peers</code>) ran in the same process as sandflow's figures.</p>
{{end}}{{if .R.Interrupted}}<p><strong>The run was interrupted</strong>: figures after the last one shown were not run.</p>
{{end}}{{if .Failed}}<p class="notmet">Failed: {{range $i, $k := .Failed}}{{if $i}}, {{end}}{{$k}}{{end}}</p>
{{end}}{{if .Skipped}}<p class="other">Skipped (runtime not available here): {{range $i, $k := .Skipped}}{{if $i}}, {{end}}{{$k}}{{end}}</p>
{{end}}
<h2>Goals</h2>
<p class="note">Computed within this run, from medians. A goal that a figure be no slower at n=10000 than at n=10 (≤ 1×)
is also met above 1× when its n=10000 runs are not significantly slower than its n=10 runs: a one-sided Mann–Whitney U
test of the two sets of runs gives p ≥ 0.05. Medians of a few runs of the same work differ by a few percent either way
on a shared machine; the test needs at least four runs of each to tell a difference, and with fewer the ratio alone
decides.</p>
<table>
<tr><th>what</th><th>value</th><th>goal</th><th>status</th><th>note</th></tr>
{{range .Checks}}<tr class="check"><td>{{.Name}}</td><td class="num">{{.Value}}</td><td class="num">{{.Goal}}</td><td class="{{statusClass .Status}}">{{.Status}}</td><td class="note">{{.Note}}</td></tr>
{{end}}</table>

<h2>Replay time against history length</h2>
<p class="note">Replaying a completed run's whole history, log-log; dashed lines are peers.</p>
{{.Chart}}

<h2>Figures</h2>
<table>
<tr><th>figure</th><th>runs</th><th>time/op</th><th>least – greatest</th><th>metrics</th><th></th></tr>
{{range .Figures}}<tr class="figure"><td>{{.Key}}</td><td class="num">{{.Runs}}</td><td class="num">{{.Median}}</td><td class="num">{{.Range}}</td><td>{{range $i, $m := .Metrics}}{{if $i}}<br>{{end}}{{$m}}{{end}}</td><td>{{.Status}}</td></tr>
{{end}}</table>
<p class="note">The raw results, for <code>benchstat</code>, are in <code>results.txt</code> beside this page.</p>
</body>
</html>
`))

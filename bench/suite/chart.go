package suite

import (
	"fmt"
	"html"
	"math"
	"strings"

	"github.com/sandflow/sandflow/bench/workload"
)

// series is one line of a chart: a runtime's medians by size.
type series struct {
	name   string
	dashed bool
	points []point
}

type point struct{ x, y float64 }

// sizeSeries returns, for the group, one series per runtime (in the order
// the results first name them) of median ns/op by N. Figures without a
// size, or with nothing measured, are left out.
func sizeSeries(results []Result, group string) []series {
	var ss []series
	at := map[workload.Runtime]int{}
	for _, r := range results {
		f := r.Figure
		if f.Group != group || f.N <= 0 {
			continue
		}
		y, ok := r.Median("ns/op")
		if !ok || y <= 0 {
			continue
		}
		i, seen := at[f.Runtime]
		if !seen {
			i = len(ss)
			at[f.Runtime] = i
			ss = append(ss, series{name: string(f.Runtime), dashed: isPeer(group + "/" + string(f.Runtime))})
		}
		ss[i].points = append(ss[i].points, point{float64(f.N), y})
	}
	return ss
}

var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// Chart geometry, in SVG units.
const (
	chartW, chartH               = 780, 440
	marginL, marginR             = 80, 170
	marginT, marginB             = 20, 60
	plotW, plotH                 = chartW - marginL - marginR, chartH - marginT - marginB
	legendX                      = chartW - marginR + 20
	legendDY                     = 20
	axisFont, legendFont, dotRad = 12, 13, 3.5
)

// logLogChart draws the series as an SVG line chart with logarithmic axes,
// one polyline per series (with a dot per point, whose tooltip gives the
// value), a grid line per power of ten, and a legend.
func logLogChart(ss []series, xLabel, yLabel string, xTick, yTick, yValue func(float64) string) string {
	var xs, ys []float64
	for _, s := range ss {
		for _, p := range s.points {
			xs = append(xs, p.x)
			ys = append(ys, p.y)
		}
	}
	if len(xs) == 0 {
		return `<p class="none">No figures to chart in this run.</p>`
	}
	x0, x1 := decades(xs)
	y0, y1 := decades(ys)
	px := func(x float64) float64 { return marginL + (math.Log10(x)-x0)/(x1-x0)*plotW }
	py := func(y float64) float64 { return marginT + plotH - (math.Log10(y)-y0)/(y1-y0)*plotH }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="sans-serif">`+"\n",
		chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>`+"\n", marginL, marginT, plotW, plotH)
	for k := x0; k <= x1; k++ {
		x := px(math.Pow(10, k))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`, x, marginT, x, marginT+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="%d" text-anchor="middle">%s</text>`+"\n",
			x, marginT+plotH+18, axisFont, html.EscapeString(xTick(math.Pow(10, k))))
	}
	for k := y0; k <= y1; k++ {
		y := py(math.Pow(10, k))
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`, marginL, y, marginL+plotW, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="%d" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n",
			marginL-6, y, axisFont, html.EscapeString(yTick(math.Pow(10, k))))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="%d" text-anchor="middle">%s</text>`+"\n",
		marginL+plotW/2, chartH-15, axisFont+1, html.EscapeString(xLabel))
	fmt.Fprintf(&b, `<text x="16" y="%d" font-size="%d" text-anchor="middle" transform="rotate(-90 16 %d)">%s</text>`+"\n",
		marginT+plotH/2, axisFont+1, marginT+plotH/2, html.EscapeString(yLabel))
	for i, s := range ss {
		color := palette[i%len(palette)]
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		pts := make([]string, len(s.points))
		for j, p := range s.points {
			pts[j] = fmt.Sprintf("%.1f,%.1f", px(p.x), py(p.y))
		}
		name := html.EscapeString(s.name)
		fmt.Fprintf(&b, `<polyline data-series="%s" points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n",
			name, strings.Join(pts, " "), color, dash)
		for _, p := range s.points {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s"><title>%s n=%s: %s</title></circle>`+"\n",
				px(p.x), py(p.y), dotRad, color, name, html.EscapeString(xTick(p.x)), html.EscapeString(yValue(p.y)))
		}
		ly := marginT + 10 + i*legendDY
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`,
			legendX, ly, legendX+24, ly, color, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="%d" dominant-baseline="middle">%s</text>`+"\n",
			legendX+30, ly, legendFont, name)
	}
	b.WriteString("</svg>")
	return b.String()
}

// decades returns the powers of ten around the values: floor(log10(min))
// and ceil(log10(max)), one apart at least.
func decades(vs []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		lo, hi = math.Min(lo, math.Log10(v)), math.Max(hi, math.Log10(v))
	}
	lo, hi = math.Floor(lo), math.Ceil(hi)
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi
}

// countTick labels a power of ten of a count: "1", "100", "10k", "1M".
func countTick(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", v)
}

// durationTick formats nanoseconds in the largest unit they reach, with
// no more digits than needed: a power of ten, "10 µs", or a goal, "2 ms".
func durationTick(ns float64) string {
	for _, u := range []struct {
		scale float64
		name  string
	}{{1e9, "s"}, {1e6, "ms"}, {1e3, "µs"}} {
		if ns >= u.scale {
			return fmt.Sprintf("%g %s", ns/u.scale, u.name)
		}
	}
	return fmt.Sprintf("%g ns", ns)
}

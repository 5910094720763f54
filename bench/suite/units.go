package suite

import (
	"fmt"
	"math"
	"strings"
)

// formatNumber gives three significant digits, and k, M or G above 10,000:
// "0.123", "12.3", "456", "7890", "12.3k".
func formatNumber(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e10:
		return sig3(v/1e9) + "G"
	case a >= 1e7:
		return sig3(v/1e6) + "M"
	case a >= 1e4:
		return sig3(v/1e3) + "k"
	}
	return sig3(v)
}

func sig3(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100 || a == 0:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

// formatDuration formats nanoseconds: "812 ns", "38.0 ms", "2.41 s".
func formatDuration(ns float64) string {
	a := math.Abs(ns)
	switch {
	case a >= 1e9:
		return sig3(ns/1e9) + " s"
	case a >= 1e6:
		return sig3(ns/1e6) + " ms"
	case a >= 1e3:
		return sig3(ns/1e3) + " µs"
	}
	return sig3(ns) + " ns"
}

// formatBytes formats a size in binary units: "912 B", "5.31 MiB".
func formatBytes(b float64) string {
	a := math.Abs(b)
	switch {
	case a >= 1<<30:
		return sig3(b/(1<<30)) + " GiB"
	case a >= 1<<20:
		return sig3(b/(1<<20)) + " MiB"
	case a >= 1<<10:
		return sig3(b/(1<<10)) + " KiB"
	}
	return sig3(b) + " B"
}

// formatMetric formats a value of a benchmark unit: durations for ns/...
// units ("3.80 µs/step"), sizes for B/... units ("5.31 MiB/run"), numbers
// for the rest ("123k steps/s").
func formatMetric(v float64, unit string) string {
	if rest, ok := strings.CutPrefix(unit, "ns/"); ok {
		return formatDuration(v) + "/" + rest
	}
	for _, p := range []string{"B/", "rss-B/"} {
		if rest, ok := strings.CutPrefix(unit, p); ok {
			s := formatBytes(v) + "/" + rest
			if p == "rss-B/" {
				s = "rss " + s
			}
			return s
		}
	}
	return formatNumber(v) + " " + unit
}

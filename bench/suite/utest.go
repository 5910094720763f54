package suite

import (
	"math"
	"slices"
)

// alpha is the significance level of the suite's tests: a difference is
// significant when its p-value is below it (benchstat's default).
const alpha = 0.05

// exactLimit is how many splits of the pooled runs uTestGreater counts
// one by one; above it, it uses the normal approximation.
const exactLimit = 1 << 20

// uTestGreater is the one-sided Mann–Whitney U test of whether the values
// in a tend to be greater than those in b. It returns the p-value: the
// chance, were both drawn from one distribution, of a rank sum for a as
// large as the one seen (ties count half, by midranks), and the least
// p-value the test could return for samples of these sizes (minP), below
// which nothing can be told apart. Small samples, as a suite run's five
// runs of a figure, get the exact distribution, counted over every way to
// split the pooled values into groups of a's and b's sizes.
func uTestGreater(a, b []float64) (p, minP float64) {
	n, m := len(a), len(b)
	if n == 0 || m == 0 {
		return 1, 1
	}
	ranks := midranks(append(slices.Clone(a), b...))
	observed := 0.0
	for _, r := range ranks[:n] {
		observed += r
	}
	splits := binomial(n+m, n)
	minP = 1 / splits
	if splits > exactLimit {
		return normalGreater(ranks, n, observed), minP
	}
	// Rank sums are multiples of a half: compare them doubled, as
	// integers, so that a sum equal to the observed one counts.
	twice := make([]int, len(ranks))
	for i, r := range ranks {
		twice[i] = int(math.Round(2 * r))
	}
	target := int(math.Round(2 * observed))
	atLeast := 0
	var pick func(from, left, sum int)
	pick = func(from, left, sum int) {
		if left == 0 {
			if sum >= target {
				atLeast++
			}
			return
		}
		for i := from; i <= len(twice)-left; i++ {
			pick(i+1, left-1, sum+twice[i])
		}
	}
	pick(0, n, 0)
	return float64(atLeast) / splits, minP
}

// midranks returns each value's rank in vs, from 1, ties sharing the mean
// of the ranks they span.
func midranks(vs []float64) []float64 {
	order := make([]int, len(vs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int {
		switch {
		case vs[i] < vs[j]:
			return -1
		case vs[i] > vs[j]:
			return 1
		}
		return 0
	})
	ranks := make([]float64, len(vs))
	for i := 0; i < len(order); {
		j := i
		for j+1 < len(order) && vs[order[j+1]] == vs[order[i]] {
			j++
		}
		mid := float64(i+j)/2 + 1
		for k := i; k <= j; k++ {
			ranks[order[k]] = mid
		}
		i = j + 1
	}
	return ranks
}

// normalGreater is the p-value of a rank sum as large as observed for the
// first n of ranks, by the normal approximation with the ties' correction
// of the variance and a continuity correction.
func normalGreater(ranks []float64, n int, observed float64) float64 {
	total := len(ranks)
	m := total - n
	mean := float64(n) * float64(total+1) / 2
	// Each group of t tied values lowers the variance by t³-t.
	counts := map[float64]int{}
	for _, r := range ranks {
		counts[r]++
	}
	ties := 0.0
	for _, t := range counts {
		ties += float64(t*t*t - t)
	}
	nt := float64(total)
	variance := float64(n) * float64(m) / 12 * ((nt + 1) - ties/(nt*(nt-1)))
	if variance <= 0 {
		return 1
	}
	z := (observed - mean - 0.5) / math.Sqrt(variance)
	return 0.5 * math.Erfc(z/math.Sqrt2)
}

// binomial is n choose k, as a float64.
func binomial(n, k int) float64 {
	r := 1.0
	for i := 1; i <= k; i++ {
		r = r * float64(n-k+i) / float64(i)
	}
	return r
}

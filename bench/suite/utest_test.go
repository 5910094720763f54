package suite

import (
	"math"
	"testing"
)

func TestUTestGreater(t *testing.T) {
	for _, c := range []struct {
		a, b    []float64
		p, minP float64
	}{
		// a above b in every pair: only 1 of the C(10,5) splits has a
		// rank sum that large.
		{[]float64{6, 7, 8, 9, 10}, []float64{1, 2, 3, 4, 5}, 1.0 / 252, 1.0 / 252},
		// a below b in every pair: every split's sum is at least as large.
		{[]float64{1, 2, 3, 4, 5}, []float64{6, 7, 8, 9, 10}, 1, 1.0 / 252},
		// Rank 3 of 4: two of the four splits reach it.
		{[]float64{55}, []float64{40, 50, 60}, 0.5, 0.25},
		// Ties share midranks: [1 2 2 3] ranks 1 2.5 2.5 4.
		{[]float64{1, 2}, []float64{2, 3}, 1, 1.0 / 6},
		{[]float64{2, 3}, []float64{1, 2}, 2.0 / 6, 1.0 / 6},
		// All equal: no evidence either way.
		{[]float64{5, 5, 5}, []float64{5, 5, 5}, 1, 1.0 / 20},
		{nil, []float64{1}, 1, 1},
	} {
		p, minP := uTestGreater(c.a, c.b)
		if math.Abs(p-c.p) > 1e-12 || math.Abs(minP-c.minP) > 1e-12 {
			t.Errorf("%v > %v: p %v, minP %v; want %v, %v", c.a, c.b, p, minP, c.p, c.minP)
		}
	}
}

// The normal approximation, used for large samples, is close to the exact
// count where both apply.
func TestUTestNormal(t *testing.T) {
	a := []float64{3, 5, 8, 9, 12, 14, 15, 18, 20, 21}
	b := []float64{1, 2, 4, 6, 7, 10, 11, 13, 16, 17}
	exact, _ := uTestGreater(a, b)
	ranks := midranks(append(append([]float64{}, a...), b...))
	sum := 0.0
	for _, r := range ranks[:len(a)] {
		sum += r
	}
	approx := normalGreater(ranks, len(a), sum)
	if exact < 0.01 || exact > 0.5 || math.Abs(exact-approx) > 0.01 {
		t.Errorf("exact p %v, normal approximation %v", exact, approx)
	}
	// Past exactLimit splits, uTestGreater uses the approximation.
	big := make([]float64, 30)
	for i := range big {
		big[i] = float64(i)
	}
	p, minP := uTestGreater(big[15:], big[:15])
	if binomial(30, 15) <= exactLimit || p > 1e-5 || minP > 1e-8 {
		t.Errorf("30 values apart: p %v, minP %v", p, minP)
	}
}

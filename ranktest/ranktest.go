// Package ranktest compares two samples without assuming how they are
// distributed: the Mann–Whitney U test (the Wilcoxon rank-sum test), and
// the Hodges–Lehmann estimate of the shift between them with its
// confidence interval. sluice's comparison checks judge a candidate's
// samples of a metric against the stable's, taken over the same window.
//
// The p-value is exact (the null distribution of U, counted) when both
// samples have fewer than 50 values and no value is shared between or
// within them; otherwise it comes from the normal approximation, with the
// variance corrected for ties and a continuity correction of one half.
// These are the conventions of R's wilcox.test, whose published results
// the tests check.
package ranktest

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Alternative is what the test looks for.
type Alternative int

const (
	// TwoSided: x and y differ in location, either way.
	TwoSided Alternative = iota
	// Greater: x tends to be larger than y.
	Greater
	// Less: x tends to be smaller than y.
	Less
)

func (a Alternative) String() string {
	switch a {
	case Greater:
		return "greater"
	case Less:
		return "less"
	}
	return "two-sided"
}

// exactBelow is the sample size from which the p-value comes from the
// normal approximation even without ties: the exact distribution's cost
// grows with n1²n2², and the approximation is close by then.
const exactBelow = 50

// Result is one comparison of x with y.
type Result struct {
	N1, N2 int
	// U counts the pairs (x[i], y[j]) with x[i] > y[j], plus half of those
	// with x[i] == y[j]: R's W. Its mean under the null is N1·N2/2.
	U float64
	// P is the p-value for the alternative asked; Exact says whether it
	// comes from the exact distribution of U.
	P     float64
	Exact bool
	// Shift is the Hodges–Lehmann estimate of how far x lies above y: the
	// median of all differences x[i] - y[j].
	Shift float64
	// Low and High bound the shift at Level; one of them is infinite for
	// a one-sided alternative.
	Low, High float64
	Level     float64
}

// Test compares x with y. level is the confidence level of the interval
// (0.95 for 95%).
func Test(x, y []float64, alt Alternative, level float64) (Result, error) {
	if len(x) == 0 || len(y) == 0 {
		return Result{}, fmt.Errorf("ranktest: each sample needs a value (have %d and %d)", len(x), len(y))
	}
	if !(level > 0 && level < 1) {
		return Result{}, fmt.Errorf("ranktest: confidence level %v is not between 0 and 1", level)
	}
	for _, s := range [][]float64{x, y} {
		if slices.ContainsFunc(s, func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }) {
			return Result{}, errors.New("ranktest: samples must be finite numbers")
		}
	}
	m, n := len(x), len(y)
	r := Result{N1: m, N2: n, Level: level}
	var ties []int
	r.U, ties = uStatistic(x, y)
	r.Exact = m < exactBelow && n < exactBelow && len(ties) == 0
	diffs := differences(x, y)
	r.Shift = median(diffs)
	if r.Exact {
		dist := uDistribution(m, n)
		r.P = exactP(dist, r.U, alt)
		r.Low, r.High = exactInterval(dist, diffs, alt, level)
	} else {
		r.P = normalP(m, n, r.U, ties, alt, true)
		r.Low, r.High = normalInterval(m, n, ties, diffs, alt, level)
	}
	return r, nil
}

// uStatistic returns U and the sizes of the groups of tied values in the
// pooled sample (only groups of two or more).
func uStatistic(x, y []float64) (float64, []int) {
	type obs struct {
		v    float64
		ofX  bool
		rank float64
	}
	pooled := make([]obs, 0, len(x)+len(y))
	for _, v := range x {
		pooled = append(pooled, obs{v: v, ofX: true})
	}
	for _, v := range y {
		pooled = append(pooled, obs{v: v})
	}
	slices.SortStableFunc(pooled, func(a, b obs) int {
		switch {
		case a.v < b.v:
			return -1
		case a.v > b.v:
			return 1
		}
		return 0
	})
	var ties []int
	// Tied values share the mean of the ranks they span.
	for i := 0; i < len(pooled); {
		j := i
		for j < len(pooled) && pooled[j].v == pooled[i].v {
			j++
		}
		mid := float64(i+1+j) / 2
		for k := i; k < j; k++ {
			pooled[k].rank = mid
		}
		if j-i > 1 {
			ties = append(ties, j-i)
		}
		i = j
	}
	var rankSum float64
	for _, o := range pooled {
		if o.ofX {
			rankSum += o.rank
		}
	}
	m := float64(len(x))
	return rankSum - m*(m+1)/2, ties
}

// uDistribution is the null distribution of U for samples of m and n
// values without ties: dist[u] = P(U = u). It counts by the largest of the
// m+n values: an x with probability m/(m+n), which exceeds all n values of
// y (U gains n), or a y, which adds nothing; the rest is the same question
// one value smaller. All terms are positive, so no precision is lost to
// cancellation.
func uDistribution(m, n int) []float64 {
	// prev[j] is the distribution for (i-1, j), cur[j] for (i, j).
	prev := make([][]float64, n+1)
	cur := make([][]float64, n+1)
	for i := 0; i <= m; i++ {
		for j := 0; j <= n; j++ {
			if i == 0 || j == 0 {
				cur[j] = []float64{1}
				continue
			}
			d := make([]float64, i*j+1)
			px, py := float64(i)/float64(i+j), float64(j)/float64(i+j)
			for u, p := range prev[j] {
				d[u+j] += px * p
			}
			for u, p := range cur[j-1] {
				d[u] += py * p
			}
			cur[j] = d
		}
		prev, cur = cur, prev
	}
	return prev[n]
}

// exactP is the p-value of U = u under dist.
func exactP(dist []float64, u float64, alt Alternative) float64 {
	k := int(math.Round(u))
	below := func(k int) float64 { // P(U <= k)
		var s float64
		for i := 0; i <= k && i < len(dist); i++ {
			s += dist[i]
		}
		return s
	}
	above := func(k int) float64 { // P(U >= k)
		var s float64
		for i := max(k, 0); i < len(dist); i++ {
			s += dist[i]
		}
		return s
	}
	switch alt {
	case Greater:
		return above(k)
	case Less:
		return below(k)
	}
	mean := float64(len(dist)-1) / 2
	p := below(k)
	if float64(k) > mean {
		p = above(k)
	}
	return math.Min(1, 2*p)
}

// normalP is the p-value of U = u from the normal approximation, its
// variance corrected for the tied groups, with or without a continuity
// correction of one half towards the mean.
func normalP(m, n int, u float64, ties []int, alt Alternative, correct bool) float64 {
	sigma := normalSigma(m, n, ties)
	if sigma == 0 {
		return 1 // every value tied: nothing tells the samples apart
	}
	z := u - float64(m*n)/2
	if correct {
		switch alt {
		case Greater:
			z -= 0.5
		case Less:
			z += 0.5
		default:
			if z > 0 {
				z -= 0.5
			} else if z < 0 {
				z += 0.5
			}
		}
	}
	z /= sigma
	switch alt {
	case Greater:
		return 1 - phi(z)
	case Less:
		return phi(z)
	}
	return math.Min(1, 2*math.Min(phi(z), 1-phi(z)))
}

func normalSigma(m, n int, ties []int) float64 {
	N := float64(m + n)
	var t3 float64
	for _, t := range ties {
		t3 += float64(t*t*t - t)
	}
	return math.Sqrt(float64(m*n) / 12 * ((N + 1) - t3/(N*(N-1))))
}

// phi is the standard normal distribution function.
func phi(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// quantile is the standard normal quantile function.
func quantile(p float64) float64 { return math.Sqrt2 * math.Erfinv(2*p-1) }

// differences are all x[i] - y[j], sorted.
func differences(x, y []float64) []float64 {
	d := make([]float64, 0, len(x)*len(y))
	for _, a := range x {
		for _, b := range y {
			d = append(d, a-b)
		}
	}
	slices.Sort(d)
	return d
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// The interval for the shift is a pair of order statistics of the sorted
// differences (Hollander & Wolfe): the k-th smallest and the k-th largest,
// where k is the number of differences U may fall short of its mean by
// before the shift is rejected at the level.

// exactInterval takes k from the exact distribution: the smallest k with
// P(U <= k) at least alpha (alpha/2 each side when two-sided), at least 1.
func exactInterval(dist, diffs []float64, alt Alternative, level float64) (float64, float64) {
	alpha := 1 - level
	if alt == TwoSided {
		alpha /= 2
	}
	k, cum := 0, 0.0
	for ; k < len(dist); k++ {
		if cum += dist[k]; cum >= alpha {
			break
		}
	}
	return bounds(diffs, max(k, 1), alt)
}

// normalInterval takes k from the normal approximation: the mean of U less
// the quantile times its (tie-corrected) standard deviation, rounded.
func normalInterval(m, n int, ties []int, diffs []float64, alt Alternative, level float64) (float64, float64) {
	alpha := 1 - level
	if alt == TwoSided {
		alpha /= 2
	}
	k := int(math.Round(float64(m*n)/2 - quantile(1-alpha)*normalSigma(m, n, ties)))
	return bounds(diffs, min(max(k, 1), len(diffs)), alt)
}

func bounds(diffs []float64, k int, alt Alternative) (float64, float64) {
	lo, hi := diffs[k-1], diffs[len(diffs)-k]
	switch alt {
	case Greater:
		return lo, math.Inf(1)
	case Less:
		return math.Inf(-1), hi
	}
	return lo, hi
}

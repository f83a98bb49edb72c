package ranktest

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Reference values published with R's wilcox.test and SciPy's
// mannwhitneyu, on the samples their documentation uses.
var (
	// Hollander & Wolfe (1973), 69f.: permeability constants of the human
	// chorioamnion at term (x) and at 12 to 26 weeks (y).
	hwX = []float64{0.80, 0.83, 1.89, 1.04, 1.45, 1.38, 1.91, 1.64, 0.73, 1.46}
	hwY = []float64{1.15, 0.88, 0.90, 0.74, 1.21}
	// SciPy's example: ages of male and female students.
	males   = []float64{19, 22, 16, 29, 24}
	females = []float64{20, 11, 17, 12}
	// With ties, within and across the samples.
	tiedX = []float64{1, 5, 9, 24, 56, 21, 3, 7, 21, 4}
	tiedY = []float64{12, 15, 5, 9, 9, 14, 56, 22, 3, 7, 32, 5}
	farY  = []float64{1233, 4356, 987, 39999, 1111, 200000}
)

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func TestPublishedPValues(t *testing.T) {
	for _, tc := range []struct {
		name  string
		x, y  []float64
		alt   Alternative
		u, p  float64
		exact bool
	}{
		// wilcox.test(x, y, alternative = "greater"): W = 35, p-value = 0.1272
		{"H&W greater, exact", hwX, hwY, Greater, 35, 0.1272, true},
		// mannwhitneyu(males, females, method="exact"): U = 17, p = 0.1111
		{"SciPy two-sided, exact", males, females, TwoSided, 17, 0.11111111, true},
		// wilcox.test(x, y): W = 51.5, p-value = 0.5966 (ties: normal, corrected)
		{"ties two-sided", tiedX, tiedY, TwoSided, 51.5, 0.5966, false},
		// wilcox.test(x, y2): W = 0, p-value = 0.001364 (x has ties)
		{"ties, far apart", tiedX, farY, TwoSided, 0, 0.001364, false},
	} {
		r, err := Test(tc.x, tc.y, tc.alt, 0.95)
		if err != nil {
			t.Fatal(err)
		}
		if r.U != tc.u || r.Exact != tc.exact || !near(r.P, tc.p, 5e-5) {
			t.Errorf("%s: U %v p %.6f exact %v, want U %v p %v exact %v", tc.name, r.U, r.P, r.Exact, tc.u, tc.p, tc.exact)
		}
	}
}

// The normal approximation alone, on samples without ties.
func TestPublishedNormalApproximation(t *testing.T) {
	// wilcox.test(x, y, alternative = "greater", exact = FALSE, correct =
	// FALSE), "H&W large sample approximation": p-value = 0.1103
	if p := normalP(len(hwX), len(hwY), 35, nil, Greater, false); !near(p, 0.1103, 5e-5) {
		t.Errorf("H&W large sample: p %.6f, want 0.1103", p)
	}
	// mannwhitneyu(males, females, method="asymptotic"): p = 0.11134688653314041
	if p := normalP(len(males), len(females), 17, nil, TwoSided, true); !near(p, 0.11134688653314041, 1e-12) {
		t.Errorf("SciPy asymptotic: p %.17f, want 0.11134688653314041", p)
	}
}

// The exact distribution against counting every way of splitting the ranks
// 1..m+n between the samples.
func TestDistributionCountsEverySplit(t *testing.T) {
	for _, size := range [][2]int{{1, 1}, {2, 3}, {4, 5}, {6, 3}, {7, 7}} {
		m, n := size[0], size[1]
		counts := make([]float64, m*n+1)
		var total float64
		for mask := 0; mask < 1<<(m+n); mask++ {
			if popcount(mask) != m {
				continue
			}
			// U: for each x (a set bit), the y values (clear bits) below it.
			u, ys := 0, 0
			for b := 0; b < m+n; b++ {
				if mask&(1<<b) != 0 {
					u += ys
				} else {
					ys++
				}
			}
			counts[u]++
			total++
		}
		dist := uDistribution(m, n)
		for u := range counts {
			if !near(dist[u], counts[u]/total, 1e-12) {
				t.Errorf("m=%d n=%d: P(U=%d) = %v, want %v", m, n, u, dist[u], counts[u]/total)
			}
		}
	}
}

func popcount(v int) int {
	c := 0
	for ; v != 0; v &= v - 1 {
		c++
	}
	return c
}

// A large sample's distribution still sums to one and is symmetric.
func TestLargeDistribution(t *testing.T) {
	dist := uDistribution(49, 49)
	var sum float64
	for u, p := range dist {
		sum += p
		if !near(p, dist[len(dist)-1-u], 1e-15) {
			t.Fatalf("P(U=%d) %v differs from its mirror %v", u, p, dist[len(dist)-1-u])
		}
	}
	if !near(sum, 1, 1e-9) {
		t.Fatalf("sums to %v", sum)
	}
}

func TestShiftAndInterval(t *testing.T) {
	// y shifted by exactly 3: every estimate says 3.
	x := []float64{13, 14.5, 16, 19, 22, 23.5}
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = v - 3
	}
	r, err := Test(x, y, TwoSided, 0.95)
	if err != nil {
		t.Fatal(err)
	}
	if r.Shift != 3 || !(r.Low <= 3 && 3 <= r.High) {
		t.Fatalf("shift %v in [%v, %v], p %v", r.Shift, r.Low, r.High, r.P)
	}
	// The Hodges–Lehmann estimate is the median of the 50 differences of
	// the H&W samples: the 25th and 26th are 0.30 and 0.31.
	r, _ = Test(hwX, hwY, Greater, 0.95)
	if !near(r.Shift, 0.305, 1e-12) || !math.IsInf(r.High, 1) || r.Low >= r.Shift {
		t.Fatalf("H&W: shift %v in [%v, %v]", r.Shift, r.Low, r.High)
	}
}

// The exact interval holds at least its level: over many samples drawn
// from one distribution shifted by a known amount, it covers the shift at
// least as often as promised (less a sampling margin), and not always.
func TestIntervalCoverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range [][2]int{{8, 8}, {60, 60}} {
		const trials, shift = 2000, 1.5
		covered := 0
		for range trials {
			x, y := make([]float64, size[0]), make([]float64, size[1])
			for i := range x {
				x[i] = rng.ExpFloat64() + shift
			}
			for i := range y {
				y[i] = rng.ExpFloat64()
			}
			r, err := Test(x, y, TwoSided, 0.9)
			if err != nil {
				t.Fatal(err)
			}
			if r.Low <= shift && shift <= r.High {
				covered++
			}
		}
		rate := float64(covered) / trials
		if rate < 0.88 || rate > 0.97 {
			t.Errorf("%v: a 90%% interval covered the shift in %.3f of samples", size, rate)
		}
	}
}

func TestRefusesWhatItCannotCompare(t *testing.T) {
	for _, tc := range []struct {
		x, y  []float64
		level float64
	}{
		{nil, []float64{1}, 0.95},
		{[]float64{1}, []float64{math.NaN()}, 0.95},
		{[]float64{math.Inf(1)}, []float64{1}, 0.95},
		{[]float64{1}, []float64{2}, 1},
		{[]float64{1}, []float64{2}, 0},
	} {
		if _, err := Test(tc.x, tc.y, TwoSided, tc.level); err == nil {
			t.Errorf("%v vs %v at %v: no error", tc.x, tc.y, tc.level)
		}
	}
	// Every value tied: no evidence either way.
	r, err := Test([]float64{5, 5, 5}, []float64{5, 5}, TwoSided, 0.95)
	if err != nil || r.P != 1 || r.Shift != 0 {
		t.Errorf("all tied: %+v, %v", r, err)
	}
}

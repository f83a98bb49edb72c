package analysis

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// series is n samples around level, each off by up to ±spread (uniform).
func series(rng *rand.Rand, n int, level, spread float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = level + spread*(2*rng.Float64()-1)
	}
	return out
}

func TestCompare(t *testing.T) {
	latency := Comparison{Direction: Increase, Effect: Effect{Value: 10, Relative: true}, Confidence: 0.95, MinSamples: 10}
	success := Comparison{Direction: Decrease, Effect: Effect{Value: 0.005}, Confidence: 0.95, MinSamples: 10}
	for _, tc := range []struct {
		name              string
		cmp               Comparison
		candidate, stable func(*rand.Rand) []float64
		want              Result
		says              string
	}{
		{"30% slower, both under any fixed threshold", latency,
			func(r *rand.Rand) []float64 { return series(r, 30, 130, 15) }, func(r *rand.Rand) []float64 { return series(r, 30, 100, 15) },
			Failed, "higher by"},
		{"both slow alike (a bad dependency)", latency,
			func(r *rand.Rand) []float64 { return series(r, 30, 400, 40) }, func(r *rand.Rand) []float64 { return series(r, 30, 400, 40) },
			Passed, "within"},
		{"5% slower, within 10%", latency,
			func(r *rand.Rand) []float64 { return series(r, 30, 105, 3) }, func(r *rand.Rand) []float64 { return series(r, 30, 100, 3) },
			Passed, "within"},
		{"faster: not the bad direction", latency,
			func(r *rand.Rand) []float64 { return series(r, 30, 50, 5) }, func(r *rand.Rand) []float64 { return series(r, 30, 100, 5) },
			Passed, "within"},
		{"success rate down 2 points", success,
			func(r *rand.Rand) []float64 { return series(r, 20, 0.97, 0.005) }, func(r *rand.Rand) []float64 { return series(r, 20, 0.995, 0.004) },
			Failed, "lower by"},
		{"too little traffic", latency,
			func(r *rand.Rand) []float64 { return series(r, 4, 200, 5) }, func(r *rand.Rand) []float64 { return series(r, 30, 100, 5) },
			Inconclusive, "too few samples: 4 of the candidate and 30 of the stable, 10 needed"},
		{"either way, lower", Comparison{Direction: Either, Effect: Effect{Value: 1}, Confidence: 0.9, MinSamples: 5},
			func(r *rand.Rand) []float64 { return series(r, 12, 5, 0.5) }, func(r *rand.Rand) []float64 { return series(r, 12, 10, 0.5) },
			Failed, "lower by"},
	} {
		rng := rand.New(rand.NewPCG(7, 11))
		got := tc.cmp.Compare(tc.candidate(rng), tc.stable(rng))
		if got.Result != tc.want || !strings.Contains(got.Message, tc.says) {
			t.Errorf("%s: %s: %s (p %.3g, shift %.3g in %s, allowed %.3g)", tc.name, got.Result, got.Message, got.P, got.Shift, got.Interval(), got.Allowed)
		}
	}
}

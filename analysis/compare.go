package analysis

import (
	"fmt"
	"math"
	"slices"

	"github.com/sluicehq/sluice/ranktest"
)

// Direction is which way a comparison check's metric must not move.
type Direction string

const (
	// Increase is bad (latency, error rate).
	Increase Direction = "increase"
	// Decrease is bad (success rate, throughput).
	Decrease Direction = "decrease"
	// Either way is bad.
	Either Direction = "either"
)

// Effect is how far the candidate may move in the bad direction before the
// move counts: a share of the stable's median (Relative, in percent) or an
// amount in the metric's unit.
type Effect struct {
	Value    float64 `json:"value"`
	Relative bool    `json:"relative,omitempty"`
}

func (e Effect) String() string {
	if e.Relative {
		return FormatValue(e.Value) + "%"
	}
	return FormatValue(e.Value)
}

// Comparison is how one comparison check judges two samples of its metric,
// the candidate's and the stable's, taken over the same window.
type Comparison struct {
	Direction Direction `json:"direction"`
	Effect    Effect    `json:"effect"`
	// Confidence is the confidence level of the shift's interval (0.95).
	Confidence float64 `json:"confidence"`
	// MinSamples is the fewest samples each side needs for a verdict.
	MinSamples int `json:"minSamples"`
}

// SampleSummary describes one side's samples.
type SampleSummary struct {
	Count  int     `json:"count"`
	Mean   float64 `json:"mean"`
	Median float64 `json:"median"`
}

// CompareResult is a comparison's verdict and the figures behind it.
type CompareResult struct {
	Result    Result        `json:"result"`
	Direction Direction     `json:"direction"`
	Candidate SampleSummary `json:"candidate"`
	Stable    SampleSummary `json:"stable"`
	// P is the Mann–Whitney p-value for the bad direction (two-sided for
	// Either); Exact says it comes from U's exact distribution.
	P     float64 `json:"p"`
	Exact bool    `json:"exact,omitempty"`
	// Shift is the Hodges–Lehmann estimate of candidate minus stable, in
	// the metric's unit, and Low and High its interval at the confidence
	// (nil: unbounded, on the side a one-sided direction does not judge).
	Shift float64  `json:"shift"`
	Low   *float64 `json:"low,omitempty"`
	High  *float64 `json:"high,omitempty"`
	// Allowed is the effect in the metric's unit: how far the shift may
	// go in the bad direction.
	Allowed float64 `json:"allowed"`
	Message string  `json:"message"`
}

// Compare judges the candidate's samples against the stable's. The
// candidate fails when the whole interval of the shift lies beyond the
// allowed effect in the bad direction: the data say, at the confidence
// asked, that it moved further than allowed. A shift that may be within
// the effect passes — a comparison guards against regressions it can show,
// and says how sure it is in P and the interval. Too few samples on either
// side is inconclusive.
func (c Comparison) Compare(candidate, stable []float64) CompareResult {
	r := CompareResult{Direction: c.Direction, Candidate: summarize(candidate), Stable: summarize(stable)}
	if r.Candidate.Count < c.MinSamples || r.Stable.Count < c.MinSamples {
		r.Result = Inconclusive
		r.Message = fmt.Sprintf("too few samples: %d of the candidate and %d of the stable, %d needed on each side",
			r.Candidate.Count, r.Stable.Count, c.MinSamples)
		return r
	}
	alt := ranktest.TwoSided
	switch c.Direction {
	case Increase:
		alt = ranktest.Greater
	case Decrease:
		alt = ranktest.Less
	}
	t, err := ranktest.Test(candidate, stable, alt, c.Confidence)
	if err != nil {
		r.Result, r.Message = Error, err.Error()
		return r
	}
	r.P, r.Exact, r.Shift, r.Low, r.High = t.P, t.Exact, t.Shift, finite(t.Low), finite(t.High)
	r.Allowed = c.Effect.Value
	if c.Effect.Relative {
		r.Allowed = math.Abs(r.Stable.Median) * c.Effect.Value / 100
	}
	above, below := r.Low != nil && *r.Low > r.Allowed, r.High != nil && *r.High < -r.Allowed
	r.Result = Passed
	switch {
	case above && c.Direction != Decrease:
		r.Result = Failed
		r.Message = fmt.Sprintf("the candidate is higher by %s (%s%% interval %s), beyond the %s allowed",
			FormatValue(r.Shift), FormatValue(c.Confidence*100), r.Interval(), FormatValue(r.Allowed))
	case below && c.Direction != Increase:
		r.Result = Failed
		r.Message = fmt.Sprintf("the candidate is lower by %s (%s%% interval %s), beyond the %s allowed",
			FormatValue(-r.Shift), FormatValue(c.Confidence*100), r.Interval(), FormatValue(r.Allowed))
	default:
		r.Message = fmt.Sprintf("shift %s (%s%% interval %s) within the %s allowed",
			FormatValue(r.Shift), FormatValue(c.Confidence*100), r.Interval(), FormatValue(r.Allowed))
	}
	return r
}

func summarize(v []float64) SampleSummary {
	s := SampleSummary{Count: len(v)}
	if len(v) == 0 {
		return s
	}
	sorted := slices.Clone(v)
	slices.Sort(sorted)
	var sum float64
	for _, x := range sorted {
		sum += x
	}
	s.Mean = sum / float64(len(v))
	s.Median = sorted[len(sorted)/2]
	if len(sorted)%2 == 0 {
		s.Median = (sorted[len(sorted)/2-1] + s.Median) / 2
	}
	return s
}

// Interval renders the shift's interval, e.g. "[29, ∞)".
func (r CompareResult) Interval() string {
	lo, hi := "(-∞", "∞)"
	if r.Low != nil {
		lo = "[" + FormatValue(*r.Low)
	}
	if r.High != nil {
		hi = FormatValue(*r.High) + "]"
	}
	return lo + ", " + hi
}

// finite is v, or nil for an unbounded side.
func finite(v float64) *float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return nil
	}
	return &v
}

// AllowedText is the allowed effect with the bad direction's sign: "+10.1"
// when a rise is bad, "-0.005" when a fall is, "±2" for either.
func (r CompareResult) AllowedText() string {
	sign := map[Direction]string{Increase: "+", Decrease: "-"}[r.Direction]
	if sign == "" {
		sign = "±"
	}
	return sign + FormatValue(r.Allowed)
}

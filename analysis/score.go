package analysis

import (
	"fmt"
	"strings"
)

// Bands classify a round's score (0 to 100): at least Pass passes, at least
// Marginal is marginal (a person decides), below fails.
type Bands struct {
	Pass     float64 `json:"pass"`
	Marginal float64 `json:"marginal"`
}

// Scored is one comparison's measurement in a round, with its weight and
// whether its failure fails the round.
type Scored struct {
	Measurement Measurement
	Weight      float64
	Critical    bool
}

// Score judges a round of comparisons, the way canary judges do: the score
// is the weighted share of conclusive comparisons that passed; a critical
// comparison that failed fails the round whatever the score; when half the
// comparisons or more have no verdict (too few samples, or errors), the
// round has none either. Dry-run comparisons are left out.
func Score(round []Scored, b Bands) Measurement {
	m := Measurement{Name: "score", Kind: KindScore, Min: &b.Marginal, Max: &b.Pass}
	var total, passed float64
	var counted, unsure int
	var failed, missing []string
	for _, s := range round {
		if s.Measurement.DryRun {
			continue
		}
		counted++
		switch s.Measurement.Result {
		case Passed:
			total += s.Weight
			passed += s.Weight
		case Failed:
			total += s.Weight
			if s.Critical {
				zero := 0.0
				m.Value, m.Result = &zero, Failed
				m.Message = fmt.Sprintf("critical comparison %s failed: %s", s.Measurement.Name, s.Measurement.Message)
				return m
			}
			failed = append(failed, s.Measurement.Name)
		default:
			unsure++
			missing = append(missing, s.Measurement.Name)
		}
	}
	if counted == 0 {
		m.Result, m.Message = Inconclusive, "no comparison to score"
		return m
	}
	if 2*unsure >= counted || total == 0 {
		m.Result = Inconclusive
		m.Message = fmt.Sprintf("%d of %d comparisons had no verdict (%s)", unsure, counted, strings.Join(missing, ", "))
		return m
	}
	score := 100 * passed / total
	m.Value = &score
	switch {
	case score >= b.Pass:
		m.Result = Passed
	case score >= b.Marginal:
		m.Result = Marginal
	default:
		m.Result = Failed
	}
	var notes []string
	if len(failed) > 0 {
		notes = append(notes, "failed: "+strings.Join(failed, ", "))
	}
	if len(missing) > 0 {
		notes = append(notes, "no verdict: "+strings.Join(missing, ", "))
	}
	m.Message = strings.Join(notes, "; ")
	return m
}

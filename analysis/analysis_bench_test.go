package analysis

import (
	"testing"
	"time"
)

// BenchmarkJudge is the workflow's work after each round: record a round of
// measurements for ten checks and judge them.
func BenchmarkJudge(b *testing.B) {
	tallies := make([]Tally, 10)
	for i := range tallies {
		tallies[i] = Tally{Name: "check", Limits: Limits{Failure: 1, ConsecutiveError: 4}}
	}
	v := 0.995
	m := Measurement{Name: "check", Kind: KindCheck, Result: Passed, Value: &v, At: time.Unix(0, 0)}
	b.ReportAllocs()
	for b.Loop() {
		for i := range tallies {
			tallies[i].Record(m)
		}
		if d := Judge(tallies, false); d.Action != Continue {
			b.Fatal(d)
		}
	}
}
